"""A month in an hour: `reconcile --continuous` for many runs of steady traffic, with maintenance on and off.

    .venv/bin/python -m bench.bench_month [--runs 1000] [--topics 20] [--windows-per-run 4] [--store]

One pair of local Kafka clusters. Before each run, the next `--windows-per-run` 10-minute windows of
`--topics` topics get their count records (5 tiers) and status records, as counters that flush steadily
would write them; event time starts a month back, so 1,000 runs of 4 windows cover about 28 days. Each
run is `reconcile` in one session with its RunMemory, as `--continuous` runs it. With maintenance on, the
continuous loop's own schedule (`MaintenanceSchedule`, the default settings) runs between runs on a clock that
advances `--interval-s` per run: a full pass every `maintenance.interval_s` (360 runs at 10 s) and a compaction
pass every `maintenance.compact_every_runs` runs that wrote.

Both sides share the same audit topics (one is written and read by both lakes in turn, sides alternating
run by run), so they read the same records. At runs 10, 100, 500 and the last, prints per side the median
run time of the ten runs up to it, the mean time of the maintenance after them, the UI overview's load time
(a new LakeCache: cold), and the files and log entries of each table, and last the maintained lake's tables compacted in full. Goal with maintenance on:
the last run within 20 % of run 10, no table over twice the files of a freshly compacted one. `--store` puts both lakes on a SeaweedFS object store.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from audit.books.check.python_checker import import_expectations_early
from audit.books.run import RunMemory, reconcile
from audit.contract.windows import window_start
from audit.io.clients import ensure_topics
from audit.io.lake import Lake, lake_of
from audit.io.logs import setup_logging
from audit.io.maintenance import MaintenanceSchedule, log_listing
from audit.io.spark import session_for
from audit.local.clusters import LocalClusters
from audit.local.object_store import start_object_store
from audit.settings import Settings, load_settings
from audit.settings.storage import StorageSettings
from bench.bench_reconcile import MINUTE, PARTITIONS, TIERS, bench_settings, produce, records

REPORTED_AT = (10, 100, 500)
SHOWN_TABLES = ("audit_records", "tier_counts", "completeness", "tier_status", "_reconcile_offsets")


def overview_seconds(lake: Lake, settings: Settings) -> float:
    """Seconds for the UI's overview data from a new cache, as a new `kaudit ui` process loads it."""
    from dashboards.data import LakeCache, overview_data

    began = time.perf_counter()
    cache = LakeCache(lake, refresh_s=settings.ui.refresh_s, days=settings.ui.days)
    overview_data(cache.table("completeness"), cache.frame("tier_status"), range_key="7d", search=None)
    return time.perf_counter() - began


def table_sizes(lake: Lake) -> dict[str, tuple[int, int]]:
    """(data files, log entries) of each shown table."""
    sizes = {}
    for name in SHOWN_TABLES:
        if lake.version(name) is None:
            continue
        commits, _checkpoints = log_listing(lake, name)
        sizes[name] = (len(lake.delta_table(name).file_uris()), len(commits))
    return sizes


