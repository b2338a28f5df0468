"""The reconciliation: every cluster's audit topic in, the books balanced into Delta tables.

One run (`reconcile(spark, settings)`):
1. reads what is new in the audit topic of EVERY configured cluster, its own and the replicated
   copies (`dc1._audit` on the aggregate), from the offsets the last run stored, so a stalled
   replicator cannot hide the producer's counts;
2. checks every message (audit/books/record_check.py) on the executors: invalid ones go to
   `audit_rejects` with their reason, valid ones are inserted into `audit_records` once per record_id
   (a record read twice, from two clusters or two runs, counts once);
3. re-sums `tier_counts` for the windows that received records, refreshes each reporter's newest
   partition status and from it `tier_status`, and re-judges `completeness` for those windows and
   for every window not yet final (audit/contract/completeness.py holds the rules);
4. stores the offsets it read up to. A crash before that step only makes the next run read the
   same messages again, which the record_id and offset keys absorb.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

from audit.books.record_check import CHECKED_DDL, RecordChecker
from audit.contract.completeness import classify, threshold_for
from audit.contract.names import PRODUCER_TIER
from audit.contract.tables import (
    AUDIT_RECORDS,
    AUDIT_REJECTS,
    COMPLETENESS,
    PARTITION_STATUS,
    SOURCE_OFFSETS,
    TIER_COUNTS,
    TIER_STATUS,
)
from audit.contract.windows import MS_PER_MINUTE
from audit.io import delta_io
from audit.io.clients import client_config, java_client_options, list_offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.settings import Settings


log = logging.getLogger(__name__)

DEFAULT_CLIENT_TIMEOUT_S = 15.0


@dataclass
class AuditSource:
    """The audit topics of one cluster and the offsets of this run: [start, end) per partition."""

    cluster: str
    ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)

    @property
    def pending(self) -> int:
        return sum(end - start for start, end in self.ranges.values() if end > start)


@dataclass
class ReconcileReport:
    read: int = 0
    records: int = 0
    rejects: int = 0
    windows: int = 0
    unreachable: dict[str, str] = field(default_factory=dict)  # cluster -> error
    seconds: float = 0.0

    def line(self) -> str:
        text = (
            f"read {self.read:,} audit messages: {self.records:,} new records, {self.rejects:,} rejected; "
            f"{self.windows:,} windows judged in {self.seconds:.1f} s"
        )
        if self.unreachable:
            text += "; UNREACHABLE: " + ", ".join(f"{c} ({e})" for c, e in self.unreachable.items())
        return text


# -- 1. what is new in the audit topics --------------------------------------------------------


def audit_sources(
    settings: Settings,
    stored: dict[tuple[str, str, int], int],
    *,
    timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S,
    report: ReconcileReport,
) -> list[AuditSource]:
    """For each reachable cluster: its audit topics' partitions, from the stored offset to the stable end."""
    sources = []
    for cluster in settings.cluster_names:
        try:
            sources.append(_audit_source(settings, cluster, stored, timeout_s))
        except KafkaException as exc:
            report.unreachable[cluster] = exc.args[0].str()
            log.error(
                "cluster unreachable; its audit topic is read next run",
                extra={"cluster": cluster, "error": exc.args[0].str()},
            )
    return sources


def _audit_source(settings: Settings, cluster: str, stored, timeout_s: float) -> AuditSource:
    admin = AdminClient(
        {**client_config(settings, cluster), "socket.connection.setup.timeout.ms": int(timeout_s * 1000)}
    )
    metadata = admin.list_topics(timeout=timeout_s).topics
    partitions = [
        (topic, p)
        for topic, meta in metadata.items()
        if meta.error is None and settings.is_audit_topic(cluster, topic)
        for p in meta.partitions
    ]
    earliest = list_offsets(admin, partitions, OffsetSpec.earliest(), timeout_s=timeout_s)
    latest = list_offsets(admin, partitions, OffsetSpec.latest(), timeout_s=timeout_s)
    source = AuditSource(cluster)
    for key in partitions:
        if key in latest:
            start = max(stored.get((cluster, *key), 0), earliest.get(key, 0))
            source.ranges[key] = (start, latest[key])
    return source


