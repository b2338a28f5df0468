"""Running kaudit services as child processes: the demo and the soak start, watch, kill and stop them.

Each service is `python -m audit.cli [--config FILE] <command ...>` with its output in
`<state_dir>/logs/<name>.log` and its pid in `<state_dir>/run/<name>.pid`, so `kaudit down` (and
`make down`) can stop whatever a demo left running, even from another shell.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from audit.contract.errors import HarnessError
from audit.local.processes import pid_alive, terminate

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0


@dataclass
class Service:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class Supervisor:
    """Starts named kaudit commands and stops them; one per demo or soak run."""

    def __init__(self, state_dir: Path, *, config: Path | None = None, env: Mapping[str, str] | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.config = config
        self.env = {**os.environ, **(env or {})}
        self.services: dict[str, Service] = {}
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "run").mkdir(parents=True, exist_ok=True)

    def command(self, *args: str) -> list[str]:
        config = ["--config", str(self.config)] if self.config else []
        return [sys.executable, "-m", "audit.cli", *config, *args]

    def start(self, name: str, *args: str) -> Service:
        """Start `kaudit <args>` as service `name` (replacing a dead one of that name)."""
        if name in self.services and self.services[name].alive:
            raise HarnessError(f"service {name} is already running (pid {self.services[name].process.pid})")
        log_path = self.state_dir / "logs" / f"{name}.log"
        argv = self.command(*args)
        with open(log_path, "ab") as output:
            process = subprocess.Popen(
                argv, stdout=output, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )  # Ctrl-C in the terminal reaches us, not them
        self._pid_file(name).write_text(str(process.pid))
        service = self.services[name] = Service(name, argv, log_path, process)
        log.info("service started", extra={"service": name, "pid": process.pid})
        return service

    def run(self, *args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
        """Run `kaudit <args>` to completion (a one-off step), output captured."""
        return subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env, timeout=timeout_s)

    def kill(self, name: str) -> None:
        """SIGKILL: the crash the exactly-once and at-least-once paths must survive."""
        service = self.services[name]
        if service.alive:
            service.process.send_signal(signal.SIGKILL)
            service.process.wait(STOP_TIMEOUT_S)
        log.warning("service killed", extra={"service": name})

    def restart(self, name: str) -> Service:
        service = self.services[name]
        if service.alive:
            self.stop(name)
        return self.start(name, *service.argv[len(self.command()) :])

    def stop(self, name: str, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (services drain and commit), then SIGKILL after `timeout_s`; returns the exit code."""
        self.stop_all([name], timeout_s)
        return self.services[name].process.returncode

    def stop_all(self, names: Iterable[str] | None = None, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, float]:
        """SIGTERM to the named services (default: every one) at once, SIGKILL to any still running after
        `timeout_s`; returns the seconds each took to exit (0 for one that was not running). At once, because
        a Spark job takes seconds to stop, and one after the other they add up."""
        names = list(self.services) if names is None else list(names)
        began = time.monotonic()
        took = {name: 0.0 for name in names}
        running = {name: self.services[name].process for name in names if self.services[name].alive}
        for process in running.values():
            process.send_signal(signal.SIGTERM)
        while running and time.monotonic() - began < timeout_s:
            for name in [name for name, process in running.items() if process.poll() is not None]:
                took[name] = time.monotonic() - began
                del running[name]
            time.sleep(0.1)
        for name, process in running.items():
            log.error("service ignored SIGTERM; killing", extra={"service": name, "timeout_s": timeout_s})
            process.kill()
            process.wait(timeout_s)
            took[name] = time.monotonic() - began
        for name in names:
            self._pid_file(name).unlink(missing_ok=True)
        return took

    def _pid_file(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"


def stop_leftovers(state_dir: Path, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """Stop every service whose pid file is under `state_dir/run` (what `kaudit down` does first)."""
    stopped = []
    for pid_file in sorted((Path(state_dir) / "run").glob("*.pid")):
        try:
            pid = int(pid_file.read_text())
        except ValueError:
            pid_file.unlink(missing_ok=True)
            continue
        if pid_alive(pid):
            terminate({pid}, timeout_s)
            stopped.append(pid_file.stem)
        pid_file.unlink(missing_ok=True)
    return stopped


def count_in_log(path: Path, needle: str, since: int = 0) -> int:
    """Occurrences of `needle` in the file from byte `since` on."""
    try:
        with open(path, "rb") as handle:
            handle.seek(since)
            return handle.read().decode(errors="replace").count(needle)
    except FileNotFoundError:
        return 0


def log_tail(path: Path, n: int) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])[-600:]
    except FileNotFoundError:
        return "(no log)"
