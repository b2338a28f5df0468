"""Complete-through watermarks (`completeness_watermarks`): up to when each topic's windows are final and
complete at each tier, refreshed by every reconciliation run; and `complete_through`, the analyst's way
to ask for it.

The rule is audit/contract/complete_through.py's (`watermark_of`); `watermarks` computes it with Spark
aggregates, held to the same answers by its tests. A run refreshes only the (topic, tier) pairs whose
windows it judged: most from their stored watermark and the new verdicts alone (`advanced`, in the driver),
the others summed up over `completeness`. One MERGE written by `deltalake` in the driver commits only the
rows whose watermark moved, nothing when none did, so a quiet run changes nothing. Restrict a lake (bronze)
query to the windows behind the watermark with the SQL pattern in docs/tables.md ("Reading only complete
windows").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from audit.contract.complete_through import KEY_COLUMNS, WINDOW_COLUMNS, Watermark, advanced
from audit.contract.completeness import COMPLETE
from audit.contract.tables import COMPLETENESS, COMPLETENESS_WATERMARKS
from audit.io import delta_io
from audit.io.lake import Lake, lake_of
from audit.io.lake_read import read_arrow
from audit.io.spark import local_frame

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

PAIR = ("origin_cluster", "topic", "tier")
MARK_COLUMNS = ("complete_through", "first_open_window", "first_open_status")  # Watermark's fields


# Judged rows up to which a run moves the stored watermarks in the driver (`advanced`); more (a first run,
# some 800,000 windows) are cheaper to sum up by Spark over the table than to collect.
DRIVER_ROWS = 50_000


def refresh_watermarks(spark: SparkSession, lake: Lake, judged, rows: int, *, every_window: bool = False) -> None:
    """Recompute the watermark of every (topic, tier) with a window in `judged` (the `rows` rows just judged: a
    frame, or a pyarrow Table the driver judged).

    A pair whose stored watermark the new verdicts alone move (`advanced`: the usual run, whose windows lie
    around the first open one) is moved in the driver; the others are summed up over `completeness`, or over
    `judged` itself when it holds every window of the table (`every_window`: its first verdicts)."""
    in_driver = judged if isinstance(judged, pa.Table) else None
    if in_driver is not None and (every_window or rows > DRIVER_ROWS):
        judged = spark.createDataFrame(in_driver)
    if every_window:
        marks, pairs = _marks_of(judged), None
    elif rows <= DRIVER_ROWS and (stored := _stored_watermarks(lake)):
        marks, rest = _advanced_marks(in_driver if in_driver is not None else judged, stored)
        pairs = local_frame(spark, rest, "origin_cluster STRING, topic STRING, tier STRING") if rest else None
    elif in_driver is not None:  # no watermark stored yet
        pairs = local_frame(
            spark, in_driver.group_by(list(PAIR)).aggregate([]), "origin_cluster STRING, topic STRING, tier STRING"
        )
        marks = []
    else:
        marks, pairs = [], judged.select(*PAIR).distinct()
    if pairs is not None:
        marks += _summed_marks(spark, lake, pairs)
    now = datetime.now(UTC)
    # Written by the driver, as the tier tables: most runs move no watermark, and then make no commit.
    delta_io.upsert_from_driver(lake, COMPLETENESS_WATERMARKS, [{**m, "updated_at": now} for m in marks])


def _stored_watermarks(lake: Lake) -> dict[tuple, Watermark]:
    rows = read_arrow(lake, COMPLETENESS_WATERMARKS.name, columns=[*PAIR, *MARK_COLUMNS]).to_pylist()
    return {tuple(row[c] for c in PAIR): Watermark(*(row[c] for c in MARK_COLUMNS)) for row in rows}


def _advanced_marks(judged, stored: dict[tuple, Watermark]) -> tuple[list[dict], list[tuple]]:
    """The watermark rows `advanced` gives for `judged` (a frame or a pyarrow Table), and the pairs it leaves to
    the table."""
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    columns = [*PAIR, "logical_topic", *WINDOW_COLUMNS]
    rows = judged.select(columns) if isinstance(judged, pa.Table) else judged.select(*columns).toArrow()
    for row in rows.to_pylist():
        by_pair[tuple(row[c] for c in PAIR)].append(row)
    marks, rest = [], []
    for pair, windows in by_pair.items():
        mark = advanced(stored[pair], windows) if pair in stored else None
        if mark is None:
            rest.append(pair)
        else:
            named = {**dict(zip(PAIR, pair, strict=True)), "logical_topic": windows[0]["logical_topic"]}
            marks.append({**named, **dict(zip(MARK_COLUMNS, astuple(mark), strict=True))})
    return marks, rest


def _summed_marks(spark: SparkSession, lake: Lake, pairs) -> list[dict]:
    """`watermarks` of every window of `pairs` (origin_cluster, topic, tier) in `completeness`."""
    from pyspark.sql import functions as F

    stored = delta_io.read_table(spark, lake, COMPLETENESS.name)
    return _marks_of(stored.join(F.broadcast(pairs), list(PAIR), "left_semi"))


def _marks_of(windows) -> list[dict]:
    """`watermarks` of `windows` (completeness rows), in the driver."""
    return watermarks(windows.select(*KEY_COLUMNS, *WINDOW_COLUMNS)).toArrow().to_pylist()


def watermarks(windows):
    """`watermark_of` (audit/contract/complete_through.py, the rule's reference) as Spark aggregates: one
    row (`WATERMARK_COLUMNS`) per (topic, tier) of `windows` (`KEY_COLUMNS` + `WINDOW_COLUMNS`).
    tests/audit/books/judge/test_complete_through_spark.py holds the two to the same answers."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    closed = F.coalesce(F.col("final") & (F.col("status") == COMPLETE), F.lit(False))
    first_open = F.min(F.when(~F.col("closed"), F.struct("window_start", "status")))
    return (
        windows.withColumn("closed", closed)
        .withColumn("first_open", first_open.over(Window.partitionBy(*PAIR)))
        .groupBy(*PAIR)
        .agg(
            F.first("logical_topic").alias("logical_topic"),
            # every window before the first open one is closed: the watermark is the last one's end
            F.max(
                F.when(
                    F.col("first_open").isNull() | (F.col("window_start") < F.col("first_open.window_start")),
                    F.col("window_end"),
                )
            ).alias("complete_through"),
            F.first("first_open").alias("first_open"),
        )
        .select(
            *KEY_COLUMNS,
            "complete_through",
            F.col("first_open.window_start").alias("first_open_window"),
            F.col("first_open.status").alias("first_open_status"),
        )
    )


def complete_through(
    spark: SparkSession, topic: str, tier: str, *, lake: Lake | str | None = None
) -> pd.Timestamp | None:
    """The end of the last window up to which every window of `topic` (its logical name, `dc1.orders`) is
    final and complete at `tier`; None when none is yet. `lake`: the configured lake by default. A LakeError
    when the books never wrote there (a mistyped path is not an empty lake)."""
    import pandas as pd
    from pyspark.sql import functions as F

    if lake is None:
        from audit.settings import load_settings

        lake = lake_of(load_settings())
    lake = Lake.of(lake).require_books()
    rows = (
        delta_io.read_table(spark, lake, COMPLETENESS_WATERMARKS.name)
        .where((F.col("logical_topic") == topic) & (F.col("tier") == tier))
        .select("complete_through")
        .collect()
    )
    if not rows or rows[0].complete_through is None:
        return None
    moment = pd.Timestamp(rows[0].complete_through)
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
