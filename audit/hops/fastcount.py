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

from audit.contract.tally import LATENCY_FLOORS

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
