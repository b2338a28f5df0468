"""A month in an hour: `reconcile --continuous` for 1,000 runs with maintenance on, against a fresh table set at run 10.

    .venv/bin/python -m bench.bench_month [--runs 1000] [--rounds 10] [--fresh-run 10] [--store]

One pair of local Kafka clusters. Before each run, the next `--windows-per-run` 10-minute windows of
`--topics` topics get their count records (5 tiers) and status records, as counters that flush steadily
would write them; event time starts a month back, so 1,000 runs of 4 windows cover about 28 days. Each
run is `reconcile` in one session with its RunMemory, as `--continuous` runs it. The maintained side runs the
continuous loop's own schedule (`MaintenanceSchedule`, the default settings) between its runs, on a clock that
advances `--interval-s` per run: a full pass every `maintenance.interval_s` (360 runs at 10 s) and a compaction
pass every `maintenance.compact_every_runs` runs that wrote.

The comparison, measured in the same run: the maintained side runs alone up to just before run `--runs`; then a
fresh table set, never maintained, with its own audit topic, runs alone up to just before run `--fresh-run`,
over the same windows as the maintained side's last runs; then `--rounds` rounds, each one run of each side
over the same new windows (the same records in both audit topics), which side goes first alternating round by
round, so that the other work on the machine hits both. The rounds are centred on the two runs compared (10
rounds: the maintained side's runs 996-1,005 and the fresh side's runs 6-15), and each side's figure is the
median of its rounds; the ratio of the medians is the result (goal: at most 1.2x). Both sides keep their session
memory from run to run, as `--continuous` does: a run on a copy of a run-10 lake would be nothing a deployment runs.

At runs 10, 100 and 500 of the maintained side, and for both sides after the rounds, prints the median run time of
the last ten runs, the mean time of the maintenance after them, the UI overview's load time (a new LakeCache:
cold), and the files and log entries of each table; last, the maintained lake's tables compacted in full (the
goal: no table over twice the files of a freshly compacted one). `--off-runs N` also runs a never-maintained side
beside the maintained one over its first N runs: what maintenance saves. `--store` puts the lakes on a SeaweedFS
object store.
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
from audit.settings.clusters import Secret
from audit.settings.storage import StorageSettings
from bench.bench_reconcile import MINUTE, PARTITIONS, TIERS, bench_settings, produce, records

REPORTED_AT = (10, 100, 500)
SHOWN_TABLES = ("audit_records", "tier_counts", "completeness", "tier_status", "_reconcile_offsets")
GOAL = 1.2
HEADER = (
    "| run | side | run time (median of 10) | maintenance per run (mean of 10) | UI overview, cold "
    "| files / log entries per table |\n|---|---|---|---|---|---|"
)


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
    """One lake, the audit topic it reads, and its session memory; maintained on the continuous loop's schedule
    or never."""

    def __init__(self, name: str, settings: Settings, maintained: bool, interval_s: float) -> None:
        self.name, self.settings, self.maintained, self.memory = name, settings, maintained, RunMemory()
        self.run_seconds: list[float] = []
        self.maintenance_seconds: list[float] = []  # per run: the pass after it, 0 when none was due
        self.clock_s, self.interval_s = 0.0, interval_s  # the continuous loop's time, one interval per run
        self.schedule = MaintenanceSchedule(settings, clock=lambda: self.clock_s) if maintained else None

    @property
    def runs(self) -> int:
        return len(self.run_seconds)

    def run(self, spark, now: int) -> float:
        began = time.monotonic()
        report = reconcile(spark, self.settings, now_ms=now, memory=self.memory)
        self.run_seconds.append(time.monotonic() - began)
        self.clock_s += self.interval_s
        began = time.monotonic()
        if self.schedule is not None:
            self.schedule.between_runs(None, 0.0, wrote=not report.quiet)
        self.maintenance_seconds.append(time.monotonic() - began)
        return self.run_seconds[-1]

    def report(self) -> str:
        lake = lake_of(self.settings)
        recent = statistics.median(self.run_seconds[-10:])
        upkeep = statistics.mean(self.maintenance_seconds[-10:])
        sizes = ", ".join(f"{name} {files} files/{logs} log" for name, (files, logs) in table_sizes(lake).items())
        ui_s = overview_seconds(lake, self.settings)
        return f"| {self.runs} | {self.name} | {recent:.2f} s | {upkeep:.2f} s | {ui_s:.2f} s | {sizes} |"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="the maintained side's run compared (default 1000)")
    parser.add_argument("--fresh-run", type=int, default=10, help="the fresh side's run compared (default 10)")
    parser.add_argument(
        "--rounds", type=int, default=10, help="alternated rounds, centred on the runs compared (default 10)"
    )
    parser.add_argument("--topics", type=int, default=20, help="topics (default 20)")
    parser.add_argument("--windows-per-run", type=int, default=4, help="new windows before each run (default 4)")
    parser.add_argument(
        "--interval-s", type=float, default=10.0, help="seconds of the continuous loop's clock per run (default 10)"
    )
    parser.add_argument(
        "--off-runs", type=int, default=0, help="also run a never-maintained side for its first N runs (default 0)"
    )
    parser.add_argument("--store", action="store_true", help="the lakes on a SeaweedFS object store")
    args = parser.parse_args()
    if not 0 < args.rounds // 2 < args.fresh_run <= args.runs:
        parser.error("needs 2 <= --rounds, --rounds / 2 < --fresh-run <= --runs")
    return args


def main() -> None:
    args = parse_args()
    setup_logging("WARNING", "kv")
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)
        clusters = LocalClusters(["dc1", "other"], state_dir=state, cache_dir=load_settings().cache_dir)
        clusters.up()
        store = start_object_store(state / "store", load_settings().cache_dir) if args.store else None
        try:
            storage = StorageSettings()
            if store:
                store.create_bucket("month")
                storage = StorageSettings(
                    endpoint=store.endpoint,
                    access_key_id=store.access_key_id,
                    secret_access_key=Secret(store.secret_access_key),
                )
            base = bench_settings(clusters, state, storage=storage)
            root = "s3a://month" if store else str(state)
            lines = simulate(args, base, root)
        finally:
            if store:
                store.stop()
            clusters.down()
    print()
    print("\n".join(lines))


class Month:
    """The audit records of each run, by batch: batch n is the n-th run's windows, from a month back."""

    def __init__(self, args: argparse.Namespace, base: Settings) -> None:
        self.args, self.dc1 = args, base.cluster("dc1").bootstrap_servers
        self.first = window_start(time.time_ns() // 1_000_000 - 30 * 24 * 60 * MINUTE)
        self.per_run = args.topics * args.windows_per_run * len(TIERS) + args.topics * (len(TIERS) - 1)

    def write(self, batch: int, sides: list[Side]) -> int:
        """Batch `batch` into the audit topic of each of `sides` (once per topic); the `now` of its runs."""
        start = self.first + (batch - 1) * self.args.windows_per_run * 10 * MINUTE
        for topic in sorted({side.settings.audit_topic for side in sides}):
            payloads = records(self.args.topics, self.args.windows_per_run, first_window=start, sequence=f"r{batch}")
            produce(self.dc1, topic, payloads, self.per_run)
        return time.time_ns() // 1_000_000


def simulate(args: argparse.Namespace, base: Settings, root: str) -> list[str]:
    """The maintained side (and the off side) up to the rounds, the fresh side up to its rounds, the rounds;
    returns the report's lines."""
    maintained = Side("maintenance on", base.replace(lake_path=f"{root}/on"), True, args.interval_s)
    fresh_settings = base.replace(lake_path=f"{root}/fresh", audit_topic=f"{base.audit_topic}-fresh")
    fresh = Side("fresh, never maintained", fresh_settings, False, args.interval_s)
    off = Side("maintenance off", base.replace(lake_path=f"{root}/off"), False, args.interval_s)
    topics = {side.settings.audit_topic: PARTITIONS for side in (maintained, fresh)}
    ensure_topics({"bootstrap.servers": base.cluster("dc1").bootstrap_servers}, topics)
    import_expectations_early()
    spark = session_for(maintained.settings, "bench-month")
    spark.sparkContext.setLogLevel("ERROR")
    month, half = Month(args, base), args.rounds // 2
    lead, warm = args.runs - half, args.fresh_run - half  # the runs each side makes before the rounds
    lines = [HEADER]
    print(HEADER, flush=True)
    for batch in range(1, lead + 1):
        running = [maintained] + ([off] if batch <= args.off_runs else [])
        now = month.write(batch, running)
        for side in running if batch % 2 else reversed(running):
            side.run(spark, now)
        lines += progress(batch, running)
    for batch in range(lead - warm + 1, lead + 1):  # the same windows as the maintained side's last runs
        fresh.run(spark, month.write(batch, [fresh]))
    lines += rounds(args, spark, month, maintained, fresh, lead)
    lines.append(compacted_in_full(lake_of(maintained.settings), maintained.runs))
    print(lines[-1], flush=True)
    return lines


def progress(batch: int, running: list[Side]) -> list[str]:
    """The report's rows at the runs reported; a line of progress every 50 runs."""
    if batch in REPORTED_AT:
        rows = [side.report() for side in running]
        print("\n".join(rows), flush=True)
        return rows
    if batch % 50 == 0:
        print(f"run {batch}: " + ", ".join(f"{s.name} {s.run_seconds[-1]:.2f} s" for s in running), flush=True)
    return []


def rounds(args, spark, month: Month, maintained: Side, fresh: Side, lead: int) -> list[str]:
    """The alternated rounds: each one run of each side over the same new batch; the report's rows and result."""
    times: dict[str, list[float]] = {maintained.name: [], fresh.name: []}
    for index in range(1, args.rounds + 1):
        pair = [maintained, fresh] if index % 2 else [fresh, maintained]
        now = month.write(lead + index, pair)
        for side in pair:
            times[side.name].append(side.run(spark, now))
        print(
            f"round {index}: run {maintained.runs} {times[maintained.name][-1]:.2f} s, "
            f"fresh run {fresh.runs} {times[fresh.name][-1]:.2f} s",
            flush=True,
        )
    rows = [maintained.report(), fresh.report()]
    on, new = statistics.median(times[maintained.name]), statistics.median(times[fresh.name])
    paired = statistics.median(a / b for a, b in zip(times[maintained.name], times[fresh.name], strict=True))
    result = (
        f"\nmaintained runs {maintained.runs - args.rounds + 1}-{maintained.runs}: median {on:.2f} s; fresh runs "
        f"{fresh.runs - args.rounds + 1}-{fresh.runs}: median {new:.2f} s; ratio {on / new:.2f}x (median of the "
        f"rounds' own ratios {paired:.2f}x; goal at most {GOAL}x){'' if on / new <= GOAL else ': OVER THE GOAL'}\n"
    )
    print("\n".join(rows) + result, flush=True)
    return [*rows, result]


def compacted_in_full(lake: Lake, run: int) -> str:
    """The maintained lake's tables after a compaction of every partition: the yardstick of the goal."""
    for name in SHOWN_TABLES:
        if lake.version(name) is not None:
            lake.delta_table(name).optimize.compact()
    sizes = ", ".join(f"{name} {files} files/{logs} log" for name, (files, logs) in table_sizes(lake).items())
    return f"| {run} | compacted in full | | | | {sizes} |"


if __name__ == "__main__":
    main()
