"""Where a test run's time goes (docs/testing.md): per test its wall, its worker's CPU and that of the processes it
started; per run the machine's busy fraction and the run's CPU by process kind. Written to `.kaudit/test-cpu.txt`.

A process is the run's when it inherited RUN_ENV, set by the controller before the workers start; a test's when it
descends from the test's worker or inherited the worker's name, so brokers started in a new session count too. Its
CPU is its own plus that of the children it reaped: a subprocess that ended within the test counts through its
parent. The session clusters serve every worker: their CPU is in the run's figures, in no test's.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

RUN_ENV = "PYTEST_CPU_REPORT_RUN"  # not KAUDIT_: the kaudit CLI refuses KAUDIT_ names it does not know
SHARED_MARK = "/kaudit-state/"  # in the session clusters' command lines: their state dir (tests/conftest.py)
REPORT = Path(".kaudit/test-cpu.txt")
SAMPLE_EVERY_S = 2.0
TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("Kafka broker JVMs", "Spark JVMs", "other JVMs", "pytest processes", "other of this run")


def _stat(pid: str) -> tuple[int, str, float, float] | None:
    """(ppid, program and start, own CPU s, reaped children's CPU s) of a process, None when it is gone. The program
    tells a process's command line before its exec from the one after."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            comm, fields = file.read().split(" (", 1)[1].rsplit(") ", 1)
    except (OSError, IndexError, ValueError):
        return None
    fields = fields.split()
    own, children = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    return int(fields[1]), f"{comm} {fields[19]}", own / TICK, children / TICK


def _read(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as file:
            return file.read()
    except OSError:
        return b""


class Processes:
    """The machine's processes, their environment and command line read once per process."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, str], tuple[dict[str, str], str]] = {}

    def scan(self) -> dict[int, tuple[int, str, float, float]]:
        found = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := _stat(entry)):
                found[int(entry)] = stat
        return found

    def identity(self, pid: int, start: str) -> tuple[dict[str, str], str]:
        if (pid, start) not in self.known:
            pairs = (item.partition(b"=") for item in _read(pid, "environ").split(b"\0") if b"=" in item)
            env = {key.decode(errors="replace"): value.decode(errors="replace") for key, _, value in pairs}
            env = {key: env[key] for key in (RUN_ENV, "PYTEST_XDIST_WORKER") if key in env}
            self.known[(pid, start)] = env, _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")
        return self.known[(pid, start)]

    def kind(self, pid: int, ppid: int, start: str) -> str | None:
        """The kind of a process of this run, None for others; called on the controller (its workers its children)."""
        env, cmdline = self.identity(pid, start)
        if env.get(RUN_ENV) != os.environ[RUN_ENV]:
            return None
        if cmdline.split(" ", 1)[0].endswith("java"):
            return KINDS[0] if "kafka.Kafka" in cmdline else KINDS[1] if "org.apache.spark" in cmdline else KINDS[2]
        return KINDS[3] if os.getpid() in (pid, ppid) else KINDS[4]

    def of_this_worker(self) -> tuple[dict[tuple[int, str], float], set[tuple[int, str]]]:
        """CPU so far (own and reaped children's) of this worker's processes but itself and the shared clusters, and
        those of them whose parent is not the worker's nor the worker: when they end, no process of ours reaps them."""
        table = self.scan()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, *_) in table.items():
            children[ppid].append(pid)
        mine, todo = set(), list(children[os.getpid()])
        while todo:
            mine.add(pid := todo.pop())
            todo += children[pid]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        for pid, (_, start, *_) in table.items():
            env, _ = self.identity(pid, start)
            if env.get(RUN_ENV) == os.environ[RUN_ENV] and env.get("PYTEST_XDIST_WORKER", "") == worker:
                mine.add(pid)
        mine.discard(os.getpid())
        cpu, orphans = {}, set()
        for pid in mine:
            ppid, start, own, reaped = table[pid]
            if SHARED_MARK not in self.identity(pid, start)[1]:
                cpu[(pid, start)] = own + reaped
                if ppid not in mine and ppid != os.getpid():
                    orphans.add((pid, start))
        return cpu, orphans


class WorkerProcesses(threading.Thread):
    """The worker's processes, scanned at each test's end and every SAMPLE_EVERY_S between: a process that outlived
    its parent (a `kaudit` subprocess's Spark JVM) is seen orphaned, and its CPU at the last scan counted when it
    has ended (`lost`), as no process of ours reaps it."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="cpu-report-worker")
        self.processes, self.lock = Processes(), threading.Lock()
        self.orphans: dict[tuple[int, str], float] = {}
        self.lost = 0.0

    def run(self) -> None:
        while True:
            time.sleep(SAMPLE_EVERY_S)
            self.scan()

    def scan(self) -> tuple[dict[tuple[int, str], float], float]:
        with self.lock:
            cpu, orphans = self.processes.of_this_worker()
            self.lost += sum(self.orphans.pop(key) for key in list(self.orphans) if key not in cpu)
            self.orphans.update({key: cpu[key] for key in orphans})
            return cpu, self.lost + _reaped()


def _reaped() -> float:
    """CPU of this process's children that ended and were waited for."""
    times = os.times()
    return times.children_user + times.children_system


class RunSampler(threading.Thread):
    """Samples the machine's busy time (/proc/stat) and the run's CPU by process kind, on the controller."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="cpu-report")
        self.processes, self.stop = Processes(), threading.Event()
        self.by_kind: dict[str, float] = defaultdict(float)
        self.last: dict[tuple[int, str], float] = {}
        self.started, self.busy0, self.total0 = time.monotonic(), *self.machine()

    @staticmethod
    def machine() -> tuple[float, float]:
        with open("/proc/stat") as file:
            ticks = [int(value) for value in file.readline().split()[1:9]]
        return (sum(ticks) - ticks[3] - ticks[4]) / TICK, sum(ticks) / TICK  # idle, iowait

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY_S):
            self.sample()

    def sample(self) -> None:
        now = {}
        for pid, (ppid, start, own, _) in self.processes.scan().items():
            key = (pid, start)
            if kind := self.processes.kind(pid, ppid, start):
                now[key] = own
                self.by_kind[kind] += own - self.last.get(key, 0.0)
        self.last = now

    def summary(self) -> tuple[float, float, dict[str, float]]:
        self.stop.set()
        self.sample()
        busy, total = self.machine()
        return time.monotonic() - self.started, (busy - self.busy0) / max(total - self.total0, 1e-9), self.by_kind


class CpuReport:
    def __init__(self, config) -> None:
        self.config, self.records, self.processes, self.workers_down = config, [], WorkerProcesses(), set()
        self.last: tuple[dict[tuple[int, str], float], float] | None = None
        self.sampler = None if hasattr(config, "workerinput") else RunSampler()
        if self.sampler:
            self.sampler.start()
        if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):  # it runs tests
            self.processes.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        # The scan that ended the worker's last test begins this one: a scan costs some ms of CPU.
        before, ended = self.last or self.processes.scan()
        wall, own = time.monotonic(), time.process_time()
        yield
        self.last = after, ended_after = self.processes.scan()
        # A process that ended in the test counts through its parent's reaped time (or as lost), with its life before.
        ended_before = sum(cpu for key, cpu in before.items() if key not in after)
        started = sum(cpu - before.get(key, 0.0) for key, cpu in after.items()) + ended_after - ended - ended_before
        started = max(started, 0.0)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        self.records.append((item.nodeid, time.monotonic() - wall, time.process_time() - own, started, worker))

    def pytest_sessionfinish(self) -> None:
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput["cpu_report"] = self.records

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node) -> None:
        worker = node.workerinput["workerid"]
        if worker not in self.workers_down:  # an interrupted worker comes down twice
            self.workers_down.add(worker)
            self.records += [tuple(record) for record in getattr(node, "workeroutput", {}).get("cpu_report", [])]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.sampler or not self.records:  # a worker, or a run that ran no test (--collect-only)
            return
        head, tables = report(self.records, *self.sampler.summary())
        # The latest run's, and this run's own beside its temporary folders: runs in one tree at once overwrite the first.
        own = self.config._tmp_path_factory.getbasetemp() / REPORT.name
        for path in (Path(self.config.rootpath) / REPORT, own):
            path.parent.mkdir(exist_ok=True)
            path.write_text("\n".join(head + tables) + "\n")
        terminalreporter.write_sep("=", f"CPU report (in full: {REPORT}, this run's {own})")
        by_wall = sorted(self.records, key=lambda record: -record[1])
        for line in [*head, "top 15 by CPU" + HEADER, *tables[2:17], "top 15 by wall" + HEADER, *_table(by_wall[:15])]:
            terminalreporter.write_line(line)


HEADER = ":  CPU s   wall s  worker s started s  worker test"


def _table(records) -> list[str]:
    return [
        f"{own + started:8.1f} {wall:8.1f} {own:7.1f} {started:8.1f}  {worker:4} {nodeid}"
        for nodeid, wall, own, started, worker in records
    ]


def report(records, wall: float, busy: float, by_kind: dict[str, float]) -> tuple[list[str], list[str]]:
    """The run's figures, then its tests by CPU (own and started) and its modules by CPU."""
    cores, run_cpu = os.cpu_count() or 1, sum(by_kind.values())
    by_cpu = sorted(records, key=lambda record: -(record[2] + record[3]))
    kinds = ", ".join(
        f"{kind} {by_kind.get(kind, 0):.0f} s ({by_kind.get(kind, 0) / max(run_cpu, 1):.0%})" for kind in KINDS
    )
    head = [
        f"run: {wall:.0f} s wall, {len(records)} tests; machine busy {busy:.0%} of {cores} cores ({busy * wall * cores:.0f}"
        f" CPU-s), this run's processes {run_cpu:.0f} CPU-s, in tests {sum(r[2] + r[3] for r in records):.0f} CPU-s",
        f"the run's CPU by process kind: {kinds}",
    ]
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for nodeid, test_wall, own, started, _ in records:
        modules[nodeid.split("::")[0]][0] += own + started
        modules[nodeid.split("::")[0]][1] += test_wall
    by_module = sorted(modules.items(), key=lambda module: -module[1][0])
    tables = ["", "tests by CPU" + HEADER, *_table(by_cpu), "", "modules by CPU:  CPU s   wall s  module"]
    return head, tables + [f"{cpu:8.1f} {test_wall:8.1f}  {name}" for name, (cpu, test_wall) in by_module]


def pytest_configure(config) -> None:
    os.environ.setdefault(RUN_ENV, uuid.uuid4().hex)
    config.pluginmanager.register(CpuReport(config), "cpu-report")
