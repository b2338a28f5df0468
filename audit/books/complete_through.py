"""Complete-through watermarks (`completeness_watermarks`): up to when each topic's windows are final and
complete at each tier, refreshed by every reconciliation run; and `complete_through`, the analyst's way
to ask for it.

The rule is audit/contract/complete_through.py's (`watermark_of`); `watermarks` computes it with Spark
aggregates, held to the same answers by its tests. A run refreshes only the (topic, tier) pairs whose
windows it judged, with one MERGE written by `deltalake` in the driver that commits only the rows whose
watermark moved, nothing when none did, so a quiet run changes nothing. Restrict a lake (bronze) query to
the windows behind the watermark with the SQL pattern in docs/tables.md ("Reading only complete windows").
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from audit.contract.complete_through import KEY_COLUMNS, WINDOW_COLUMNS
from audit.contract.completeness import COMPLETE
from audit.contract.tables import COMPLETENESS, COMPLETENESS_WATERMARKS
from audit.io import delta_io

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from audit.settings import Settings

PAIR = ("origin_cluster", "topic", "tier")


def refresh_watermarks(spark: SparkSession, settings: Settings, judged) -> None:
    """Recompute the watermark of every (topic, tier) with a window in `judged` (the rows just judged)."""
    from pyspark.sql import functions as F

    pairs = judged.select(*PAIR).distinct()
    windows = (
        delta_io.read_table(spark, settings.lake_root, COMPLETENESS.name)
        .select(*KEY_COLUMNS, *WINDOW_COLUMNS)
        .join(F.broadcast(pairs), list(PAIR), "left_semi")
    )
    now = datetime.now(UTC)
    marks = [{**mark, "updated_at": now} for mark in watermarks(windows).toArrow().to_pylist()]
    # Written by the driver, as the tier tables: most runs move no watermark, and then make no commit.
    delta_io.upsert_from_driver(settings.lake_root, COMPLETENESS_WATERMARKS, marks)


def watermarks(windows):
    """`watermark_of` (audit/contract/complete_through.py, the rule's reference) as Spark aggregates: one
    row (`WATERMARK_COLUMNS`) per (topic, tier) of `windows` (`KEY_COLUMNS` + `WINDOW_COLUMNS`).
    tests/audit/books/test_complete_through_spark.py holds the two to the same answers."""
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
    spark: SparkSession, topic: str, tier: str, *, lake_root: str | None = None
) -> pd.Timestamp | None:
    """The end of the last window up to which every window of `topic` (its logical name, `dc1.orders`) is
    final and complete at `tier`; None when none is yet. `lake_root`: the configured lake by default."""
    import pandas as pd
    from pyspark.sql import functions as F

    if lake_root is None:
        from audit.settings import load_settings

        lake_root = load_settings().lake_root
    rows = (
        delta_io.read_table(spark, lake_root, COMPLETENESS_WATERMARKS.name)
        .where((F.col("logical_topic") == topic) & (F.col("tier") == tier))
        .select("complete_through")
        .collect()
    )
    if not rows or rows[0].complete_through is None:
        return None
    moment = pd.Timestamp(rows[0].complete_through)
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
