"""Replicator throughput and CPU against Apache MirrorMaker 2, same machine, same data, one run.

    .venv/bin/python -m bench.bench_mirror [--sizes 100,1000] [--messages 300000,100000] [--partitions 4]
    .venv/bin/python -m bench.bench_mirror --exactly-once [--sizes 100 --messages 300000]

Starts two local clusters (src, dst) in a temporary folder and, per message size, fills one source
topic once. Then each replicator runs as its own process against that topic, from the first
offset, with acks=all to the target:
  - MirrorMaker 2 4.3.1 (the brokers' Kafka version), dedicated mode, one task, heartbeats and
    checkpoints off (offset syncs stay on: the source connector refuses to run without them),
    IdentityReplicationPolicy (target topic `bench-<size>`);
  - `kaudit mirror --from src --to dst` (target topic `src.bench-<size>`).
With --exactly-once the sides are MM2 with `exactly.once.source.support = enabled` (dedicated mode,
internal REST on, as KIP-618 asks), `kaudit mirror --exactly-once` (source named `srx` in its
configuration: its own group and target topic `srx.bench-<size>`) and `kaudit mirror` at least once;
the target is then counted by a read_committed consumer (committed messages only, not offsets,
which include transaction markers), and the ratios printed are ours-eos / mm2-eos (goal >= 1.5)
and ours-eos / ours (goal >= 0.7).
Each is measured the same way: wall time from launch until the target topic holds every message,
and the process's CPU seconds (utime + stime of /proc/<pid>/stat, all threads) at that moment.
The copy phase alone (first message at the target to the last) is shown too, since a JVM and the
Connect framework take seconds to start. Prints a table and ours / MM2 for messages per CPU-second
(goal >= 1.0).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from audit.io import jvm
from audit.io.clients import ensure_topics
from audit.local.clusters import JVM_OPTIONS, LocalClusters
from audit.local.processes import free_port
from audit.settings import load_settings

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.02
TIMEOUT_S = 240.0
MM2_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
"""


