"""The lake tier: a Spark Structured Streaming job from one cluster into the Delta `bronze` table.

Exactly once, across crashes, per micro-batch:
- the rows are appended with Delta's transaction identifiers (`txnAppId` = the query's id,
  `txnVersion` = the batch id), so a batch replayed after a crash is skipped by Delta;
- the lake tier's counts of the batch go to the cluster's audit topic as count records whose ids
  are derived from the query id and the batch id, so a replayed batch repeats the same ids and the
  reconciliation counts them once. Spark replays a batch over the offsets it logged before running
  it, so the replay holds exactly the same messages, and its records the same counts and content digests
  (`digest_by_partition`, summed with Spark's built-in xxhash64: `audit.hops.lake.columns`).
A thread reports the job's position, lag and watermark as `status` records, like the counters.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import OffsetSpec
from prometheus_client import Counter, Gauge

from audit.contract.errors import JobError, LakeError
from audit.contract.names import LAKE_TIER
from audit.contract.record import count_record, encode, status_record
from audit.contract.tables import BRONZE
from audit.contract.watermarks import topic_statuses, watermark_ms
from audit.hops.lake.columns import digest_sum, message_hash_column, with_audit_window
from audit.hops.retention import RetentionGaps, Skip
from audit.io import delta_io
from audit.io.clients import Admin, client_config, ensure_topics, spark_kafka_options
from audit.io.lake import before_commit, lake_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.settings import Settings


log = logging.getLogger(__name__)

SERVICE = "kaudit-lake"
TIER = LAKE_TIER

ROWS = Counter("kaudit_lake_rows_total", "Rows landed in bronze", ["cluster"])
BATCHES = Counter("kaudit_lake_batches_total", "Micro-batches committed", ["cluster"])
LAG = Gauge("kaudit_lake_lag_messages", "End offsets minus the job's position", ["cluster"])
LAST_PROGRESS = Gauge(
    "kaudit_lake_last_progress_timestamp_seconds",
    "When a micro-batch last landed, or a status found the job caught up (lag 0)",
    ["cluster"],
)
RETENTION_SKIPPED = Counter(
    "kaudit_lake_retention_skipped_offsets_total",
    "Offsets deleted by retention before the lake job read them (lost for the lake)",
    ["cluster", "topic", "partition"],
)
RESTARTS = Counter("kaudit_lake_restarts_total", "Streams restarted from the checkpoint after a failure", ["cluster"])


@dataclass(frozen=True, kw_only=True)
class LakeOptions:
    cluster: str  # the cluster the lake reads, usually the aggregate
    checkpoint: str  # the stream's checkpoint folder (local path or URI)
    trigger_s: float = 10.0
    status_interval_s: float = 10.0
    max_offsets_per_trigger: int | None = None
    client_timeout_s: float = 30.0
    # A failed micro-batch (a broker away, say) restarts the stream from its checkpoint after this pause;
    # with --until-caught-up the job gives up after `restarts_until_caught_up` such failures.
    restart_after_s: float = 5.0
    restarts_until_caught_up: int = 3


@dataclass
class LakeStats:
    batches: int = 0
    rows: int = 0
    lag: int = 0
    restarts: int = 0
    retention_skipped: int = 0  # offsets deleted before the job read them, each counted once
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    last_audit_time_ms: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class WindowCounts:
    """One (topic, window) of a micro-batch, summed over its partitions' groups."""

    count: int = 0
    bytes: int = 0
    no_timestamp: int = 0
    partitions: dict[int, int] = field(default_factory=dict)
    digests: dict[int, int] = field(default_factory=dict)  # the content digest of each partition's messages
    latency: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("p50", "p95", "p99", "max"), 0.0))

    def add(self, group) -> None:
        self.count += group["count"]
        self.bytes += group["bytes"]
        self.no_timestamp += group["no_timestamp"]
        self.partitions[group.partition] = group["count"]
        self.digests[group.partition] = group["digest"]
        # Per-partition percentiles folded by their maximum: an upper bound, cheap and monotone.
        for name, value in zip(("p50", "p95", "p99"), group.latency, strict=True):
            self.latency[name] = max(self.latency[name], value)
        self.latency["max"] = max(self.latency["max"], group.latency_max, self.latency["p99"])


