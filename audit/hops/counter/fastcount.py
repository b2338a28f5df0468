"""The counter's per-batch counting: messages by (topic, partition, window start), with their count, bytes,
messages without a usable time, latencies, last offset and its audit time, and the content digest of its messages
(audit.contract.digest; None for a topic whose digest is off).

Two ways give the same groups. With the librdkafka plugin built (audit/io/plugin.py), the counter's consumer
loads it and the plugin counts each message in C as librdkafka hands it to the application (on_consume, a
public librdkafka interceptor): the counter takes those counts after each batch (`plugin_groups`), with no
Python call per message. Without it, with `KAUDIT_PURE_PYTHON=1`, or for a batch the plugin did not see whole,
`count_in_python` loops over the messages.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME

from audit.contract.audit_time import audit_time, is_usable
from audit.contract.digest import merge, message_hash
from audit.contract.tally import latency_floor
from audit.contract.windows import window_start_ms

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "KAUDIT_PURE_PYTHON"
Groups = dict[tuple[str, int, int], list]


def plugin_available() -> bool:
    """Whether the counter counts through the plugin: it is built and `KAUDIT_PURE_PYTHON` is not set."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return False
    from audit.io.plugin import PLUGIN_PATH

    return PLUGIN_PATH.exists()


def plugin_groups(consumed: dict[str, Any]) -> Groups:
    """The plugin's counts of a batch (audit.io.plugin.take_consumed) as the groups `count_in_python` gives."""
    groups: Groups = {}
    for topic, partition, start, count, size, no_timestamp, offset, when, latencies, digest in consumed["groups"]:
        histogram = {int(latency): n for latency, n in latencies.items()}
        groups[(topic, partition, start)] = [count, size, no_timestamp, histogram, offset, when, digest]
    return groups


def count_in_python(
    messages: list,
    now_ms: int,
    window_ms: int,
    on_error: Callable[[Any], None],
    digest_off: Callable[[str], bool] = lambda topic: False,
) -> Groups:
    """The per-message loop in Python: one dict update a message, headers read only when the
    timestamp is not a CreateTime; no digest for the topics `digest_off` names."""
    groups: Groups = {}
    hashed: dict[str, bool] = {}
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
            topic = key[0]
            if topic not in hashed:
                hashed[topic] = not digest_off(topic)
            # count, bytes, no_timestamp, latencies, offset, time, digest
            group = groups[key] = [0, 0, 0, {}, 0, 0, 0 if hashed[topic] else None]
        msg_key = message.key()
        group[0] += 1
        group[1] += len(message) + (len(msg_key) if msg_key else 0)
        if not usable:
            group[2] += 1
        latency = latency_floor(now_ms - when) if now_ms > when else 0
        latencies = group[3]
        latencies[latency] = latencies.get(latency, 0) + 1
        if group[6] is not None:
            group[6] = merge(group[6], message_hash(msg_key, message.value()))
        offset = message.offset()
        if offset >= group[4]:
            group[4] = offset
            group[5] = when
    return groups
