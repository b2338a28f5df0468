"""How the reconciliation's full run grows with its input, and what the object store costs it.

    .venv/bin/python -m bench.bench_scale [--sizes 100000,300000,1000000,3000000] [--store-size 1000000] [--rounds 1]

One pair of local Kafka clusters; for each size, its own audit topic holding about that many count
records (bench_reconcile's records: topics x 100 windows x 5 tiers, plus a status record per topic and
tier). Each size is reconciled in a full run into a new lake on local disk (local[2], one Spark session
throughout, so JVM start-up stays apart), timed end to end. Then `--store-size` is reconciled again into
a lake on a SeaweedFS object store on loopback (S3A and deltalake over HTTP with real SigV4) and on local
disk, alternating sides for `--rounds` rounds: the ratio of the medians is the object store's cost.

Before the timed runs, the smallest size is reconciled once into a throwaway lake, so the first timed run does
not carry the session's warm-up. Prints records per second per size, the straight line through the points
(a fixed cost per run plus a cost per million records) and the exponent of time against records.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from audit.books.check.python_checker import import_expectations_early
from audit.books.run import reconcile
from audit.contract.windows import window_start
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.logs import setup_logging
from audit.io.spark import session_for
from audit.local.clusters import LocalClusters
from audit.local.object_store import start_object_store
from audit.settings import Settings, load_settings
from audit.settings.storage import StorageSettings
from bench.bench_reconcile import MINUTE, PARTITIONS, TIERS, bench_settings, produce, records

WINDOWS = 100
BUCKET = "bench"


def topics_for(size: int) -> int:
    """Topics whose records (100 windows x 5 tiers each, and 4 status records) come nearest `size`."""
    return max(1, round(size / (WINDOWS * len(TIERS) + len(TIERS) - 1)))


def write_size(settings: Settings, size: int, first: int) -> int:
    """Writes about `size` records to the settings' audit topic on dc1; returns how many."""
    topics = topics_for(size)
    total = topics * WINDOWS * len(TIERS) + topics * (len(TIERS) - 1)
    dc1 = settings.cluster("dc1").bootstrap_servers
    ensure_topics({"bootstrap.servers": dc1}, {settings.audit_topic: PARTITIONS})
    print(f"writing {total:,} audit records ({topics} topics x {WINDOWS} windows x {len(TIERS)} tiers)", flush=True)
    produce(dc1, settings.audit_topic, records(topics, WINDOWS, first_window=first, sequence=f"s{size}"), total)
    return total


def full_run(spark, settings: Settings, now: int) -> float:
    """Seconds of one full reconcile run into the settings' (new) lake."""
    began = time.monotonic()
    report = reconcile(spark, settings, now_ms=now)
    seconds = time.monotonic() - began
    print(f"  {lake_of(settings)}: {seconds:.1f} s: {report.line()}", flush=True)
    return seconds


def line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(fixed seconds, seconds per million records) of the least-squares line through the points."""
    xs, ys = [n / 1e6 for n, _ in points], [t for _, t in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    per_million = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - per_million * mx, per_million


def slope(points: list[tuple[int, float]]) -> float:
    """The exponent k of time ~ records^k, by least squares over the logs (1.0: linear)."""
    xs, ys = [math.log(n) for n, _ in points], [math.log(t) for _, t in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,300000,1000000,3000000", help="records per full run")
    parser.add_argument("--store-size", type=int, default=1_000_000, help="records of the object store comparison")
    parser.add_argument("--rounds", type=int, default=1, help="object store / local disk rounds, alternated")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    setup_logging("WARNING", "kv")
    cache = load_settings().cache_dir
    with tempfile.TemporaryDirectory() as state:
        state_dir = Path(state)
        clusters = LocalClusters(["dc1", "other"], state_dir=state_dir, cache_dir=cache, quick_jit=False)
        clusters.up()
        store = start_object_store(state_dir / "store", cache)
        store.create_bucket(BUCKET)
        try:
            storage = StorageSettings(
                endpoint=store.endpoint,
                region=store.region,
                access_key_id=store.access_key_id,
                secret_access_key=store.secret_access_key,
            )
            base = bench_settings(clusters, state_dir, storage=storage)
            now = time.time_ns() // 1_000_000
            first = window_start(now - (WINDOWS + 12) * 10 * MINUTE)
            import_expectations_early()
            spark = session_for(base.replace(lake_path=f"s3a://{BUCKET}/warm-up"), "bench-scale")
            spark.sparkContext.setLogLevel("ERROR")
            timed = []
            for size in sorted(set(sizes) | {args.store_size}):
                settings = base.replace(audit_topic=f"_audit_{size}", lake_path=str(state_dir / f"lake-{size}"))
                total = write_size(settings, size, first)
                if size == min(sizes):  # warm-up, untimed: the session's first run compiles what later ones reuse
                    full_run(spark, settings.replace(lake_path=str(state_dir / "warm-up")), now)
                if size in sizes:
                    timed.append((total, full_run(spark, settings, now)))
            store_runs, disk_runs = [], []
            for round_ in range(args.rounds):
                on_store = base.replace(audit_topic=f"_audit_{args.store_size}", lake_path=f"s3a://{BUCKET}/r{round_}")
                on_disk = on_store.replace(lake_path=str(state_dir / f"disk-{round_}"))
                sides = [(on_store, store_runs), (on_disk, disk_runs)]
                for settings, runs in sides if round_ % 2 == 0 else reversed(sides):
                    runs.append(full_run(spark, settings, now))
        finally:
            store.stop()
            clusters.down()
    print()
    print("| records | full run (local[2], local disk) | records/s |")
    print("|---|---|---|")
    for total, seconds in timed:
        print(f"| {total:,} | {seconds:.1f} s | {total / seconds:,.0f} |")
    if len(timed) > 1:
        fixed, per_million = line(timed)
        print(f"time = {fixed:.1f} s + {per_million:.1f} s per million records; time ~ records^{slope(timed):.2f}")
    store_s, disk_s = statistics.median(store_runs), statistics.median(disk_runs)
    print(
        f"| {args.store_size:,} records, object store vs local disk | {store_s:.1f} s | {disk_s:.1f} s | "
        f"ratio {store_s / disk_s:.2f} (medians of {args.rounds}, sides alternated) |"
    )


if __name__ == "__main__":
    main()
