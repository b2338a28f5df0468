"""The UI overview's data for 1,000 topics x 7 days of windows, against Spark reading the same Delta table.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python -m bench.bench_ui [--topics 1000] [--days 7] \
        [--cold-rounds 3] [--rounds 5]

Writes one completeness table (topics x 144 windows a day x 4 tiers, written with deltalake, partitioned
by date) to a temporary folder. Then each side runs in new processes, the sides alternating, `--cold-rounds`
processes of each (default 3):
  - ours: a new Python process imports the UI and creates its app over the lake (its start-up), then builds
    the overview page's layout (heatmap of the worst topics, worst list, tier health) over the whole range
    from the UI's LakeCache, which reads the table first (its cold load);
  - Spark: a new Python process starts a local Spark session with Delta (`local[2]`: pyspark and a JVM; its
    start-up), then computes the same overview cells (worst status and lowest completeness per topic and
    window over the non-reference tiers) and collects them to pandas (its cold load).
Start-up is the wall time from the process's launch to the end of its start-up, the load the first load's.
The last process of each side then repeats the load `--rounds` times (default 5), warm: ours from the
LakeCache's snapshot, Spark with its JVM and Delta log warm (the cold load was the warm-up of both). Ours
also times the load with a new LakeCache in its warm process (the table read without the imports).
Prints cold against cold (load; start-up; both), warm against warm, medians, and the ratios Spark / ours.
Goal: ours under 1 s median, warm.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from audit.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
SIDE_NAMES = {"ours": "ours (LakeCache)", "spark": "spark (local[2], Delta)"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000, help="topics (default 1,000)")
    parser.add_argument("--days", type=int, default=7, help="days of 10-minute windows (default 7)")
    parser.add_argument("--cold-rounds", type=int, default=3, help="new processes of each side (default 3)")
    parser.add_argument("--rounds", type=int, default=5, help="warm loads in the last process of each (default 5)")
    parser.add_argument("--skip-spark", action="store_true", help="time ours only (while tuning)")
    # One process of one side (see `run_side`).
    parser.add_argument("--side", choices=sorted(SIDE_NAMES), help=argparse.SUPPRESS)
    parser.add_argument("--lake", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.side:
        return side_main(args)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    sides = ["ours"] if args.skip_spark else ["ours", "spark"]
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="kaudit-bench-ui-") as lake:
        write_completeness(lake, now=now, topics=args.topics, days=args.days)
        for round_ in range(1, args.cold_rounds + 1):
            for side in sides:
                run = run_side(side, lake, warm=args.rounds if round_ == args.cold_rounds else 0)
                runs[side].append(run)
                print(
                    f"round {round_} {side}: start-up {run['startup_s']:.2f} s, cold load {run['load_s']:.3f} s"
                    + (f", warm loads {rounds(run['warm_s'])}" if run["warm_s"] else ""),
                    flush=True,
                )
    for side in sides:
        print(f"{side}: {runs[side][-1]['summary']}")
    print_medians(runs)
    return 0


def write_completeness(lake: str, *, now: datetime, topics: int, days: int) -> str:
    """The sample completeness table of `topics` x `days`, written with deltalake under `lake`; its path."""
    from deltalake import write_deltalake

    from audit.contract.tables import table_path
    from dashboards.bulk_sample import bulk_completeness

    start = time.perf_counter()
    table = bulk_completeness(now=now, topics=topics, days=days)
    path = table_path(lake, "completeness")
    write_deltalake(path, table, partition_by=["date"], mode="overwrite")
    rows = table.num_rows
    del table
    print(
        f"completeness: {rows:,} rows ({topics:,} topics x {days * 144:,} windows x 4 tiers) "
        f"written in {time.perf_counter() - start:.1f} s"
    )
    return path


def run_side(side: str, lake: str, *, warm: int) -> dict:
    """One new process of `side` over `lake`: its start-up, cold load and `warm` warm loads (see `side_main`)."""
    argv = [sys.executable, "-m", "bench.bench_ui", "--side", side, "--lake", lake, "--warm", str(warm)]
    # CLOCK_MONOTONIC is the machine's, so the process reads its start-up against this launch time.
    done = subprocess.run([*argv, "--launched", repr(time.monotonic())], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{side} process exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def side_main(args: argparse.Namespace) -> int:
    """In a new process: start `args.side` up, load once (cold), `args.warm` times more (warm); print JSON."""
    load, new_cache, summary, close = {"ours": ours_side, "spark": spark_side}[args.side](args.lake)
    startup_s = time.monotonic() - args.launched
    load_s = seconds(load)
    warm_s = [seconds(load) for _ in range(args.warm)]
    new_cache_s = [seconds(new_cache) for _ in range(args.warm)] if new_cache else []
    result = {"startup_s": startup_s, "load_s": load_s, "warm_s": warm_s, "new_cache_s": new_cache_s}
    result["summary"] = summary()
    close()
    print(json.dumps(result))
    return 0


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


Side = tuple[Callable[[], object], Callable[[], object] | None, Callable[[], str], Callable[[], object]]


def ours_side(lake: str) -> Side:
    """The UI's start-up: its imports and app over `lake`; then its overview load, a load with a new cache,
    a summary of the data and how to close."""
    settings = Settings.default().replace(state_dir=Path(lake))
    from dashboards import app as ui_app
    from dashboards.context import context
    from dashboards.data import LakeCache

    ui_app.create_app(settings, lake=lake)
    from dashboards.pages import overview

    def load():
        assert overview.layout(range="7d") is not None

    def new_cache():
        context().lake = LakeCache(context().lake.lake, refresh_s=settings.ui.refresh_s, days=settings.ui.days)
        load()

    def summary() -> str:
        data = overview.load("7d", None)
        return (
            f"{data['topics']:,} topics, {len(data['cells']):,} heatmap cells of the "
            f"{len(data['order'])} worst, worst first: {data['order'][:3]}"
        )

    return load, new_cache, summary, lambda: None


def spark_side(lake: str) -> Side:
    """Spark's start-up: pyspark and a local session with Delta; then the overview cells from the same table,
    read, filtered, grouped and collected to pandas."""
    from pyspark.sql import functions as F

    from audit.contract.tables import table_path
    from audit.io.spark import spark_session
    from dashboards.data import STATUS_RANK

    spark = spark_session(
        app_name="bench-ui",
        cache_dir=load_settings().cache_dir,
        conf={"spark.sql.execution.arrow.pyspark.enabled": "true", "spark.driver.memory": "3g"},
    )
    path = table_path(lake, "completeness")
    rank = F.coalesce(
        *[F.when(F.col("status") == status, F.lit(value)) for status, value in STATUS_RANK.items()], F.lit(0)
    )
    result: dict[str, int] = {}

    def load():
        frame = spark.read.format("delta").load(path)
        newest = frame.agg(F.max("window_start")).first()[0]
        cells = (
            frame.where(
                (F.col("window_start") >= F.lit(newest) - F.expr("INTERVAL 7 DAYS"))
                & (F.col("tier") != F.col("reference_tier"))
            )
            .groupBy("logical_topic", "window_start")
            .agg(
                F.max(rank).alias("rank"),
                F.min("completeness_pct").alias("completeness_pct"),
                F.max("missing").alias("missing"),
                F.max("duplicated").alias("duplicated"),
            )
            .toPandas()
        )
        result["cells"] = len(cells)

    return load, None, lambda: f"{result['cells']:,} overview cells", spark.stop


def rounds(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def print_medians(runs: dict[str, list[dict]]) -> None:
    """Cold against cold and warm against warm, each a line per figure, medians and the rounds."""
    figures = {
        "cold, new process, load": [[r["load_s"] for r in side_runs] for side_runs in runs.values()],
        "cold, new process, start-up": [[r["startup_s"] for r in side_runs] for side_runs in runs.values()],
        "cold, new process, start-up + load": [
            [r["startup_s"] + r["load_s"] for r in side_runs] for side_runs in runs.values()
        ],
        "warm, same process, repeated": [[s for r in side_runs for s in r["warm_s"]] for side_runs in runs.values()],
    }
    print()
    for label, per_side in figures.items():
        parts = [
            f"{SIDE_NAMES[side]} median {statistics.median(values):.3f} s (rounds {rounds(values)})"
            for side, values in zip(runs, per_side)
        ]
        if "spark" in runs:
            parts.append(f"spark / ours {statistics.median(per_side[1]) / statistics.median(per_side[0]):.1f}x")
        print(f"{label}: " + "; ".join(parts))
    warm = statistics.median(figures["warm, same process, repeated"][0])
    new_cache = [s for r in runs["ours"] for s in r["new_cache_s"]]
    print(
        f"ours, a new LakeCache in its warm process: median {statistics.median(new_cache):.3f} s ({rounds(new_cache)})"
    )
    print(f"goal ours warm < 1 s: {'met' if warm < 1 else 'NOT met'} ({warm:.3f} s)")


if __name__ == "__main__":
    raise SystemExit(main())
