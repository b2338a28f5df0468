"""Reconciliation at scale on local Spark, against a single-process pandas baseline, in one run.

    .venv/bin/python -m bench.bench_reconcile [--topics 2000] [--windows 100] [--increment 10000]

Starts two local clusters, writes topics x windows x 5 tiers count records (1,000,000 by default)
into dc1's audit topic, then:
1. `reconcile` over all of them (Kafka read, record check with the expectation suite, dedup, Delta
   MERGEs, completeness), timed end to end;
2. the pandas baseline: the same audit messages read with confluent-kafka, parsed with the same
   contract, deduplicated, summed per (topic, window, tier) and judged by the same `classify`;
3. an increment of --increment new records (late counts for existing windows), both ways, and two more
   in the same session (the median of the three is printed);
4. a run with nothing new and no memory (every step, as before), then three in the same session as
   `--continuous` runs them (its RunMemory).
Prints seconds and records per second for each, and the ratios. Goals: 1M in under 60 s, an
increment in under 10 s, a run with nothing new in under 3 s (median).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.books.check.python_checker import import_expectations_early
from audit.books.run import RunMemory, reconcile
from audit.contract.completeness import classify
from audit.contract.record import PartitionStatus, count_record, encode, parse, status_record
from audit.contract.windows import window_start
from audit.io.clients import ensure_topics
from audit.io.logs import setup_logging
from audit.io.spark import spark_session
from audit.local.clusters import LocalClusters
from audit.settings import ClusterSettings, Settings, load_settings

TIERS = ("producer", "dc1", "dc2", "aggregate", "lake")
INCREMENTS = 3  # increments reconciled one after another in the same session
PARTITIONS = 4
MINUTE = 60_000


def records(topics: int, windows: int, *, first_window: int, sequence: str, late: bool = False):
    """Count records: for each topic and window one per tier; the lake loses 1 in every 100th window.
    Then a caught-up status record per topic and tier, so every window is final."""
    now = time.time_ns() // 1_000_000
    yield from _counts(topics, windows, first_window, sequence, late, now)
    for t in range(topics):
        for tier in TIERS[1:]:
            cluster = "aggregate" if tier == "lake" else tier
            seen = f"topic{t:05d}" if cluster == "dc1" else f"dc1.topic{t:05d}"
            yield encode(
                status_record(
                    record_id=f"{tier}-{sequence}-status:{t}",
                    tier=tier,
                    cluster=cluster,
                    topic=seen,
                    partitions=[PartitionStatus(0, 1000, 1000, 0, now)],
                    emitted_at_ms=now,
                )
            )


def _counts(topics: int, windows: int, first_window: int, sequence: str, late: bool, now: int):
    for t in range(topics):
        for w in range(windows):
            start = first_window + w * 10 * MINUTE
            for tier in TIERS:
                cluster = {"producer": "dc1", "lake": "aggregate"}.get(tier, tier)
                seen = f"topic{t:05d}" if cluster == "dc1" else f"dc1.topic{t:05d}"
                count = 1 if late else (999 if tier == "lake" and w % 100 == 0 else 1000)
                yield encode(
                    count_record(
                        record_id=f"{tier}-{sequence}:{t}.{w}",
                        tier=tier,
                        cluster=cluster,
                        topic=seen,
                        window_start_ms=start,
                        count=count,
                        bytes=count * 100,
                        by_partition={0: count},
                        emitted_at_ms=now,
                    )
                )


def bench_settings(clusters: LocalClusters, state: Path, **values) -> Settings:
    """Settings over the two local clusters of a books benchmark: dc1 its own, dc2 and the aggregate on the
    other (they only have to exist); `values` set the rest (lake_path, storage, ...)."""
    dc1, other = clusters["dc1"].bootstrap_servers, clusters["other"].bootstrap_servers
    return Settings(
        clusters=(
            ClusterSettings(name="dc1", bootstrap_servers=dc1, local=False),
            ClusterSettings(name="dc2", bootstrap_servers=other, local=False),
            ClusterSettings(name="aggregate", bootstrap_servers=other, local=False),
        ),
        state_dir=state,
        cache_dir=load_settings().cache_dir,
        **values,
    )


def produce(bootstrap: str, topic: str, payloads, total: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "acks": "all",
        }
    )
    began, sent = time.monotonic(), 0
    for payload in payloads:
        while True:
            try:
                producer.produce(topic, payload, partition=sent % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        if sent % 100_000 == 0:
            print(f"  wrote {sent:,}/{total:,} audit records ({sent / (time.monotonic() - began):,.0f}/s)", flush=True)
    producer.flush()
    return time.monotonic() - began


def pandas_baseline(
    bootstrap: str, topic: str, starts: dict[int, int], now_ms: int, grace_ms: int
) -> tuple[float, int]:
    """Read, parse, dedup, sum and judge in one process with pandas; (seconds, records)."""
    began = time.monotonic()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}", "enable.auto.commit": False}
    )
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in range(PARTITIONS)])
    rows, remaining = [], {p for p in range(PARTITIONS) if ends[p] > starts.get(p, 0)}
    while remaining:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error():
                continue
            record, _reason = parse(message.value())
            if record is not None:
                rows.append(
                    (
                        record.record_id,
                        record.tier,
                        record.topic.split(".")[-1],
                        record.window_start_ms,
                        record.count,
                        record.by_partition,
                    )
                )
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.discard(message.partition())
    consumer.close()
    frame = pd.DataFrame(rows, columns=["record_id", "tier", "topic", "window_start", "count", "by_partition"])
    frame = frame.drop_duplicates("record_id")
    sums = frame.groupby(["topic", "window_start", "tier"], as_index=False)["count"].sum()
    expected = sums[sums["tier"] == "producer"].rename(columns={"count": "expected"}).drop(columns="tier")
    observed = sums[sums["tier"] != "producer"].rename(columns={"count": "observed"})
    judged = observed.merge(expected, on=["topic", "window_start"], how="left").fillna({"expected": 0})
    judged["expected_by_partition"] = None
    judged["observed_by_partition"] = None
    judged["window_end_ms"] = judged["window_start"] + 10 * MINUTE
    judged["tier_watermark_ms"] = now_ms
    judged["threshold_pct"] = 100.0
    classify(judged, now_ms=now_ms, grace_ms=grace_ms)
    return time.monotonic() - began, len(frame)


@dataclass
class Timings:
    """Seconds of each measured run: the reconciliation's and the pandas baseline's."""

    full: float = 0.0  # reconcile over every record
    full_pandas: float = 0.0
    pandas_records: int = 0  # records the pandas baseline kept in its full run
    increment_records: int = 0  # records in each increment
    increments: list[float] = field(default_factory=list)  # reconcile, one increment after another
    increment_pandas: float = 0.0  # the pandas baseline over the first increment
    every_step: float = 0.0  # nothing new, no memory: every step, as a new process's first run
    quiet: list[float] = field(default_factory=list)  # nothing new, the same session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=2000, help="topics (default 2000)")
    parser.add_argument("--windows", type=int, default=100, help="windows per topic (default 100)")
    parser.add_argument("--increment", type=int, default=10_000, help="records in the increment (default 10000)")
    args = parser.parse_args()
    setup_logging("INFO", "kv")  # the reconciliation logs each step with its seconds
    total = args.topics * args.windows * len(TIERS) + args.topics * (len(TIERS) - 1)
    cache = load_settings().cache_dir
    with tempfile.TemporaryDirectory() as state:
        clusters = LocalClusters(["dc1", "other"], state_dir=Path(state), cache_dir=cache, quick_jit=False)
        clusters.up()
        try:
            timings = measure(args, clusters, Path(state), cache, total)
        finally:
            clusters.down()
    print_table(timings, total)


def measure(args: argparse.Namespace, clusters: LocalClusters, state: Path, cache: Path, total: int) -> Timings:
    """Write the records, then time the full run, the increments and the runs with nothing new, both ways."""
    dc1 = clusters["dc1"].bootstrap_servers
    settings = bench_settings(clusters, state, lake_path=str(state / "lake"))
    topic = settings.audit_topic
    ensure_topics({"bootstrap.servers": dc1}, {topic: PARTITIONS})
    now = time.time_ns() // 1_000_000
    first = window_start(now - (args.windows + 12) * 10 * MINUTE)
    print(f"writing {total:,} audit records ({args.topics} topics x {args.windows} windows x {len(TIERS)} tiers)")
    produce(dc1, topic, records(args.topics, args.windows, first_window=first, sequence="a"), total)
    import_expectations_early()  # as `kaudit reconcile` does, while the JVM starts
    spark = spark_session(app_name="bench-reconcile", cache_dir=cache)
    spark.sparkContext.setLogLevel("ERROR")

    timings = Timings()
    memory = RunMemory()  # one session throughout, as `kaudit reconcile --continuous` keeps it
    began = time.monotonic()
    report = reconcile(spark, settings, now_ms=now, memory=memory)
    timings.full = time.monotonic() - began
    print(f"reconcile: {report.line()}")
    timings.full_pandas, timings.pandas_records = pandas_baseline(dc1, topic, {}, now, int(settings.grace_s * 1000))
    measure_increments(timings, spark, settings, memory, increment=args.increment, first_window=first, now_ms=now)
    measure_nothing_new(timings, spark, settings, memory, now_ms=now)
    return timings


def measure_increments(
    timings: Timings, spark, settings: Settings, memory: RunMemory, *, increment: int, first_window: int, now_ms: int
) -> None:
    """INCREMENTS increments of late counts, each reconciled in the same session; the pandas baseline reads
    the first one only."""
    dc1, topic = settings.cluster("dc1").bootstrap_servers, settings.audit_topic
    increment_topics = max(increment // (len(TIERS) * 10), 1)
    consumer = Consumer({"bootstrap.servers": dc1, "group.id": "offsets"})
    starts = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)}
    consumer.close()
    timings.increment_records = increment_topics * 10 * len(TIERS) + increment_topics * (len(TIERS) - 1)
    for run in range(INCREMENTS):  # the same session, as `--continuous` meets one increment after another
        late = records(increment_topics, 10, first_window=first_window, sequence=f"late{run}", late=True)
        produce(dc1, topic, late, timings.increment_records)
        began = time.monotonic()
        again = reconcile(spark, settings, now_ms=now_ms, memory=memory)
        timings.increments.append(time.monotonic() - began)
        print(f"increment {run + 1}: {again.line()}")
        if run == 0:  # the baseline reads the first increment only: from `starts` to the end
            grace_ms = int(settings.grace_s * 1000)
            timings.increment_pandas, _ = pandas_baseline(dc1, topic, starts, now_ms, grace_ms)


def measure_nothing_new(timings: Timings, spark, settings: Settings, memory: RunMemory, *, now_ms: int) -> None:
    """A run with nothing new and no memory, then three in the same session as `--continuous` runs them."""
    began = time.monotonic()
    reconcile(spark, settings, now_ms=now_ms)  # no memory: every step, as a new process's first run
    timings.every_step = time.monotonic() - began
    for _ in range(3):
        began = time.monotonic()
        quiet = reconcile(spark, settings, now_ms=now_ms, memory=memory)
        timings.quiet.append(time.monotonic() - began)
        print(f"nothing new: {quiet.line()}")


def print_table(timings: Timings, total: int) -> None:
    ours, base = timings.full, timings.full_pandas
    ours_increment = statistics.median(timings.increments)
    print()
    print("| what | records | pandas (1 process) | reconcile (local Spark) | ratio spark/pandas time | goal |")
    print(f"| full run | {total:,} | {base:.1f} s | {ours:.1f} s | {ours / base:.2f} | under 60 s |")
    print(
        f"| increment | {timings.increment_records:,} | {timings.increment_pandas:.1f} s | {ours_increment:.1f} s "
        f"median of {INCREMENTS} ({', '.join(f'{r:.1f}' for r in timings.increments)}) | "
        f"{ours_increment / timings.increment_pandas:.2f} | under 10 s |"
    )
    print(
        f"| nothing new (same session) | 0 | every step, no memory: {timings.every_step:.1f} s | "
        f"{statistics.median(timings.quiet):.1f} s median of 3 ({', '.join(f'{q:.1f}' for q in timings.quiet)}) "
        "| | under 3 s |"
    )
    print(f"full run: {total / ours:,.0f} records/s (Spark), {timings.pandas_records / base:,.0f} records/s (pandas)")


if __name__ == "__main__":
    main()
