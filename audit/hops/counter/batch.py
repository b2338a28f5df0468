"""One consumed batch added to a counter: its groups (audit.hops.counter.fastcount: messages by topic, partition and window)
into the tally, each partition's position moved once, and the partitions whose offsets moved by more than the
messages counted (markers, aborted batches, or a retention gap), for the retention check."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from audit.contract.errors import KafkaClientError
from audit.contract.tally import Tally
from audit.hops.counter import fastcount
from audit.hops.counter.state import PartitionProgress
from audit.io.plugin import take_consumed, with_plugin

log = logging.getLogger(__name__)


@dataclass
class BatchAdded:
    counted: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)
    # (topic, partition) -> (position before the batch, audit time of the message before it)
    skipped: dict[tuple[str, int], tuple[int, int | None]] = field(default_factory=dict)


def add_groups(
    tally: Tally,
    progress: dict[tuple[str, int], PartitionProgress],
    groups: dict[tuple[str, int, int], list],
    *,
    by_partition: bool,
) -> BatchAdded:
    """Add `groups` ((topic, partition, window start) -> [count, bytes, no timestamp, latencies, last offset,
    audit time of the last offset, content digest or None]) to `tally`, and move the positions of the assigned partitions in `progress`."""
    added = BatchAdded()
    batch: dict[tuple[str, int], list] = {}  # partition -> [position before, counted, last offset, time before]
    for (topic, partition, start), (count, size, no_ts, latencies, offset, when, digest) in groups.items():
        tally.add_many(
            topic,
            start,
            count,
            size,
            partition=partition if by_partition else None,
            no_timestamp=no_ts,
            latencies_ms=latencies,
            digest=digest,
        )
        added.by_topic[topic] = added.by_topic.get(topic, 0) + count
        added.counted += count
        position = progress.get((topic, partition))
        if position is None:
            continue
        seen = batch.get((topic, partition))
        if seen is None:
            seen = batch[(topic, partition)] = [position.position, 0, -1, position.last_audit_time_ms]
        seen[1] += count
        seen[2] = max(seen[2], offset)
        if offset + 1 > position.position:
            position.position = offset + 1
            position.last_audit_time_ms = when
    for key, (before, counted, last, when_before) in batch.items():
        if last + 1 - before - counted > 0:
            added.skipped[key] = (before, when_before)
    return added


def message_error(message, *, cluster: str) -> None:
    """A consumed message that carries an error: logged, and the end of the counter when fatal. A topic deleted
    or not yet known to its broker is not: the next topic refresh settles the subscription."""
    error = message.error()
    if error.code() == KafkaError._PARTITION_EOF:
        return
    log.warning("consume error", extra={"cluster": cluster, "topic": message.topic(), "error": error.str()})
    if error.fatal():
        raise KafkaClientError(f"counter {cluster}: fatal consumer error: {error.str()}", code=error.code())


def with_counting_plugin(
    config: dict[str, Any], window_minutes: int, *, native: bool, digest_exclude: tuple[str, ...] = ()
) -> tuple[dict[str, Any], str | None]:
    """The consumer's configuration with the plugin counting what librdkafka hands over (no digest for topics
    `digest_exclude` matches), and the instance id to take its counts by; unchanged and None when the plugin is
    not built or not wanted (`native`)."""
    if not (native and fastcount.plugin_available()):
        return config, None
    instance_id = f"{config['client.id']}-{uuid.uuid4().hex[:8]}"
    plugged = with_plugin(config, window_minutes=window_minutes, instance_id=instance_id, digest_exclude=digest_exclude)
    return plugged, instance_id


def plugin_batch_groups(instance_id: str, messages: list, *, cluster: str) -> dict[tuple[str, int, int], list] | None:
    """The plugin's groups of the batch just consumed, its messages with an error handled (the plugin leaves them);
    None when the plugin did not see the whole batch, which is then the Python loop's to count."""
    consumed = take_consumed(instance_id)
    seen = consumed["messages"]
    if seen != len(messages):
        errors = [message for message in messages if message.error() is not None]
        if seen + len(errors) != len(messages):
            log.error(
                "the plugin did not see the whole batch",
                extra={"cluster": cluster, "batch": len(messages), "seen": seen},
            )
            return None
        for message in errors:
            message_error(message, cluster=cluster)
    return fastcount.plugin_groups(consumed)
