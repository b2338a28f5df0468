"""What is new in the audit topics of every configured cluster, and the offsets a run read up to.

Each run starts at the offsets the last one stored (`_source_offsets`) and ends at the stable end of
every partition; a cluster that does not answer is skipped and named, and read next run. The readers take the
settings, which the clusters' clients are built from (audit/io/clients.py); what a run stores goes to its `Lake`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

from audit.books.check.python_checker import SOURCE_COLUMNS
from audit.contract.errors import KafkaAuditError
from audit.contract.tables import (
    CLUSTER_READS,
    SOURCE_OFFSETS,
)
from audit.io import delta_io
from audit.io.clients import client_config, list_offsets, spark_kafka_options
from audit.io.lake_read import read_arrow
from audit.io.offsets import read_ranges

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from audit.io.lake import Lake
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


# -- 1. what is new in the audit topics --------------------------------------------------------


def audit_sources(
    settings: Settings,
    stored: dict[tuple[str, str, int], int],
    *,
    timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S,
    unreachable: dict[str, str],
) -> list[AuditSource]:
    """For each reachable cluster: its audit topics' partitions, from the stored offset to the stable end."""
    sources = []
    for cluster in settings.cluster_names:
        try:
            sources.append(_audit_source(settings, cluster, stored, timeout_s))
        except (KafkaException, KafkaAuditError) as exc:  # KafkaAuditError: a local cluster never started, say
            unreachable[cluster] = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
            log.error(
                "cluster unreachable; its audit topic is read next run",
                extra={"cluster": cluster, "error": unreachable[cluster]},
            )
    return sources


def store_cluster_reads(
    lake: Lake,
    cluster_names: tuple[str, ...],
    unreachable: dict[str, str],
    now_ms: int,
    known: dict[str, tuple[bool, str | None]] | None = None,
) -> dict[str, tuple[bool, str | None]]:
    """One `cluster_reads` row per configured cluster, rewritten only when its state changes.

    `known`: the stored states when the caller remembers them (else they are read); returns the
    states stored now, cluster -> (reachable, error)."""
    states = {name: (name not in unreachable, unreachable.get(name)) for name in cluster_names}
    if known is None:
        stored = read_arrow(lake, CLUSTER_READS.name).to_pylist()  # small: as `stored_offsets`
        known = {row["cluster"]: (row["reachable"], row["error"]) for row in stored}
    since = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    changed = [
        {"cluster": name, "reachable": reachable, "error": error, "since": since}
        for name, (reachable, error) in states.items()
        if known.get(name) != (reachable, error)
    ]
    delta_io.upsert_from_driver(lake, CLUSTER_READS, changed, ignore=())
    return states


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
        frame = (
            spark.read.format("kafka")
            .options(**spark_kafka_options(settings, source.cluster))
            .option("assign", json.dumps(assign))
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


def read_new_messages_in_driver(
    settings: Settings, sources: list[AuditSource], *, stall_s: float = DEFAULT_CLIENT_TIMEOUT_S
) -> pd.DataFrame:
    """`read_new_messages`' rows (SOURCE_COLUMNS) read by this process with confluent-kafka, for a small run:
    Spark's Kafka source spends a second or more starting its readers on a few thousand messages."""
    import pandas as pd

    columns: dict[str, list] = {name: [] for name in SOURCE_COLUMNS}
    for source in sources:
        config = client_config(settings, source.cluster)
        what = f"the audit topics of {source.cluster}"
        for message in read_ranges(config, source.ranges, stall_s=stall_s, what=what):
            row = (source.cluster, message.topic(), message.partition(), message.offset(), message.value())
            for name, value in zip(SOURCE_COLUMNS, row, strict=True):
                columns[name].append(value)
    frame = pd.DataFrame(columns)
    return frame.astype({"read_from_partition": "int32", "read_from_offset": "int64"})


# -- 6. offsets ----------------------------------------------------------------------------------


def stored_offsets(lake: Lake) -> dict[tuple[str, str, int], int]:
    """The offsets the runs before stored, read in this process with `deltalake` (milliseconds): a Spark
    query of this small table takes 0.25 s in a warm session, over a second in a new one."""
    rows = read_arrow(lake, SOURCE_OFFSETS.name).to_pylist()
    return {(row["cluster"], row["topic"], row["partition"]): row["next_offset"] for row in rows}


def offsets_read_up_to(sources: list[AuditSource]) -> dict[tuple[str, str, int], int]:
    """(cluster, topic, partition) -> the next offset to read, as `store_offsets` stores it."""
    return {
        (source.cluster, topic, partition): end
        for source in sources
        for (topic, partition), (_start, end) in source.ranges.items()
    }


def store_offsets(lake: Lake, sources: list[AuditSource], known: dict | None = None) -> None:
    """Store the offsets read up to; `known`: those stored already (as `stored_offsets` gives them), not
    written again."""
    known = known or {}
    now = datetime.now(tz=UTC)
    rows = [
        {"cluster": cluster, "topic": topic, "partition": partition, "next_offset": end, "updated_at": now}
        for (cluster, topic, partition), end in offsets_read_up_to(sources).items()
        if known.get((cluster, topic, partition)) != end
    ]
    delta_io.upsert_from_driver(lake, SOURCE_OFFSETS, rows)