def read_new_messages(spark: SparkSession, settings: Settings, sources: list[AuditSource]):
    """One DataFrame (read_from_cluster, read_from_topic, read_from_partition, read_from_offset, value)."""
    from pyspark.sql import functions as F

    frames = []
    for source in sources:
        ranges = {key: span for key, span in source.ranges.items() if span[1] > span[0]}
        if not ranges:
            continue
        assign, starts, ends = {}, {}, {}
        for (topic, partition), (start, end) in ranges.items():
            assign.setdefault(topic, []).append(partition)
            starts.setdefault(topic, {})[str(partition)] = start
            ends.setdefault(topic, {})[str(partition)] = end
        reader = spark.read.format("kafka")
        for key, value in java_client_options(settings, source.cluster).items():
            reader = reader.option(f"kafka.{key}", value)
        frame = (
            reader.option("assign", json.dumps(assign))
            .option("startingOffsets", json.dumps(starts))
            .option("endingOffsets", json.dumps(ends))
            .option("kafka.isolation.level", "read_committed")
            # Transaction markers leave offsets without records: gaps are expected, not loss.
            .option("failOnDataLoss", "false")
            .load()
        )
        frames.append(
            frame.select(
                F.lit(source.cluster).alias("read_from_cluster"),
                F.col("topic").alias("read_from_topic"),
                F.col("partition").alias("read_from_partition"),
                F.col("offset").alias("read_from_offset"),
                "value",
            )
        )
    if not frames:
        return None
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


# -- 2. checked records and rejects --------------------------------------------------------------


def check_messages(messages, checker: RecordChecker):
    """The checker's rows, typed as the tables want them (times as TIMESTAMP, nested fields parsed)."""
    from pyspark.sql import functions as F

    checked = messages.mapInPandas(checker.check_batches, CHECKED_DDL)
    at = F.timestamp_millis
    partitions_type = (
        "ARRAY<STRUCT<partition: INT, position: BIGINT, end_offset: BIGINT, lag: BIGINT, last_audit_time_ms: BIGINT>>"
    )
    return (
        checked.withColumn("window_start", at("window_start_ms"))
        .withColumn("emitted_at", at("emitted_at_ms"))
        .withColumn("watermark", at("watermark_ms"))
        .withColumn(
            "by_partition",
            F.transform_keys(F.from_json("by_partition_json", "MAP<STRING,BIGINT>"), lambda k, _v: k.cast("int")),
        )
        .withColumn(
            "partitions",
            F.transform(
                F.from_json("partitions_json", partitions_type),
                lambda p: F.struct(
                    p["partition"].alias("partition"),
                    p["position"].alias("position"),
                    p["end_offset"].alias("end_offset"),
                    p["lag"].alias("lag"),
                    at(p["last_audit_time_ms"]).alias("last_audit_time"),
                ),
            ),
        )
        .withColumn("ingested_at", F.current_timestamp())
        .withColumn("date", F.to_date(F.coalesce("window_start", "emitted_at", "ingested_at")))
    )


def store_records_and_rejects(spark: SparkSession, settings: Settings, checked, report: ReconcileReport):
    """Insert new records (once per record_id) and rejects (once per audit-topic offset).

    Returns every valid record read, not only the new ones: the updates after this step must see the
    records of a run that was killed after inserting them (its offsets were not stored, so this run
    read them again), else their windows would never be re-summed. Re-summing a window is idempotent.
    """
    from pyspark.sql import functions as F

    checked = checked.localCheckpoint()  # the Python check runs once; records and rejects both come from it
    rejects = checked.where(F.col("reason").isNotNull()).withColumn("date", F.to_date("ingested_at"))
    records = (
        checked.where(F.col("reason").isNull())
        .dropDuplicates(["record_id"])
        .select(*AUDIT_RECORDS.column_names)
        .localCheckpoint()
    )  # computed once: it feeds every step below
    dates = [row.date for row in records.select("date").distinct().collect()]
    existing = (
        delta_io.read_table(spark, settings.lake_root, AUDIT_RECORDS.name)
        .where(F.col("date").isin(dates))
        .select("record_id", "date")
    )  # only the partitions it can be in
    new_records = records.join(existing, ["record_id", "date"], "left_anti").localCheckpoint()
    report.records = new_records.count()
    report.rejects = rejects.count()
    delta_io.insert_new(spark, settings.lake_root, AUDIT_RECORDS, new_records)
    if report.rejects:
        delta_io.insert_new(spark, settings.lake_root, AUDIT_REJECTS, rejects, prune=False)
        for row in rejects.select("read_from_cluster", "read_from_offset", "reason").limit(5).collect():
            log.warning(
                "audit record rejected",
                extra={"cluster": row.read_from_cluster, "offset": row.read_from_offset, "reason": row.reason},
            )
    return records


# -- 3a. tier counts ---------------------------------------------------------------------------


WINDOW_KEY = ("origin_cluster", "topic", "window_start")