class Side:
    """One lake and its session memory: maintenance on or off."""

    def __init__(self, settings: Settings, maintained: bool, interval_s: float) -> None:
        self.settings, self.maintained, self.memory = settings, maintained, RunMemory()
        self.run_seconds: list[float] = []
        self.maintenance_seconds: list[float] = []  # per run: the pass after it, 0 when none was due
        self.clock_s, self.interval_s = 0.0, interval_s  # the continuous loop's time, one interval per run
        self.schedule = MaintenanceSchedule(settings, clock=lambda: self.clock_s) if maintained else None

    @property
    def name(self) -> str:
        return "maintenance on" if self.maintained else "maintenance off"

    def run(self, spark, now: int) -> None:
        began = time.monotonic()
        report = reconcile(spark, self.settings, now_ms=now, memory=self.memory)
        self.run_seconds.append(time.monotonic() - began)
        self.clock_s += self.interval_s
        began = time.monotonic()
        if self.schedule is not None:
            self.schedule.between_runs(None, 0.0, wrote=not report.quiet)
        self.maintenance_seconds.append(time.monotonic() - began)

    def report(self, run: int) -> str:
        lake = lake_of(self.settings)
        recent = statistics.median(self.run_seconds[-10:])
        upkeep = statistics.mean(self.maintenance_seconds[-10:])
        sizes = ", ".join(f"{name} {files} files/{logs} log" for name, (files, logs) in table_sizes(lake).items())
        ui_s = overview_seconds(lake, self.settings)
        return f"| {run} | {self.name} | {recent:.2f} s | {upkeep:.2f} s | {ui_s:.2f} s | {sizes} |"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="runs per side (default 1000)")
    parser.add_argument("--topics", type=int, default=20, help="topics (default 20)")
    parser.add_argument("--windows-per-run", type=int, default=4, help="new windows before each run (default 4)")
    parser.add_argument(
        "--interval-s", type=float, default=10.0, help="seconds of the continuous loop's clock per run (default 10)"
    )
    parser.add_argument(
        "--off-runs", type=int, help="stop the side without maintenance after this many runs (default: --runs)"
    )
    parser.add_argument("--store", action="store_true", help="both lakes on a SeaweedFS object store")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    setup_logging("WARNING", "kv")
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)
        clusters = LocalClusters(["dc1", "other"], state_dir=state, cache_dir=load_settings().cache_dir)
        clusters.up()
        store = start_object_store(state / "store", load_settings().cache_dir) if args.store else None
        try:
            storage = None
            if store:
                store.create_bucket("month")
                storage = StorageSettings(
                    endpoint=store.endpoint,
                    access_key_id=store.access_key_id,
                    secret_access_key=store.secret_access_key,
                )
            base = bench_settings(clusters, state, storage=storage or StorageSettings())
            root = "s3a://month" if store else str(state)
            sides = [
                Side(base.replace(lake_path=f"{root}/{name}"), name == "on", args.interval_s) for name in ("on", "off")
            ]
            lines = simulate(args, base, sides)
        finally:
            if store:
                store.stop()
            clusters.down()
    print()
    print(
        "| run | side | run time (median of 10) | maintenance per run (mean of 10) | UI overview, cold | files / log entries per table |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(lines))


def simulate(args: argparse.Namespace, base: Settings, sides: list[Side]) -> list[str]:
    """Writes each run's records, runs both sides (alternating which goes first), returns the report rows."""
    dc1 = base.cluster("dc1").bootstrap_servers
    ensure_topics({"bootstrap.servers": dc1}, {base.audit_topic: PARTITIONS})
    import_expectations_early()
    spark = session_for(sides[0].settings, "bench-month")
    spark.sparkContext.setLogLevel("ERROR")
    first = window_start(time.time_ns() // 1_000_000 - 30 * 24 * 60 * MINUTE)
    per_run = args.topics * args.windows_per_run * len(TIERS) + args.topics * (len(TIERS) - 1)
    lines = []
    for run in range(1, args.runs + 1):
        start = first + (run - 1) * args.windows_per_run * 10 * MINUTE
        batch = records(args.topics, args.windows_per_run, first_window=start, sequence=f"r{run}")
        produce(dc1, base.audit_topic, batch, per_run)
        now = time.time_ns() // 1_000_000
        running = [side for side in sides if side.maintained or run <= (args.off_runs or args.runs)]
        for side in running if run % 2 else reversed(running):
            side.run(spark, now)
        if run in REPORTED_AT or run == args.runs:
            lines += [side.report(run) for side in running]
            print("\n".join(lines[-len(running) :]), flush=True)
        elif run % 50 == 0:
            print(f"run {run}: " + ", ".join(f"{s.name} {s.run_seconds[-1]:.2f} s" for s in running), flush=True)
    lines.append(compacted_in_full(lake_of(sides[0].settings), args.runs))
    print(lines[-1], flush=True)
    return lines


def compacted_in_full(lake: Lake, run: int) -> str:
    """The maintained lake's tables after a compaction of every partition: the yardstick of the goal."""
    for name in SHOWN_TABLES:
        if lake.version(name) is not None:
            lake.delta_table(name).optimize.compact()
    sizes = ", ".join(f"{name} {files} files/{logs} log" for name, (files, logs) in table_sizes(lake).items())
    return f"| {run} | compacted in full | | | | {sizes} |"


if __name__ == "__main__":
    main()