@dataclass
class Result:
    name: str
    size: int
    messages: int
    wall_s: float  # launch -> every message at the target
    copy_s: float  # first message at the target -> every message
    cpu_s: float  # process CPU at the end
    copy_cpu_s: float  # process CPU spent during the copy phase

    @property
    def per_cpu_s(self) -> float:
        return self.messages / self.cpu_s

    @property
    def copy_per_cpu_s(self) -> float:
        return self.messages / self.copy_cpu_s


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="value sizes in bytes, comma-separated (default 100,1000)")
    parser.add_argument(
        "--messages", default="300000,100000", help="messages per size, comma-separated (default 300000,100000)"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of each source topic (default 4)")
    parser.add_argument("--only", choices=["ours", "mm2"], help="run one side only (while profiling)")
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
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            consumer.close()
    # A copy faster than one poll shows as one poll and one clock tick, never as zero.
    copy_s, copy_cpu_s = max(now - first_at, POLL_S), max(end_cpu - first_cpu, 1 / CLOCK_TICKS)
    return Result(name, size, messages, wall_s=now - began, copy_s=copy_s, cpu_s=end_cpu, copy_cpu_s=copy_cpu_s)


def mm2_command(folder: Path, src: str, dst: str, topic: str, *, exactly_once: bool = False) -> list[str]:
    properties = folder / f"mm2-{topic}{'-eos' if exactly_once else ''}.properties"
    eos = (
        [
            "dst.exactly.once.source.support = enabled",
            "dedicated.mode.enable.internal.rest = true",
            f"listeners = http://127.0.0.1:{free_port()}",
            "src.consumer.isolation.level = read_committed",
        ]
        if exactly_once
        else []
    )
    properties.write_text(
        "\n".join(
            [
                "clusters = src, dst",
                f"src.bootstrap.servers = {src}",
                f"dst.bootstrap.servers = {dst}",
                "src->dst.enabled = true",
                "dst->src.enabled = false",
                f"src->dst.topics = {topic}",
                "tasks.max = 1",
                "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
                "replication.factor = 1",
                "offset-syncs.topic.replication.factor = 1",
                "heartbeats.topic.replication.factor = 1",
                "checkpoints.topic.replication.factor = 1",
                "config.storage.replication.factor = 1",
                "offset.storage.replication.factor = 1",
                "status.storage.replication.factor = 1",
                "emit.heartbeats.enabled = false",
                "emit.checkpoints.enabled = false",
                "sync.group.offsets.enabled = false",
                "sync.topic.acls.enabled = false",
                "refresh.topics.interval.seconds = 5",
                "dst.producer.acks = all",
                "dst.producer.enable.idempotence = true",
                "src.consumer.auto.offset.reset = earliest",
                *eos,
                "",
            ]
        )
    )
    log4j = folder / "mm2-log4j2.properties"
    log4j.write_text(MM2_LOG4J2.format(log=folder / "mm2.log"))
    return [
        jvm.java_executable(),
        "-Xms256m",
        "-Xmx1024m",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        jvm.classpath(load_settings().cache_dir, jvm.MIRRORMAKER_JARS),
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(properties),
        "--clusters",
        "dst",
    ]


def ours_command(folder: Path, src: str, dst: str, topic: str, *, exactly_once: bool = False) -> list[str]:
    source = "srx" if exactly_once else "src"  # its own group and target topic, on the same source cluster
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


def print_table(results: list[Result]) -> None:
    print()
    print(
        f"{'replicator':<10} {'size':>6} {'messages':>9} {'wall s':>7} {'msg/s':>9} {'CPU s':>7} {'msg/CPU-s':>10} "
        f"{'copy s':>7} {'copy msg/s':>10} {'copy CPU s':>10} {'copy msg/CPU-s':>14}"
    )
    for r in results:
        print(
            f"{r.name:<10} {r.size:>5}B {r.messages:>9,} {r.wall_s:>7.1f} {r.messages / r.wall_s:>9,.0f} {r.cpu_s:>7.1f} "
            f"{r.per_cpu_s:>10,.0f} {r.copy_s:>7.1f} {r.messages / r.copy_s:>10,.0f} {r.copy_cpu_s:>10.1f} {r.copy_per_cpu_s:>14,.0f}"
        )
    by = {(r.name, r.size): r for r in results}
    for size in sorted({r.size for r in results}):
        eos, mm2_eos, alo = by.get(("ours-eos", size)), by.get(("mm2-eos", size)), by.get(("ours", size))
        if eos and mm2_eos:
            print(
                f"{size} B: ours-eos/mm2-eos msg per CPU-s {eos.per_cpu_s / mm2_eos.per_cpu_s:.2f} (goal >= 1.50), "
                f"copy phase {eos.copy_per_cpu_s / mm2_eos.copy_per_cpu_s:.2f}"
            )
        if eos and alo:
            print(
                f"{size} B: ours-eos/ours msg per CPU-s {eos.per_cpu_s / alo.per_cpu_s:.2f} (goal >= 0.70), "
                f"copy phase {eos.copy_per_cpu_s / alo.copy_per_cpu_s:.2f}"
            )
    for size in sorted({r.size for r in results}):
        ours, mm2 = by.get(("ours", size)), by.get(("mm2", size))
        if ours and mm2:
            print(
                f"{size} B: ours/MM2 msg per CPU-s {ours.per_cpu_s / mm2.per_cpu_s:.2f} (goal >= 1.00), "
                f"copy phase {ours.copy_per_cpu_s / mm2.copy_per_cpu_s:.2f}; "
                f"msg/s {mm2.wall_s / ours.wall_s:.2f}, copy phase {mm2.copy_s / ours.copy_s:.2f}"
            )


def exactly_once_sides(
    folder: Path, src: str, dst: str, topic: str, size: int, messages: int, partitions: int
) -> list[Result]:
    sides = [
        ("mm2-eos", mm2_command(folder, src, dst, topic, exactly_once=True), topic),
        ("ours-eos", ours_command(folder, src, dst, topic, exactly_once=True), f"srx.{topic}"),
        ("ours", ours_command(folder, src, dst, topic), f"src.{topic}"),
    ]
    results = []
    for name, command, target_topic in sides:
        log_path = folder / f"{name}-{size}.out"
        results.append(measure(name, size, messages, command, dst, target_topic, partitions, log_path, committed=True))
        print(f"{name} {size} B done", flush=True)
    return results


def main() -> None:
    args = parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        folder = Path(tmp)
        clusters = LocalClusters(
            ["src", "dst"], state_dir=folder, cache_dir=load_settings().cache_dir, heap_mb=1024, quick_jit=False
        )
        print(f"clusters ready in {max(clusters.up().values()):.1f} s", flush=True)
        try:
            src, dst = clusters["src"].bootstrap_servers, clusters["dst"].bootstrap_servers
            for size, messages in zip(args.sizes, args.messages):
                topic = f"bench-{size}"
                ensure_topics({"bootstrap.servers": src}, {topic: args.partitions})
                fill(src, topic, messages, size, args.partitions)
                if args.exactly_once:
                    results += exactly_once_sides(folder, src, dst, topic, size, messages, args.partitions)
                    continue
                if args.only != "ours":
                    results.append(
                        measure(
                            "mm2",
                            size,
                            messages,
                            mm2_command(folder, src, dst, topic),
                            dst,
                            topic,
                            args.partitions,
                            folder / f"mm2-{size}.out",
                        )
                    )
                    print(f"mm2 {size} B done", flush=True)
                if args.only != "mm2":
                    results.append(
                        measure(
                            "ours",
                            size,
                            messages,
                            ours_command(folder, src, dst, topic),
                            dst,
                            f"src.{topic}",
                            args.partitions,
                            folder / f"ours-{size}.out",
                        )
                    )
                    print(f"ours {size} B done", flush=True)
        finally:
            clusters.down()
    print_table(results)


if __name__ == "__main__":
    main()
