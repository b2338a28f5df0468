"""The verdict per (logical topic, window, tier): the tiers on each topic's path, and `classify` of
audit/contract/completeness.py applied to every window touched or not yet final (`completeness`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.contract.completeness import PENDING, classify, threshold_for
from audit.contract.names import PRODUCER_TIER
from audit.contract.tables import (
    COMPLETENESS,
    TIER_COUNTS,
    TIER_STATUS,
)
from audit.contract.windows import MS_PER_MINUTE
from audit.io import delta_io

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.settings import Settings

from audit.books.complete_through import refresh_watermarks
from audit.books.restatements import store_restatements
from audit.books.tier_tables import WINDOW_KEY

log = logging.getLogger(__name__)

# -- 3c. completeness --------------------------------------------------------------------------


def tier_paths(spark: SparkSession, settings: Settings):
    """Per (logical topic, tier on its path): reference tier, threshold and the tier's effective watermark.

    A tier's effective watermark is the lowest of its own and of every cluster tier upstream of it on
    the topic's path (configured `tiers` order): the lake cannot be final for data the aggregate has
    not received yet. The reference tier is `reference_tier` when it counts the topic, else the
    topic's origin cluster.
    """
    import pandas as pd

    counted = (
        delta_io.read_table(spark, settings.lake_root, TIER_COUNTS.name)
        .select("origin_cluster", "topic", "tier")
        .distinct()
    )
    reported = delta_io.read_table(spark, settings.lake_root, TIER_STATUS.name).select(
        "origin_cluster", "topic", "tier", "watermark"
    )
    pairs = counted.join(reported, ["origin_cluster", "topic", "tier"], "full").toPandas()
    order = {tier: index for index, tier in enumerate(settings.tiers)}
    thresholds = settings.threshold_patterns()
    rows = []
    for (origin, topic), group in pairs.groupby(["origin_cluster", "topic"], sort=False):
        tiers = sorted(set(group["tier"]), key=lambda t: order.get(t, len(order)))
        reference = settings.reference_tier if settings.reference_tier in tiers else origin
        watermarks = {row.tier: row.watermark for row in group.itertuples() if pd.notna(row.watermark)}
        threshold = threshold_for(f"{origin}.{topic}", thresholds)
        lowest = None
        for tier in tiers:
            if tier == PRODUCER_TIER:
                continue  # producers report no watermark: their counts are final once flushed
            own = watermarks.get(tier)
            lowest = own if lowest is None else (None if own is None else min(lowest, own))
            if tier != reference:
                rows.append(
                    (
                        origin,
                        topic,
                        tier,
                        order.get(tier, len(order)),
                        reference,
                        threshold,
                        None if lowest is None else int(pd.Timestamp(lowest).value // 1_000_000),
                    )
                )
    schema = (
        "origin_cluster STRING, topic STRING, tier STRING, tier_order INT, reference_tier STRING, "
        "threshold_pct DOUBLE, tier_watermark_ms BIGINT"
    )
    return spark.createDataFrame(rows, schema) if rows else None


# What the judge step yields per (window, tier): `classify`'s verdict with times still in epoch ms.
JUDGED_COLUMNS = {
    "origin_cluster": "STRING",
    "topic": "STRING",
    "window_start": "TIMESTAMP",
    "window_minutes": "INT",
    "tier": "STRING",
    "tier_order": "INT",
    "reference_tier": "STRING",
    "expected": "BIGINT",
    "observed": "BIGINT",
    "missing": "BIGINT",
    "duplicated": "BIGINT",
    "completeness_pct": "DOUBLE",
    "threshold_pct": "DOUBLE",
    "status": "STRING",
    "final": "BOOLEAN",
    "window_end_ms": "BIGINT",
    "tier_watermark_ms": "BIGINT",
    "latency_p99_ms": "DOUBLE",
}
JUDGED_DDL = ", ".join(f"{name} {kind}" for name, kind in JUDGED_COLUMNS.items())


@dataclass(frozen=True)
class Judgement:
    """What a judge step did: rows judged, and when the first pending verdict may turn by time alone."""

    windows: int
    # The earliest window end + grace of a pending row: before it, with no new record, no verdict can
    # change (pending -> lagging is the only change time makes). None: no row is pending.
    next_due_ms: int | None


def update_completeness(
    spark: SparkSession, settings: Settings, touched, *, now_ms: int, records=None, done=lambda step, **fields: None
) -> Judgement:
    """Judge every touched window and every window not yet final.

    Before merging the verdicts it appends the final windows they restate (`restatements`; `records`:
    the audit records the run read), after it refreshes the complete-through watermarks of their topics;
    `done(step)` is told as each step is done.
    """
    from pyspark.sql import functions as F

    paths = tier_paths(spark, settings)
    if paths is None:
        return Judgement(windows=0, next_due_ms=None)
    current = delta_io.read_table(spark, settings.lake_root, COMPLETENESS.name)
    open_windows = current.where(~F.col("final") | F.col("status").isin("pending", "lagging")).select(*WINDOW_KEY)
    windows = (
        touched.select(*WINDOW_KEY)
        .unionByName(open_windows)
        .unionByName(_windows_missing_a_tier(current, paths))
        .distinct()
    )
    counts = delta_io.read_table(spark, settings.lake_root, TIER_COUNTS.name).join(
        windows.withColumn("date", F.to_date("window_start")), [*WINDOW_KEY, "date"], "left_semi"
    )
    grid = windows.join(F.broadcast(paths), ["origin_cluster", "topic"])
    observed = counts.select(
        *WINDOW_KEY,
        "tier",
        F.col("count").alias("observed"),
        F.col("by_partition").alias("observed_by_partition"),
        "latency_p99_ms",
        F.col("window_minutes").alias("tier_window_minutes"),
    )
    expected = counts.select(
        *WINDOW_KEY,
        F.col("tier").alias("reference_tier"),
        F.col("count").alias("expected"),
        F.col("by_partition").alias("expected_by_partition"),
        F.col("window_minutes").alias("reference_window_minutes"),
    )
    minutes, grace_ms = settings.window_minutes, int(settings.grace_s * 1000)
    rows = (
        grid.join(observed, [*WINDOW_KEY, "tier"], "left")
        .join(expected, [*WINDOW_KEY, "reference_tier"], "left")
        .withColumn("expected", F.coalesce("expected", F.lit(0)))
        .withColumn("observed", F.coalesce("observed", F.lit(0)))
        .withColumn("window_minutes", F.coalesce("reference_window_minutes", "tier_window_minutes", F.lit(minutes)))
        .withColumn("window_end_ms", F.unix_millis("window_start") + F.col("window_minutes") * MS_PER_MINUTE)
    )
    judged = rows.select(
        *WINDOW_KEY,
        "window_minutes",
        "tier",
        "tier_order",
        "reference_tier",
        "expected",
        "observed",
        "expected_by_partition",
        "observed_by_partition",
        "window_end_ms",
        "tier_watermark_ms",
        "threshold_pct",
        "latency_p99_ms",
    ).mapInPandas(_Judge(now_ms=now_ms, grace_ms=grace_ms), JUDGED_DDL)
    result = (
        judged.withColumn("logical_topic", F.concat_ws(".", "origin_cluster", "topic"))
        .withColumn("window_end", F.timestamp_millis("window_end_ms"))
        .withColumn("tier_watermark", F.timestamp_millis("tier_watermark_ms"))
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    ).localCheckpoint()
    done("completeness judged")
    restated = store_restatements(spark, settings, current, result, records)
    done("restatements", restatements=restated)
    delta_io.upsert(spark, settings.lake_root, COMPLETENESS, result)
    pending_end = F.when(F.col("status") == PENDING, F.col("window_end_ms"))
    judged, first_pending_end = result.agg(F.count("*"), F.min(pending_end)).first()
    done("completeness stored", windows=judged)
    refresh_watermarks(spark, settings, result)
    done("completeness watermarks")
    return Judgement(judged, None if first_pending_end is None else first_pending_end + grace_ms)


def _windows_missing_a_tier(current, paths):
    """Windows judged before a tier joined their topic's path (the lake's first count of a topic, say):
    a window the new tier holds nothing of gets no count record from it, so nothing else touches it."""
    from pyspark.sql import functions as F

    tiers = paths.groupBy("origin_cluster", "topic").agg(F.count("*").alias("tiers"))
    judged = current.groupBy(*WINDOW_KEY).agg(F.count("*").alias("rows"))
    return judged.join(F.broadcast(tiers), ["origin_cluster", "topic"]).where("rows < tiers").select(*WINDOW_KEY)


@dataclass(frozen=True)
class _Judge:
    """`mapInPandas` wrapper of `classify` (picklable, unlike a closure over settings)."""

    now_ms: int
    grace_ms: int

    def __call__(self, frames):
        for frame in frames:
            judged = classify(frame, now_ms=self.now_ms, grace_ms=self.grace_ms)
            judged["tier_watermark_ms"] = judged["tier_watermark_ms"].astype("Int64")
            yield judged[list(JUDGED_COLUMNS)]
