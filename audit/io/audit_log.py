"""Reading the audit topic back: every committed record of one cluster, decoded, deduplicated.

The reconciliation does this at scale in Spark; this is the small, exact version for tests, the
demo summary and `kaudit audit-tail`.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from audit.contract.record import AuditRecord, Kind, parse
from audit.io.clients import watermarks


def read_audit_topic(
    config: Mapping[str, object], audit_topic: str, *, timeout_s: float = 30.0
) -> tuple[list[AuditRecord], list[tuple[bytes, str]]]:
    """(records, rejects) of everything committed in `audit_topic` up to its current end.

    Reads with isolation.level=read_committed, so records of aborted transactions never show.
    """
    consumer = Consumer(
        {
            **config,
            "group.id": f"kaudit-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(audit_topic, timeout=timeout_s).topics.get(audit_topic)
        if metadata is None or metadata.error is not None:
            return [], []
        ends = {}
        for partition in metadata.partitions:
            low, high = watermarks(consumer, audit_topic, partition, timeout_s=timeout_s)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(audit_topic, p, 0) for p in ends])
        records, rejects = [], []
        # With read_committed the consumer stops at the last stable offset, which can sit below the
        # high watermark while a transaction is open; the deadline covers that case.
        deadline = time.monotonic() + timeout_s
        remaining = dict(ends)
        while remaining and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        remaining.pop(message.partition(), None)
                    continue
                record, reason = parse(message.value())
                if record is None:
                    rejects.append((message.value(), reason))
                else:
                    records.append(record)
                if message.offset() + 1 >= ends.get(message.partition(), 0):
                    remaining.pop(message.partition(), None)
            for partition in list(remaining):
                position = consumer.position([TopicPartition(audit_topic, partition)])[0].offset
                if position >= ends[partition]:
                    remaining.pop(partition)
        return records, rejects
    finally:
        consumer.close()


def unique(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    """Drop repeated record ids (a replicated or retried record counts once), keeping the first."""
    seen, kept = set(), []
    for record in records:
        if record.record_id not in seen:
            seen.add(record.record_id)
            kept.append(record)
    return kept


def counts_by_window(records: Iterable[AuditRecord], tier: str, field: str = "count") -> dict[tuple[str, int], int]:
    """Summed `field` (count, bytes, send_failed, no_timestamp) per (topic, window_start_ms) of one
    tier, after dropping duplicate record ids."""
    totals: dict[tuple[str, int], int] = defaultdict(int)
    for record in unique(records):
        if record.kind == Kind.COUNT and record.tier == tier:
            totals[(record.topic, record.window_start_ms)] += getattr(record, field)
    return dict(totals)
