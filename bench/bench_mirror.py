"""Replicator throughput and CPU against Apache MirrorMaker 2, stock and tuned, same machine, same data, one run.

    .venv/bin/python -m bench.bench_mirror [--sizes 100,1000] [--messages 300000,100000] [--partitions 4] [--rounds 3]
    .venv/bin/python -m bench.bench_mirror --exactly-once [--sizes 100 --messages 300000]

Starts two local clusters (src, dst) in a temporary folder and, per message size, fills one source
topic once. Then each replicator runs as its own process against that topic, from the first
offset, with acks=all to the target, the sides alternating, `--rounds` rounds of each (default 3):
  - `ours`: `kaudit mirror --from <name> --to dst --naming prefix`;
  - `mm2`: MirrorMaker 2 4.3.1 (the brokers' Kafka version), dedicated mode, stock client settings
    but acks=all and idempotence, one task, heartbeats and checkpoints off (offset syncs stay on:
    the source connector refuses to run without them);
  - `mm2-tuned`: the same MirrorMaker 2 configuration plus the throughput settings its documentation
    suggests (MM2_TUNING): `tasks.max` (--mm2-tasks, default the source partitions or the cores if
    fewer), the target producer's `batch.size` and `linger.ms`, the source consumer's `fetch.min.bytes`.
Each run names the source cluster afresh (`o1`, `m1`, `t1` in round 1, `o2`, ... in round 2), so it
has its own consumer group, Connect topics and target topic `<name>.bench-<size>` (both replicators
prefix the target topic with the source's name) and copies the whole topic from its first offset.
With --exactly-once the sides are MM2 with `exactly.once.source.support = enabled` (dedicated mode,
internal REST on, as KIP-618 asks) (`mm2-eos`), `kaudit mirror --exactly-once` (`ours-eos`) and
`kaudit mirror` at least once (`ours`); the target is then counted by a read_committed consumer
(committed messages only, not offsets, which include transaction markers), and the ratios printed
are ours-eos / mm2-eos (goal >= 1.5) and ours-eos / ours (goal >= 0.7), whole run.
Each run is measured the same way: wall time from launch until the target topic holds every
message, and the process's CPU seconds (utime + stime of /proc/<pid>/stat, all threads) then. The
copy phase (first message at the target to the last) leaves out start-up (a JVM and the Connect
framework take seconds), and its messages per CPU-second, median of the rounds, are the headline:
ours / mm2 and ours / mm2-tuned (goal >= 1.0). The whole run's figures, start-up included, follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from audit.io.clients import ensure_topics
from audit.local import mirrormaker2
from audit.local.clusters import LocalClusters
from audit.local.mirrormaker2 import mm2_properties
from audit.local.processes import terminate
from audit.settings import load_settings

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.02
TIMEOUT_S = 240.0
# What `mm2-tuned` adds to the stock MM2 configuration: the throughput settings MirrorMaker 2's documentation
# suggests, in its dedicated mode's form (`<target>.producer.*` for the producer writing to the target,
# `<source>.consumer.*` for the consumer reading the source). {source}, {target}, {tasks}: filled per run.
MM2_TUNING = {
    "tasks.max": "{tasks}",
    "{target}.producer.batch.size": "262144",
    "{target}.producer.linger.ms": "20",
    "{source}.consumer.fetch.min.bytes": "65536",
}
SIDES = ("ours", "mm2", "mm2-tuned")


@dataclass
class Result:
    name: str
    size: int
    messages: int
    wall_s: float  # launch -> every message at the target
    copy_s: float  # first message at the target -> every message
    cpu_s: float  # process CPU at the end
    copy_cpu_s: float  # process CPU spent during the copy phase
    round: int = 0

    @property
    def per_cpu_s(self) -> float:
        return self.messages / self.cpu_s

    @property
    def copy_per_cpu_s(self) -> float:
        return self.messages / self.copy_cpu_s

    @property
    def per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def copy_per_s(self) -> float:
        return self.messages / self.copy_s


@dataclass(frozen=True)
class Side:
    name: str
    prefix: str  # of the source cluster's name in each run: `<prefix><round>`
    command: Callable[[str], list[str]]  # the source cluster's name -> the process's argv


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="value sizes in bytes, comma-separated (default 100,1000)")
    parser.add_argument(
        "--messages", default="300000,100000", help="messages per size, comma-separated (default 300000,100000)"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of each source topic (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternating (default 3)")
    parser.add_argument(
        "--mm2-tasks", type=int, help="tasks.max of mm2-tuned (default the partitions, or the cores if fewer)"
    )
    parser.add_argument("--only", help=f"run these sides only, comma-separated, of {', '.join(SIDES)} (profiling)")
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="compare the exactly-once modes: MM2's, ours, and ours at least once (see above)",
    )
    args = parser.parse_args()
    args.sizes = [int(v) for v in args.sizes.split(",")]
    args.messages = [int(v) for v in args.messages.split(",")]
    if len(args.sizes) != len(args.messages):
        parser.error(f"--sizes {args.sizes} and --messages {args.messages} need as many entries")
    args.only = args.only.split(",") if args.only else list(SIDES)
    if unknown := set(args.only) - set(SIDES):
        parser.error(f"--only: no side {', '.join(sorted(unknown))} (sides: {', '.join(SIDES)})")
    args.mm2_tasks = args.mm2_tasks or min(args.partitions, len(os.sched_getaffinity(0)))
    return args


def cpu_s(pid: int) -> float:
    """utime + stime of a process, all its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of stat(5)