def update_tier_counts(spark: SparkSession, settings: Settings, new_records):
    """Re-sum every (topic, window) that received count records; returns those window keys."""
    from pyspark.sql import functions as F

    touched = new_records.where(F.col("kind") == "count").select(*WINDOW_KEY).distinct().localCheckpoint()
    if touched.isEmpty():
        return touched
    counts = delta_io.read_table(spark, settings.lake_root, AUDIT_RECORDS.name).where(F.col("kind") == "count")
    counts = counts.join(touched.withColumn("date", F.to_date("window_start")), [*WINDOW_KEY, "date"], "left_semi")
    sums = counts.groupBy(*WINDOW_KEY, "tier").agg(
        F.first("logical_topic").alias("logical_topic"),
        F.first("window_minutes").alias("window_minutes"),
        F.sum("count").alias("count"),
        F.sum("bytes").alias("bytes"),
        F.sum("send_failed").alias("send_failed"),
        F.sum("no_timestamp").alias("no_timestamp"),
        F.count("*").alias("records"),
        F.count("by_partition").alias("with_partitions"),
        F.max("latency_p99_ms").alias("latency_p99_ms"),
        F.max("latency_max_ms").alias("latency_max_ms"),
    )
    per_partition = (
        counts.where(F.col("by_partition").isNotNull())
        .select(*WINDOW_KEY, "tier", F.explode("by_partition").alias("partition", "n"))
        .groupBy(*WINDOW_KEY, "tier", "partition")
        .agg(F.sum("n").alias("n"))
        .groupBy(*WINDOW_KEY, "tier")
        .agg(F.map_from_entries(F.collect_list(F.struct("partition", "n"))).alias("by_partition"))
    )
    rows = (
        sums.join(per_partition, [*WINDOW_KEY, "tier"], "left")
        # Partition counts are only comparable when every record of the window reported them.
        .withColumn("by_partition", F.when(F.col("with_partitions") == F.col("records"), F.col("by_partition")))
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    ).localCheckpoint()
    delta_io.upsert(spark, settings.lake_root, TIER_COUNTS, rows)
    return touched


# -- 3b. tier status ---------------------------------------------------------------------------


def update_tier_status(spark: SparkSession, settings: Settings, new_records) -> None:
    """Keep each reporter partition's newest status, then sum them up per tier and logical topic."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    statuses = new_records.where(F.col("kind") == "status")
    if not statuses.isEmpty():
        key = [name for name in PARTITION_STATUS.key]
        exploded = (
            statuses.select(
                "tier",
                "cluster",
                "seen_topic",
                "service",
                "origin_cluster",
                "topic",
                "logical_topic",
                "stalled",
                "emitted_at",
                "record_id",
                F.explode("partitions").alias("p"),
            )
            .select("*", "p.*")
            .drop("p")
        )
        newest = (
            exploded.withColumn(
                "rank",
                F.row_number().over(
                    Window.partitionBy(*key).orderBy(F.col("emitted_at").desc(), F.col("record_id").desc())
                ),
            )
            .where("rank = 1")
            .drop("rank")
            .withColumn(
                "partition_watermark",
                F.when(F.col("lag") == 0, F.col("emitted_at")).otherwise(
                    F.coalesce("last_audit_time", F.timestamp_millis(F.lit(0)))
                ),
            )
        )
        from delta.tables import DeltaTable

        target = DeltaTable.forPath(spark, delta_io.table_path(settings.lake_root, PARTITION_STATUS.name))
        condition = " AND ".join(f"t.`{name}` = s.`{name}`" for name in key)
        (
            target.alias("t")
            .merge(newest.select(*PARTITION_STATUS.column_names).alias("s"), condition)
            .whenMatchedUpdateAll(condition="s.emitted_at > t.emitted_at")
            .whenNotMatchedInsertAll()
            .execute()
        )
    partitions = delta_io.read_table(spark, settings.lake_root, PARTITION_STATUS.name)
    # A replicator into a cluster tier says what has arrived there, not what the tier's counter has
    # counted: without a status of the tier's own counter (a counter not started or hung) the tier
    # has seen nothing for sure, else its windows would turn final with nothing counted.
    hop_into_tier = F.col("tier").isin(list(settings.cluster_names)) & (F.col("cluster") != F.col("tier"))
    rows = (
        partitions.groupBy("tier", "origin_cluster", "topic")
        .agg(
            F.first("logical_topic").alias("logical_topic"),
            F.when(F.max((~hop_into_tier).cast("int")) == 1, F.min("partition_watermark"))
            .otherwise(F.timestamp_millis(F.lit(0)))
            .alias("watermark"),
            F.sum("lag").alias("lag"),
            F.max(F.col("stalled").cast("int")).cast("boolean").alias("stalled"),
            F.concat_ws(", ", F.array_sort(F.collect_set(F.concat("service", F.lit("@"), "cluster")))).alias(
                "reporters"
            ),
            F.max("emitted_at").alias("last_status_at"),
        )
        .withColumn("updated_at", F.current_timestamp())
    )
    delta_io.upsert(spark, settings.lake_root, TIER_STATUS, rows)


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


def update_completeness(spark: SparkSession, settings: Settings, touched, *, now_ms: int) -> int:
    """Judge every touched window and every window not yet final; returns how many rows were judged."""
    from pyspark.sql import functions as F

    paths = tier_paths(spark, settings)
    if paths is None:
        return 0
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
    minutes = settings.window_minutes
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
    ).mapInPandas(_Judge(now_ms=now_ms, grace_ms=int(settings.grace_s * 1000)), JUDGED_DDL)
    result = (
        judged.withColumn("logical_topic", F.concat_ws(".", "origin_cluster", "topic"))
        .withColumn("window_end", F.timestamp_millis("window_end_ms"))
        .withColumn("tier_watermark", F.timestamp_millis("tier_watermark_ms"))
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    ).localCheckpoint()
    delta_io.upsert(spark, settings.lake_root, COMPLETENESS, result)
    return result.count()


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


# -- 4. offsets ----------------------------------------------------------------------------------


def stored_offsets(spark: SparkSession, settings: Settings) -> dict[tuple[str, str, int], int]:
    rows = delta_io.read_table(spark, settings.lake_root, SOURCE_OFFSETS.name).collect()
    return {(row.cluster, row.topic, row.partition): row.next_offset for row in rows}


def store_offsets(spark: SparkSession, settings: Settings, sources: list[AuditSource]) -> None:
    from pyspark.sql import functions as F

    rows = [
        (source.cluster, topic, partition, end)
        for source in sources
        for (topic, partition), (_start, end) in source.ranges.items()
    ]
    if not rows:
        return
    frame = spark.createDataFrame(rows, "cluster STRING, topic STRING, partition INT, next_offset BIGINT")
    delta_io.upsert(spark, settings.lake_root, SOURCE_OFFSETS, frame.withColumn("updated_at", F.current_timestamp()))


# -- the run -------------------------------------------------------------------------------------


class _Steps:
    """Logs each step of a run with its duration, so a slow run says where its time went."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def done(self, step: str, **fields) -> None:
        now = time.monotonic()
        log.info("reconcile step done", extra={"step": step, "seconds": round(now - self._last, 1), **fields})
        self._last = now


