"""The `retention_gaps` table: offsets Kafka deleted before a tier read them, as the tiers' status records
report them (audit/contract/retention.py). One row per reported gap; a gap reported again (every status
record of its reader repeats it) changes nothing, except that a gap first reported before any message
was read after it gets that message's time once a later report has it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.contract.tables import RETENTION_GAPS
from audit.io.lake import before_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.io.lake import Lake

GAPS_TYPE = "ARRAY<STRUCT<partition: INT, from_offset: BIGINT, to_offset: BIGINT, after_time_ms: BIGINT, before_time_ms: BIGINT>>"


def carried_gaps():
    """A checked row's retention gaps (JSON text) when the row is a valid record, else null: what
    `store_retention_gaps` stores, and what a run counts to know whether it has any."""
    from pyspark.sql import functions as F

    return F.when(F.col("reason").isNull(), F.col("retention_gaps_json"))


def store_retention_gaps(spark: SparkSession, lake: Lake, checked) -> None:
    """Insert the gaps carried by the valid status records of `checked` (the record checker's rows)."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    gaps = (
        checked.where(carried_gaps().isNotNull())
        .select(
            "tier",
            "cluster",
            "seen_topic",
            "origin_cluster",
            "topic",
            "logical_topic",
            "service",
            "record_id",
            "emitted_at",
            F.explode(F.from_json("retention_gaps_json", GAPS_TYPE)).alias("g"),
        )
        .select(
            "*",
            F.col("g.partition").alias("partition"),
            F.col("g.from_offset").alias("from_offset"),
            F.col("g.to_offset").alias("to_offset"),
            (F.col("g.to_offset") - F.col("g.from_offset")).alias("skipped"),
            F.timestamp_millis("g.after_time_ms").alias("after_time"),
            F.timestamp_millis("g.before_time_ms").alias("before_time"),
        )
    )
    key = list(RETENTION_GAPS.key)
    first = Window.partitionBy(*key).orderBy(F.col("before_time").isNull(), "emitted_at", "record_id")
    rows = (
        gaps.withColumn("rank", F.row_number().over(first))
        .where("rank = 1")
        .select(*RETENTION_GAPS.column_names)
        .localCheckpoint()
    )
    if rows.isEmpty():
        return
    target = DeltaTable.forPath(spark, lake.path(RETENTION_GAPS.name))
    before_commit(lake.path(RETENTION_GAPS.name))
    (
        target.alias("t")
        .merge(rows.alias("s"), " AND ".join(f"t.`{name}` = s.`{name}`" for name in key))
        .whenMatchedUpdateAll(condition="t.before_time IS NULL AND s.before_time IS NOT NULL")
        .whenNotMatchedInsertAll()
        .execute()
    )