def fill(bootstrap: str, topic: str, messages: int, size: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50, "batch.size": 1_000_000})
    value = (os.urandom(64) * (size // 64 + 1))[:size]
    began = time.monotonic()
    for i in range(messages):
        while True:
            try:
                producer.produce(
                    topic, value=value, key=b"%d" % (i % 1000), partition=i % partitions, headers=[("seq", b"%d" % i)]
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    print(f"filled {topic}: {messages:,} x {size} B in {time.monotonic() - began:.1f} s", flush=True)


def target_count(consumer: Consumer, topic: str, partitions: int) -> int:
    total = 0
    for partition in range(partitions):
        try:
            total += consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)[1]
        except Exception:  # the topic does not exist yet
            return 0
    return total


class CommittedCount:
    """Messages a read_committed reader of `topic` has seen so far (transaction markers left out)."""

    def __init__(self, consumer: Consumer, topic: str, partitions: int) -> None:
        self.consumer, self.topic, self.partitions = consumer, topic, partitions
        self.assigned = False
        self.count = 0

    def __call__(self) -> int:
        if not self.assigned:
            if self.topic not in self.consumer.list_topics(timeout=5).topics:
                return 0
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            self.assigned = True
        # One batch a call, so the loop in `measure` keeps looking at the target's first message often.
        batch = self.consumer.consume(10_000, timeout=0.01)
        self.count += sum(1 for message in batch if message.error() is None)
        return self.count


def measure(
    name: str,
    size: int,
    messages: int,
    command: list[str],
    target: str,
    topic: str,
    partitions: int,
    log_path: Path,
    *,
    committed: bool = False,
) -> Result:
    """Launch `command`, wait until `topic` at `target` holds `messages`, stop it; its figures."""
    consumer = Consumer(
        {
            "bootstrap.servers": target,
            "group.id": "bench-watch",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    committed_count = CommittedCount(consumer, topic, partitions) if committed else None
    with open(log_path, "w") as log:
        began = time.monotonic()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        first_at = first_cpu = None
        try:
            while True:
                # The first message written (committed or not) starts the copy phase; the last committed ends it.
                written = target_count(consumer, topic, partitions)
                count = committed_count() if committed_count else written
                now = time.monotonic()
                if written and first_at is None:
                    first_at, first_cpu = now, cpu_s(process.pid)
                if count >= messages:
                    end_cpu = cpu_s(process.pid)
                    break
                if process.poll() is not None:
                    raise SystemExit(f"{name} exited with {process.returncode}; see {log_path}")
                if now - began > TIMEOUT_S:
                    raise SystemExit(
                        f"{name}: only {count:,} of {messages:,} at the target after {TIMEOUT_S:.0f} s; see {log_path}"
                    )
                time.sleep(POLL_S)
        finally:
            terminate({process.pid}, 60)
            consumer.close()
    # A copy faster than one poll shows as one poll and one clock tick, never as zero.
    copy_s, copy_cpu_s = max(now - first_at, POLL_S), max(end_cpu - first_cpu, 1 / CLOCK_TICKS)
    return Result(name, size, messages, wall_s=now - began, copy_s=copy_s, cpu_s=end_cpu, copy_cpu_s=copy_cpu_s)


def mm2_command(
    folder: Path, src: str, dst: str, topic: str, source: str, *, exactly_once: bool = False, tasks: int = 0
) -> list[str]:
    """MirrorMaker 2 from `source`, stock, or tuned with MM2_TUNING when `tasks` is given."""
    fill_in = {"source": source, "target": "dst", "tasks": tasks}
    tuning = {key.format(**fill_in): value.format(**fill_in) for key, value in MM2_TUNING.items()} if tasks else {}
    properties = mm2_properties({source: src, "dst": dst}, source, "dst", topic, exactly_once=exactly_once)
    return mirrormaker2.mm2_command(
        folder, f"mm2-{source}-{topic}", properties | tuning, "dst", load_settings().cache_dir
    )


def ours_command(folder: Path, src: str, dst: str, topic: str, source: str, *, exactly_once: bool = False) -> list[str]:
    """`kaudit mirror` from `source` (its own group and target topic `<source>.<topic>`, on the source cluster)."""
    config = folder / f"kaudit-{topic}-{source}.toml"
    config.write_text(
        f'state_dir = "{folder}"\naudit_topic = "_audit"\n[topics]\ninclude = ["^{topic}$"]\n'
        f'[[clusters]]\nname = "{source}"\nbootstrap_servers = "{src}"\nlocal = false\n'
        f'[[clusters]]\nname = "dst"\nbootstrap_servers = "{dst}"\nlocal = false\n'
    )
    return [
        sys.executable,
        "-m",
        "audit.cli",
        "--config",
        str(config),
        "--log-level",
        "WARNING",
        "mirror",
        "--from",
        source,
        "--to",
        "dst",
        "--naming",
        "prefix",
        "--exactly-once" if exactly_once else "--no-exactly-once",
    ]


def sides(folder: Path, src: str, dst: str, topic: str, args: argparse.Namespace) -> list[Side]:
    """The sides of one message size, in the order each round runs them."""
    mm2, ours = partial(mm2_command, folder, src, dst, topic), partial(ours_command, folder, src, dst, topic)
    if args.exactly_once:
        return [
            Side("mm2-eos", "e", partial(mm2, exactly_once=True)),
            Side("ours-eos", "x", partial(ours, exactly_once=True)),
            Side("ours", "o", ours),
        ]
    every = [Side("ours", "o", ours), Side("mm2", "m", mm2), Side("mm2-tuned", "t", partial(mm2, tasks=args.mm2_tasks))]
    return [side for side in every if side.name in args.only]


def run_rounds(
    folder: Path, src: str, dst: str, topic: str, size: int, messages: int, args: argparse.Namespace
) -> list[Result]:
    """`args.rounds` runs of each side over the filled `topic`, alternating; each run's result."""
    results = []
    for round_ in range(1, args.rounds + 1):
        for side in sides(folder, src, dst, topic, args):
            source = f"{side.prefix}{round_}"
            log_path = folder / f"{side.name}-{size}-{round_}.out"
            result = measure(
                side.name,
                size,
                messages,
                side.command(source),
                dst,
                f"{source}.{topic}",
                args.partitions,
                log_path,
                committed=args.exactly_once,
            )
            results.append(dataclasses.replace(result, round=round_))
            print(
                f"round {round_} {side.name} {size} B: copy phase {result.copy_per_cpu_s:,.0f} msg/CPU-s "
                f"({result.copy_s:.1f} s), whole run {result.per_cpu_s:,.0f} msg/CPU-s ({result.wall_s:.1f} s)",
                flush=True,
            )
    return results


def print_table(results: list[Result]) -> None:
    print()
    print(
        f"{'replicator':<10} {'round':>5} {'size':>6} {'messages':>9} {'wall s':>7} {'msg/s':>9} {'CPU s':>7} "
        f"{'msg/CPU-s':>10} {'copy s':>7} {'copy msg/s':>10} {'copy CPU s':>10} {'copy msg/CPU-s':>14}"
    )
    for r in results:
        print(
            f"{r.name:<10} {r.round:>5} {r.size:>5}B {r.messages:>9,} {r.wall_s:>7.1f} {r.per_s:>9,.0f} "
            f"{r.cpu_s:>7.1f} {r.per_cpu_s:>10,.0f} {r.copy_s:>7.1f} {r.copy_per_s:>10,.0f} {r.copy_cpu_s:>10.1f} "
            f"{r.copy_per_cpu_s:>14,.0f}"
        )


def medians(results: list[Result]) -> dict[tuple[str, int], dict[str, float]]:
    """Per side and size, the median over the rounds of each rate."""
    by: dict[tuple[str, int], list[Result]] = {}
    for r in results:
        by.setdefault((r.name, r.size), []).append(r)
    rates = ("per_s", "per_cpu_s", "copy_per_s", "copy_per_cpu_s")
    return {
        key: {rate: statistics.median(getattr(r, rate) for r in runs) for rate in rates} for key, runs in by.items()
    }


def print_medians(results: list[Result], rounds: int) -> None:
    table = medians(results)
    print(f"\nmedians of {rounds} rounds, messages per CPU-second and per second:")
    for (name, size), m in table.items():
        print(
            f"{name:<10} {size:>5}B  copy phase {m['copy_per_cpu_s']:>10,.0f} msg/CPU-s {m['copy_per_s']:>10,.0f} msg/s"
            f"  whole run {m['per_cpu_s']:>10,.0f} msg/CPU-s {m['per_s']:>10,.0f} msg/s"
        )
    print()
    for size in sorted({size for _, size in table}):
        ours, eos = table.get(("ours", size)), table.get(("ours-eos", size))
        if eos and (mm2_eos := table.get(("mm2-eos", size))):
            print(
                f"{size} B: ours-eos/mm2-eos msg per CPU-s, whole run {ratio(eos, mm2_eos, 'per_cpu_s')} (goal >= 1.50)"
            )
        if eos and ours:
            print(f"{size} B: ours-eos/ours msg per CPU-s, whole run {ratio(eos, ours, 'per_cpu_s')} (goal >= 0.70)")
        baselines = [(name, table[(name, size)]) for name in ("mm2", "mm2-tuned") if (name, size) in table]
        if ours and baselines and not eos:
            print(
                f"{size} B, copy phase: msg per CPU-s "
                + ", ".join(f"ours/{name} {ratio(ours, base, 'copy_per_cpu_s')}" for name, base in baselines)
                + " (goal >= 1.00); msg/s "
                + ", ".join(f"ours/{name} {ratio(ours, base, 'copy_per_s')}" for name, base in baselines)
            )
            print(
                f"{size} B, whole run (start-up included): msg per CPU-s "
                + ", ".join(f"ours/{name} {ratio(ours, base, 'per_cpu_s')}" for name, base in baselines)
                + "; msg/s "
                + ", ".join(f"ours/{name} {ratio(ours, base, 'per_s')}" for name, base in baselines)
            )


def ratio(ours: dict[str, float], base: dict[str, float], rate: str) -> str:
    return f"{ours[rate] / base[rate]:.2f}"


def main() -> None:
    args = parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        folder = Path(tmp)
        clusters = LocalClusters(
            ["src", "dst"], state_dir=folder, cache_dir=load_settings().cache_dir, heap_mb=1024, quick_jit=False
        )
        print(f"clusters ready in {max(clusters.up().values()):.1f} s", flush=True)
        if not args.exactly_once:
            tuning = ", ".join(f"{key} = {value}" for key, value in MM2_TUNING.items()).format(
                source="<source>", target="<target>", tasks=args.mm2_tasks
            )
            print(f"mm2-tuned: stock plus {tuning}", flush=True)
        try:
            src, dst = clusters["src"].bootstrap_servers, clusters["dst"].bootstrap_servers
            for size, messages in zip(args.sizes, args.messages):
                topic = f"bench-{size}"
                ensure_topics({"bootstrap.servers": src}, {topic: args.partitions})
                fill(src, topic, messages, size, args.partitions)
                results += run_rounds(folder, src, dst, topic, size, messages, args)
        finally:
            clusters.down()
    print_table(results)
    print_medians(results, args.rounds)


if __name__ == "__main__":
    main()
