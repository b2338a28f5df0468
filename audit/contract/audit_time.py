"""The audit time of a message: the one clock every tier buckets by.

It is the producer's timestamp. For a message as a consumer reads it (`audit_time`):
1. its CreateTime, which replication preserves, when that is a usable time;
2. else the last `kaudit-time` header, when that holds a usable time (`parse_audit_time_header`): on
   topics that use LogAppendTime the broker overwrites the CreateTime, so the replicator writes the
   source's audit time there when it copies a message;
3. else no usable time, flagged `no_timestamp`: the message is counted at the time it carries when
   that is usable (the broker's, on a LogAppendTime topic whose producer does not audit: the same at
   every reader of the cluster, however late it reads), else at the counting time.
A usable time is after the epoch and not past 9999-12-31: a CreateTime beyond (a topic whose
`message.timestamp.after.max.ms` lets any time in) is in no window an audit record could name.

The producer tier (the librdkafka plugin, native/plugin/) applies the rule to a message as the broker
acknowledged it: its CreateTime, or on a LogAppendTime topic the broker's time, which a reader sees too.

The counter's C loop, the plugin and the lake's Spark columns state this rule again; the table of cases in tests/contract_cases.py holds each of them to these functions.
"""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME

from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS

# The longest `kaudit-time` value `parse_audit_time_header` reads (leading zeros allowed): the lake's
# Spark form of the rule needs the number.
AUDIT_TIME_HEADER_MAX_DIGITS = 20


def is_usable(time_ms: int) -> bool:
    """Whether `time_ms` can be an audit time: after the epoch, not past 9999-12-31."""
    return 0 < time_ms <= MAX_AUDIT_TIME_MS


def parse_audit_time_header(value: bytes | None) -> int | None:
    """The audit time carried in the `kaudit-time` header, or None if missing or unusable.

    Only bytes of ASCII digits count: a str (Unicode digits such as '١٢٣' pass str.isdigit), a sign,
    spaces or an exponent make the header unusable.
    """
    if not isinstance(value, bytes) or not value or len(value) > AUDIT_TIME_HEADER_MAX_DIGITS or not value.isdigit():
        return None
    ms = int(value)
    return ms if is_usable(ms) else None


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
    if kind == TIMESTAMP_CREATE_TIME and is_usable(value):
        return value, True
    from_header = parse_audit_time_header(header_value(headers, AUDIT_TIME_HEADER))
    if from_header is not None:
        return from_header, True
    return (value if is_usable(value) else now_ms), False
