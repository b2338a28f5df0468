"""The audit time of a message: the one clock every tier buckets by.

It is the producer's timestamp: the Kafka CreateTime, which replication preserves; on topics that
use LogAppendTime the broker overwrites that, so the audited producer also writes it into the
`kaudit-time` header, which wins there. A message with neither is counted in the window of the time
it carries (or the counting time) and flagged `no_timestamp`. A CreateTime past 9999-12-31 (a topic
whose `message.timestamp.after.max.ms` lets any time in) is no usable time either: no audit record
could name its window.
"""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME

from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS, parse_audit_time_header


def header_value(headers, name: str) -> bytes | None:
    """The last value of header `name` in a confluent-kafka header list (or None)."""
    if not headers:
        return None
    found = None
    for key, value in headers:
        if key == name:
            found = value
    return found


def audit_time(timestamp: tuple[int, int], headers, now_ms: int) -> tuple[int, bool]:
    """(audit time in ms, usable) for a consumed message's `timestamp()` and `headers()`."""
    kind, value = timestamp
    in_range = 0 < value <= MAX_AUDIT_TIME_MS
    if kind == TIMESTAMP_CREATE_TIME and in_range:
        return value, True
    from_header = parse_audit_time_header(header_value(headers, AUDIT_TIME_HEADER))
    if from_header is not None:
        return from_header, True
    return (value if in_range else now_ms), False
