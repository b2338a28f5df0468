"""The counter's native batch loop (`_fastcount`, C), when it is built and fits the installed confluent-kafka.

`make setup` builds `_fastcount` from `_fastcount.c` (see `native/build.py`). It reads confluent-kafka's
C `Message` struct directly, so before it is used this module checks that the installed library has
the layout it was written for: the type's size, then messages with known values read both through
the Python API and through the struct. Any mismatch, a missing build, or `KAUDIT_PURE_PYTHON=1` leaves
`native_count` as None and the counter runs its pure-Python loop, which gives the same counts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

from audit.contract.audit_time import audit_time, is_usable
from audit.contract.record import MAX_AUDIT_TIME_MS
from audit.contract.tally import LATENCY_FLOORS, latency_floor
from audit.contract.windows import window_start_ms

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "KAUDIT_PURE_PYTHON"

# count(messages, now_ms, window_ms, create_time, max_time_ms) -> (groups, messages left for Python)
NativeCount = Callable[[list, int, int, int, int], tuple[dict, list]]


def _samples() -> list[Any]:
    """Messages with every field the native loop reads set to a value it could not guess."""
    return [
        Message(
            topic="kaudit-layout-check",
            partition=7,
            offset=1_234_567_890_123,
            key=b"key",
            value=b"value!",
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_123),
            leader_epoch=5,
        ),
        Message(
            topic="t",
            partition=2**31 - 1,
            offset=2**62,
            value=b"",
            timestamp=(TIMESTAMP_LOG_APPEND_TIME, -2),
            error=KafkaError(KafkaError._PARTITION_EOF),
            headers=[("h", b"v")],
        ),
        Message(topic="ü-topic", partition=0, offset=0, timestamp=(TIMESTAMP_CREATE_TIME, 1)),
    ]


def _python_view(message: Any) -> tuple:
    return (
        message.topic(),
        message.partition(),
        message.offset(),
        message.timestamp(),
        message.key(),
        message.value(),
        message.error(),
    )


def _load() -> NativeCount | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from audit.hops import _fastcount  # type: ignore[attr-defined]
    except ImportError:
        log.info("native counter loop not built; counting in Python")
        return None
    try:
        _fastcount.configure(Message, LATENCY_FLOORS)
        for message in _samples():
            native, python = _fastcount.read(message), _python_view(message)
            if native != python:
                raise TypeError(f"struct read {native!r}, the Python API {python!r}")
    except (TypeError, ValueError) as exc:
        log.warning("native counter loop does not fit this confluent-kafka; counting in Python: %s", exc)
        return None
    return _fastcount.count


native_count: NativeCount | None = _load()


def bucket(
    messages: list, now_ms: int, window_ms: int, *, native: bool = True, on_error: Callable[[Any], None]
) -> dict[tuple[str, int, int], list]:
    """Groups of a batch by (topic, partition, window start): [count, bytes, no_timestamp, latencies,
    last offset, its audit time]; the native loop when built (and `native`), Python for what it hands back."""
    groups: dict[tuple[str, int, int], list] = {}
    rest = messages
    if native and native_count is not None:
        groups, rest = native_count(messages, now_ms, window_ms, TIMESTAMP_CREATE_TIME, MAX_AUDIT_TIME_MS)
    if rest:
        count_in_python(rest, groups, now_ms, window_ms, on_error)
    return groups


def count_in_python(
    messages: list, groups: dict[tuple[str, int, int], list], now_ms: int, window_ms: int, on_error: Callable
) -> None:
    """The per-message loop in Python: one dict update a message, headers read only when the
    timestamp is not a CreateTime."""
    for message in messages:
        if message.error():
            on_error(message)
            continue
        kind, when = message.timestamp()
        if kind == TIMESTAMP_CREATE_TIME and is_usable(when):
            usable = True
        else:
            when, usable = audit_time((kind, when), message.headers(), now_ms)
        key = (message.topic(), message.partition(), window_start_ms(when, window_ms))
        group = groups.get(key)
        if group is None:
            group = groups[key] = [0, 0, 0, {}, 0, 0]  # count, bytes, no_timestamp, latencies, offset, time
        msg_key = message.key()
        group[0] += 1
        group[1] += len(message) + (len(msg_key) if msg_key else 0)
        if not usable:
            group[2] += 1
        latency = latency_floor(now_ms - when) if now_ms > when else 0
        latencies = group[3]
        latencies[latency] = latencies.get(latency, 0) + 1
        offset = message.offset()
        if offset >= group[4]:  # the native loop may have counted later messages of the group already
            group[4] = offset
            group[5] = when
