"""The UI overview's data for 1,000 topics x 7 days of windows, against Spark reading the same Delta table.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python -m bench.bench_ui [--topics 1000] [--days 7] [--rounds 5]

Writes one completeness table (topics x 144 windows a day x 4 tiers, written with deltalake, partitioned
by date) to a temporary folder, then times, after one warm-up each:
  - ours, warm: the overview page's layout (heatmap of the worst topics, worst list, tier health) over
    the whole range, served from the UI's LakeCache (the table snapshot kept between refreshes);
  - ours, cold: the same with a new cache each time (deltalake reads the table first);
  - Spark: the same overview cells (worst status and lowest completeness per topic and window over the
    non-reference tiers) computed by a local Spark session with Delta, collected to pandas.
Prints the medians and the ratio Spark / ours. Goal: ours under 1 s median, warm.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from audit.settings import Settings, load_settings


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000, help="topics (default 1,000)")
    parser.add_argument("--days", type=int, default=7, help="days of 10-minute windows (default 7)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each side after a warm-up (default 5)")
    parser.add_argument("--skip-spark", action="store_true", help="time ours only (while tuning)")
    return parser.parse_args()


def timed(run, rounds: int) -> list[float]:
    run()  # warm-up
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> int:
    args = parse_args()
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    with tempfile.TemporaryDirectory(prefix="kaudit-bench-ui-") as lake:
        path = write_completeness(lake, now=now, topics=args.topics, days=args.days)
        warm, cold = time_overview(lake, args.rounds)
        if args.skip_spark:
            print(f"ours, warm: median {statistics.median(warm):.3f} s; cold: median {statistics.median(cold):.3f} s")
            return 0
        spark_cells, spark = spark_overview(path, args.rounds)
        print(f"spark: {spark_cells:,} overview cells")
        print_medians(warm, cold, spark)
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


def time_overview(lake: str, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of the overview page's layout over 7 days, warm (the UI's LakeCache) and cold (a new cache)."""
    settings = Settings.default().replace(state_dir=Path(lake))
    from dashboards import app as ui_app
    from dashboards.context import context
    from dashboards.data import LakeCache

    ui_app.create_app(settings, lake=lake)
    from dashboards.pages import overview

    def ours_warm():
        page = overview.layout(range="7d")
        assert page is not None

    def ours_cold():
        context().lake = LakeCache(lake, refresh_s=settings.ui.refresh_s, days=settings.ui.days)
        ours_warm()

    data = overview.load("7d", None)
    print(
        f"overview: {data['topics']:,} topics, {len(data['cells']):,} heatmap cells of the "
        f"{len(data['order'])} worst, worst first: {data['order'][:3]}"
    )
    return timed(ours_warm, rounds), timed(ours_cold, rounds)


def print_medians(warm: list[float], cold: list[float], spark: list[float]) -> None:
    ours = statistics.median(warm)
    print(f"ours, warm (LakeCache):  median {ours:.3f} s  rounds {', '.join(f'{s:.3f}' for s in warm)}")
    print(
        f"ours, cold (new cache):  median {statistics.median(cold):.3f} s  rounds {', '.join(f'{s:.3f}' for s in cold)}"
    )
    print(
        f"spark (local[2], Delta): median {statistics.median(spark):.3f} s  "
        f"rounds {', '.join(f'{s:.3f}' for s in spark)}"
    )
    print(
        f"ratio spark / ours warm: {statistics.median(spark) / ours:.1f}x; spark / ours cold: "
        f"{statistics.median(spark) / statistics.median(cold):.1f}x; goal ours warm < 1 s: "
        f"{'met' if ours < 1 else 'NOT met'}"
    )


def spark_overview(path: str, rounds: int) -> tuple[int, list[float]]:
    """The overview cells by Spark from the same Delta table: read, filter, group, collect to pandas."""
    from pyspark.sql import functions as F

    from audit.io.spark import spark_session
    from dashboards.data import STATUS_RANK

    spark = spark_session(
        app_name="bench-ui",
        cache_dir=load_settings().cache_dir,
        conf={"spark.sql.execution.arrow.pyspark.enabled": "true", "spark.driver.memory": "3g"},
    )
    rank = F.coalesce(
        *[F.when(F.col("status") == status, F.lit(value)) for status, value in STATUS_RANK.items()], F.lit(0)
    )
    result: dict[str, int] = {}

    def run():
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

    try:
        seconds = timed(run, rounds)
    finally:
        spark.stop()
    return result["cells"], seconds


if __name__ == "__main__":
    raise SystemExit(main())