class LakeJob:
    """One lake stream from `options.cluster` into `bronze`, with the lake tier's audit records."""

    def __init__(self, spark: SparkSession, settings: Settings, options: LakeOptions, select_topic) -> None:
        self.spark = spark
        self.settings = settings
        self.options = options
        self.select_topic = select_topic
        self.stats = LakeStats()
        self.host = socket.gethostname()
        self._query_id = threading.Event()
        self._instance_id = ""
        self._sequence = 0
        self._lock = threading.Lock()
        self.retention = RetentionGaps(
            lambda topic, partition, n: RETENTION_SKIPPED.labels(options.cluster, topic, str(partition)).inc(n),
            cluster=options.cluster,
        )
        # What each micro-batch read per partition: batch id -> (topic, partition) -> (rows, first offset,
        # audit time of the first row, audit time before the batch); checked against Spark's progress.
        self._read: dict[int, dict[tuple[str, int], tuple[int, int, int, int | None]]] = {}
        self._checked_batches: set[int] = set()
        self._lease_lost: LakeError | None = None  # set by a micro-batch that found bronze's lease taken
        config = client_config(settings, options.cluster)
        self._producer = Producer({**config, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        self._admin = Admin(config)
        ensure_topics(config, {settings.audit_topic: 1}, timeout_s=options.client_timeout_s)
        self.bronze = delta_io.ensure_table(lake_of(settings), BRONZE)

    # -- topics --------------------------------------------------------------------------------

    def data_topics(self) -> list[str]:
        metadata = self._admin.client.list_topics(timeout=self.options.client_timeout_s).topics
        return sorted(
            name
            for name, meta in metadata.items()
            if meta.error is None
            and not name.startswith("__")
            and self.select_topic(name)
            and not self.settings.is_audit_topic(self.options.cluster, name)
        )

    def _current_topics(self) -> list[str] | None:
        """The topics to land now; None while the cluster does not answer (the stream goes on as it is)."""
        try:
            return self.data_topics()
        except KafkaException as exc:
            log.warning("topic list unknown", extra={"cluster": self.options.cluster, "error": exc.args[0].str()})
            return None

    # -- one micro-batch ----------------------------------------------------------------------

    def write_batch(self, batch, batch_id: int) -> None:
        """Land the batch in bronze and emit its counts; both keyed by (query id, batch id)."""
        from pyspark.sql import functions as F

        self._query_id.wait()
        now_ms = time.time_ns() // 1_000_000
        rows = (
            with_audit_window(batch, self.settings.window_minutes, now_ms)
            .withColumnRenamed("timestampType", "timestamp_type")
            .withColumn("batch_id", F.lit(batch_id).cast("bigint"))
            .persist()
        )
        try:
            self._fence()
            (
                rows.select(*BRONZE.column_names)
                .write.format("delta")
                .mode("append")
                .option("txnAppId", self._instance_id)
                .option("txnVersion", batch_id)
                .save(self.bronze)
            )
            counts = batch_groups(rows, now_ms).collect()
        finally:
            rows.unpersist()
        self._emit_counts(counts, batch_id)

    def _fence(self) -> None:
        """Before each commit to bronze: a LakeError naming the holder once bronze's lease (`kaudit lake` holds it) is
        lost; kept, so that the run stops instead of restarting the stream: a lost lease does not come back."""
        try:
            before_commit(self.bronze)
        except LakeError as lost:
            self._lease_lost = lost
            raise

    def _await_round(self, query) -> None:
        """Wait a status interval for the stream; a LakeError once bronze's lease is lost (found by a micro-batch,
        whose stream then fails with it wrapped, or by this round's own check)."""
        try:
            query.awaitTermination(self.options.status_interval_s)
        except Exception:
            if self._lease_lost is None:
                raise
        if self._lease_lost is not None:
            raise self._lease_lost
        self._fence()

    def _emit_counts(self, groups: list, batch_id: int) -> None:
        """Send the batch's counts, one record per (topic, window), under ids of (query id, batch id)."""
        windows, read = self._fold_groups(groups)
        failures: list = []
        for index, ((topic, start), entry) in enumerate(sorted(windows.items())):
            record = count_record(
                record_id=f"{self._instance_id}:{batch_id}.{index}",
                tier=TIER,
                cluster=self.options.cluster,
                service=SERVICE,
                host=self.host,
                instance_id=self._instance_id,
                topic=topic,
                window_start_ms=start,
                window_minutes=self.settings.window_minutes,
                count=entry.count,
                bytes=entry.bytes,
                no_timestamp=entry.no_timestamp,
                by_partition=entry.partitions,
                digest_by_partition=record_digests(self.settings, topic, entry),
                latency_ms=entry.latency,
            )
            self._producer.produce(
                self.settings.audit_topic,
                key=topic.encode(),
                value=encode(record),
                on_delivery=lambda err, _m: failures.append(err) if err else None,
            )
        if self._producer.flush(self.options.client_timeout_s) or failures:
            # Failing the batch makes Spark replay it; the replay sends the same record ids.
            raise JobError(
                f"lake job: counts of batch {batch_id} not delivered to {self.options.cluster}'s audit topic "
                f"({failures[:1] or 'flush timed out'}); Spark replays the batch with the same record ids"
            )
        with self._lock:
            self._read[batch_id] = read
        total = sum(entry.count for entry in windows.values())
        self.stats.batches += 1
        self.stats.rows += total
        ROWS.labels(self.options.cluster).inc(total)
        BATCHES.labels(self.options.cluster).inc()
        LAST_PROGRESS.labels(self.options.cluster).set_to_current_time()
        log.info(
            "batch landed",
            extra={"cluster": self.options.cluster, "batch": batch_id, "rows": total, "windows": len(windows)},
        )

    def _fold_groups(self, groups: list) -> tuple[dict[tuple[str, int], WindowCounts], dict]:
        """The batch's (topic, window, partition) groups summed by (topic, window); what it read per partition
        (rows, first offset, audit time of the first row, audit time before the batch); positions advanced."""
        windows: dict[tuple[str, int], WindowCounts] = {}
        read: dict[tuple[str, int], tuple[int, int, int, int | None]] = {}
        for g in groups:
            key = (g.topic, g.partition)
            rows, first, first_ms, before_ms = read.get(key, (0, g.first_offset, g.first_audit_ms, None))
            if key not in read:
                before_ms = self.stats.last_audit_time_ms.get(key)
            read[key] = (rows + g["count"], min(first, g.first_offset), min(first_ms, g.first_audit_ms), before_ms)
            start = int(g.window_start.timestamp() * 1000)
            windows.setdefault((g.topic, start), WindowCounts()).add(g)
            with self._lock:
                if g.last_offset + 1 > self.stats.positions.get(key, -1):
                    self.stats.positions[key] = g.last_offset + 1
                    self.stats.last_audit_time_ms[key] = g.last_audit_ms
        return windows, read

    # -- status --------------------------------------------------------------------------------

    def check_retention(self, query) -> None:
        """Spark's Kafka source (failOnDataLoss=false) passes a deleted range with only a warning in its
        log. Each batch's planned offsets (Spark's progress, from the checkpoint's offset log) are
        compared with what the batch read: a partition that started reading past its planned start is
        checked against the log start offset, like the counter's and the replicator's skips."""
        skips = []
        for progress in list(query.recentProgress) if query is not None else []:
            batch_id = progress.get("batchId")
            if batch_id is None or batch_id in self._checked_batches:
                continue
            self._checked_batches.add(batch_id)
            with self._lock:
                read = self._read.pop(batch_id, {})
            for source in progress.get("sources", []):
                starts, ends = _json(source.get("startOffset")) or {}, _json(source.get("endOffset")) or {}
                for topic, partitions in ends.items():
                    for partition, end in partitions.items():
                        start = (starts.get(topic) or {}).get(partition)
                        if start is None or int(end) <= int(start):
                            continue
                        key = (topic, int(partition))
                        rows, first, first_ms, before_ms = read.get(key, (0, int(end), None, None))
                        if first > int(start):
                            times = (first_ms,) if rows else ()
                            skips.append(Skip(topic, key[1], int(start), (first,), before_ms, times))
        if skips:
            self.retention.check(
                skips,
                lambda keys: self._admin.list_offsets(
                    keys, OffsetSpec.earliest(), timeout_s=self.options.client_timeout_s
                ),
            )
            self.stats.retention_skipped = self.retention.skipped

    def emit_status(self, query) -> None:
        """Position, lag and watermark per topic, from the query's progress and the broker's end offsets."""
        self.check_retention(query)
        positions = dict(self.stats.positions)
        progress = query.lastProgress if query is not None else None
        for source in (progress or {}).get("sources", []):
            for topic, partitions in _json(source.get("endOffset")).items():
                for partition, offset in partitions.items():
                    key = (topic, int(partition))
                    positions[key] = max(positions.get(key, 0), int(offset))
        if not positions:
            return
        ends = self._admin.list_offsets(list(positions), OffsetSpec.latest(), timeout_s=self.options.client_timeout_s)
        now_ms = time.time_ns() // 1_000_000
        by_topic, withheld = topic_statuses(positions, ends, dict(self.stats.last_audit_time_ms))
        if withheld:
            log.warning(
                "status withheld: end offsets unknown",
                extra={"cluster": self.options.cluster, "topics": ",".join(withheld)},
            )
        self.stats.lag = sum(p.lag for parts in by_topic.values() for p in parts)
        LAG.labels(self.options.cluster).set(self.stats.lag)
        if self.stats.lag == 0 and by_topic and not withheld:
            LAST_PROGRESS.labels(self.options.cluster).set_to_current_time()
        for topic, partitions in by_topic.items():
            with self._lock:
                self._sequence += 1
                rid = f"{self._instance_id}:status.{self._sequence}.{now_ms}"
            record = status_record(
                record_id=rid,
                tier=TIER,
                cluster=self.options.cluster,
                service=SERVICE,
                host=self.host,
                instance_id=self._instance_id,
                topic=topic,
                window_minutes=self.settings.window_minutes,
                partitions=partitions,
                watermark_ms=watermark_ms(partitions, now_ms),
                retention_gaps=self.retention.of_topic(topic),
            )
            self._producer.produce(self.settings.audit_topic, key=topic.encode(), value=encode(record))
        self._producer.flush(self.options.client_timeout_s)

    # -- the run -------------------------------------------------------------------------------

    def _may_restart(self, query, until_caught_up: bool, stop: threading.Event) -> bool:
        """After a failed micro-batch: wait, then say whether to start the stream again from its checkpoint
        (which replays the batch under the same record ids, so nothing counts twice)."""
        if until_caught_up and self.stats.restarts >= self.options.restarts_until_caught_up:
            return False
        self.stats.restarts += 1
        RESTARTS.labels(self.options.cluster).inc()
        log.error(
            "stream failed; restarting from the checkpoint",
            extra={
                "cluster": self.options.cluster,
                "error": str(query.exception())[:500],
                "after_s": self.options.restart_after_s,
                "restarts": self.stats.restarts,
            },
        )
        return not stop.wait(self.options.restart_after_s)

    def start(self, topics: list[str], *, until_caught_up: bool):
        reader = (
            self.spark.readStream.format("kafka")
            .options(**spark_kafka_options(self.settings, self.options.cluster))
            .option("subscribe", ",".join(topics))
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed")
            .option("failOnDataLoss", "false")
        )
        if self.options.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(self.options.max_offsets_per_trigger))
        writer = (
            reader.load()
            .writeStream.foreachBatch(self.write_batch)
            .option("checkpointLocation", self.options.checkpoint)
            .queryName(f"kaudit-lake-{self.options.cluster}")
        )
        writer = (
            writer.trigger(availableNow=True)
            if until_caught_up
            else writer.trigger(processingTime=f"{self.options.trigger_s} seconds")
        )
        query = writer.start()
        # The query id is kept in the checkpoint: the same across restarts, new for a new checkpoint.
        self._instance_id = f"{SERVICE}-{self.options.cluster}-{query.id.replace('-', '')[:16]}"
        self._query_id.set()
        return query

    def run(
        self, *, until_caught_up: bool = False, max_seconds: float | None = None, stop: threading.Event | None = None
    ) -> LakeStats:
        """Land data until caught up (available-now), `max_seconds`, or `stop`; status every interval."""
        stop = stop or threading.Event()
        began = time.monotonic()
        topics = self.data_topics()
        if not topics:
            log.warning("no topics to land yet", extra={"cluster": self.options.cluster})
            return self.stats
        log.info(
            "lake job starting",
            extra={
                "cluster": self.options.cluster,
                "topics": len(topics),
                "mode": "until caught up" if until_caught_up else "continuous",
            },
        )
        query = self.start(topics, until_caught_up=until_caught_up)
        try:
            while not stop.is_set():
                if not query.isActive and query.exception() is None:
                    break  # available-now: everything there was is landed
                self._await_round(query)
                if query.exception() is not None:
                    if not self._may_restart(query, until_caught_up, stop):
                        break
                    query = self.start(topics, until_caught_up=until_caught_up)
                    continue
                self.emit_status(query)
                if max_seconds is not None and time.monotonic() - began >= max_seconds:
                    break
                current = None if until_caught_up else self._current_topics()
                if current is not None and current != topics:
                    log.info("topic list changed: restarting the stream", extra={"cluster": self.options.cluster})
                    query.stop()
                    topics = current
                    query = self.start(topics, until_caught_up=False)
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is not None and not stop.is_set():
            raise JobError(
                f"lake job on {self.options.cluster} failed: {query.exception()}; a restart resumes from "
                f"the checkpoint {self.options.checkpoint}"
            )
        self.emit_status(query)
        return self.stats


def record_digests(settings: Settings, topic: str, entry: WindowCounts) -> dict[int, int] | None:
    """The content digests a count record of `topic` carries: none for a topic counted without them
    (`topics.digest_exclude`, matched against the name as the lake reads it, as the counters match it)."""
    return None if settings.topics.digest_off(topic) else entry.digests


def batch_groups(rows, now_ms: int):
    """A landed micro-batch (`with_audit_window`'s columns) grouped by (topic, window, partition): counts, bytes,
    offsets, audit times, latency and the content digest of the group's messages, ordered; a Spark DataFrame."""
    from pyspark.sql import functions as F

    size = F.coalesce(F.length("value"), F.lit(0)) + F.coalesce(F.length("key"), F.lit(0))  # a tombstone: 0
    latency = F.greatest(F.lit(now_ms) - F.col("audit_ms"), F.lit(0)).cast("double")
    return (
        rows.groupBy("topic", "window_start", "partition")
        .agg(
            F.count("*").alias("count"),
            F.sum(size).alias("bytes"),
            F.sum(F.col("no_timestamp").cast("int")).alias("no_timestamp"),
            F.max("offset").alias("last_offset"),
            F.min("offset").alias("first_offset"),
            F.min("audit_ms").alias("first_audit_ms"),
            F.max("audit_ms").alias("last_audit_ms"),
            F.percentile_approx(latency, [0.5, 0.95, 0.99], 1000).alias("latency"),
            F.max(latency).alias("latency_max"),
            digest_sum(message_hash_column("key", "value")).alias("digest"),
        )
        .orderBy("topic", "window_start", "partition")
    )


def _json(value) -> dict:
    import json

    if not value:
        return {}
    return value if isinstance(value, dict) else json.loads(value)


def default_checkpoint(settings: Settings, cluster: str) -> str:
    return f"{str(lake_of(settings)).rstrip('/')}/_checkpoints/lake-{cluster}"
