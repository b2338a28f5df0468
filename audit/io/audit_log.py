"""Reading the audit topic back: every committed record of one cluster, decoded, deduplicated.

The reconciliation does this at scale in Spark; this is the small, exact version for tests and
the soak's checks.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer

from audit.contract.record import AuditRecord, Kind, parse
from audit.io.clients import watermarks
from audit.io.offsets import read_ranges


def read_audit_topic(
    config: Mapping[str, object], audit_topic: str, *, timeout_s: float = 30.0
) -> tuple[list[AuditRecord], list[tuple[bytes, str]]]:
    """(records, rejects) of everything committed in `audit_topic` up to its current end.

    Reads with isolation.level=read_committed, so records of aborted transactions never show, and stops at a
    partition's last stable offset while a transaction is open there.
    """
    consumer = Consumer({**config, "group.id": f"kaudit-reader-{uuid.uuid4().hex[:8]}"})
    try:
        metadata = consumer.list_topics(audit_topic, timeout=timeout_s).topics.get(audit_topic)
        if metadata is None or metadata.error is not None:
            return [], []
        ranges = {
            (audit_topic, partition): watermarks(consumer, audit_topic, partition, timeout_s=timeout_s)
            for partition in metadata.partitions
        }
    finally:
        consumer.close()
    records, rejects = [], []
    for message in read_ranges(config, ranges, stall_s=timeout_s, what=f"reading {audit_topic}", to_eof=True):
        record, reason = parse(message.value())
        if record is None:
            rejects.append((message.value(), reason))
        else:
            records.append(record)
    return records, rejects


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