def read_and_store(
    spark: SparkSession, settings: Settings, report: ReconcileReport, *, now_ms: int, step: _Steps | None = None
):
    """The first steps of a run: read every audit topic from the stored offsets, check each message,
    store records and rejects. Returns (sources, the valid records read or None when nothing was new)."""
    step = step or _Steps()
    delta_io.ensure_tables(
        spark,
        settings.lake_root,
        (
            AUDIT_RECORDS.name,
            AUDIT_REJECTS.name,
            TIER_COUNTS.name,
            TIER_STATUS.name,
            COMPLETENESS.name,
            PARTITION_STATUS.name,
            SOURCE_OFFSETS.name,
        ),
    )
    sources = audit_sources(settings, stored_offsets(spark, settings), report=report)
    report.read = sum(source.pending for source in sources)
    step.done("offsets", messages=report.read)
    messages = read_new_messages(spark, settings, sources)
    if messages is None:
        return sources, None
    checked = check_messages(messages, RecordChecker.from_settings(settings, now_ms))
    records = store_records_and_rejects(spark, settings, checked, report)
    step.done("records checked and stored", records=report.records, rejects=report.rejects)
    return sources, records


def reconcile(spark: SparkSession, settings: Settings, *, now_ms: int | None = None) -> ReconcileReport:
    """One reconciliation run over everything new since the last one (see the module doc)."""
    began = time.monotonic()
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    report = ReconcileReport()
    step = _Steps()
    sources, records = read_and_store(spark, settings, report, now_ms=now_ms, step=step)
    touched = None
    if records is not None:
        touched = update_tier_counts(spark, settings, records)
        step.done("tier_counts")
        update_tier_status(spark, settings, records)
        step.done("tier_status")
    if touched is None:
        touched = spark.createDataFrame([], "origin_cluster STRING, topic STRING, window_start TIMESTAMP")
    report.windows = update_completeness(spark, settings, touched, now_ms=now_ms)
    step.done("completeness", windows=report.windows)
    store_offsets(spark, settings, sources)
    report.seconds = time.monotonic() - began
    log.info(
        "reconciled",
        extra={
            "read": report.read,
            "records": report.records,
            "rejects": report.rejects,
            "windows": report.windows,
            "seconds": round(report.seconds, 1),
            "unreachable": ",".join(report.unreachable) or None,
        },
    )
    return report
