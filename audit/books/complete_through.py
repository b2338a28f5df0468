"""Complete-through watermarks (`completeness_watermarks`): up to when each topic's windows are final and
complete at each tier, refreshed by every reconciliation run; and `complete_through`, the analyst's way
to ask for it.

The rule is audit/contract/complete_through.py's. A run refreshes only the (topic, tier) pairs whose
windows it judged, with one MERGE that rewrites a row only when its watermark moved, so a quiet run
changes nothing. Restrict a lake (bronze) query to the windows behind the watermark with the SQL
pattern in docs/tables.md ("Reading only complete windows").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.contract.complete_through import KEY_COLUMNS, WATERMARK_DDL, WINDOW_COLUMNS, watermark_frame
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
    marks = (
        windows.groupBy(*PAIR)
        .applyInPandas(watermark_frame, WATERMARK_DDL)
        .withColumn("updated_at", F.current_timestamp())
    )
    delta_io.upsert(spark, settings.lake_root, COMPLETENESS_WATERMARKS, marks)


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
