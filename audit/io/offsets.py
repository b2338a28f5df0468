"""Offsets: what a consumer group has committed and how far behind the partitions' ends it is, and the committed
messages of offset ranges."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from audit.contract.errors import KafkaClientError
from audit.io.clients import DEFAULT_ADMIN_TIMEOUT_S, Admin

log = logging.getLogger(__name__)


COMMITTED_ATTEMPT_S = 5.0


def committed_offsets(
    consumer: Consumer,
    partitions: list[TopicPartition],
    *,
    timeout_s: float,
    attempt_s: float = COMMITTED_ATTEMPT_S,
    config: Mapping[str, Any] | None = None,
) -> list[TopicPartition]:
    """The group's committed offsets of `partitions`, asked anew every `attempt_s` until `timeout_s`.

    A request sent while a restarted broker loads its group coordinator can go unanswered for its whole
    timeout, and the error, raised inside a rebalance callback, would end the service; a fresh request after a
    few seconds is answered once the coordinator is back.

    `config`, the consumer's own, lets the error tell an absent coordinator from offsets a transaction
    holds (see `_held_by_a_transaction`).

    A consumer being closed gets none (`[]`): librdkafka serves an assignment that arrives during `close()`, whose
    callback then asks, but no partition of it will be read, and every request fails at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.committed(partitions, timeout=max(0.1, min(attempt_s, deadline - time.monotonic())))
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._DESTROY:
                log.info("committed offsets not asked: the consumer is closing", extra={"partitions": len(partitions)})
                return []
            if time.monotonic() >= deadline:
                if config is not None and _held_by_a_transaction(config, partitions):
                    raise KafkaClientError(
                        f"the committed offsets of group {config.get('group.id')} for {len(partitions)} partitions "
                        f"are held by a transaction that has not completed in {timeout_s:.0f} s. If it stays so past "
                        "its transaction timeout, it is a hanging transaction (seen after a broker restart that "
                        "dropped the transaction's markers): find it with `kafka-transactions.sh --bootstrap-server "
                        f"{config.get('bootstrap.servers')} find-hanging --broker-id <id>` and end it with "
                        "`kafka-transactions.sh ... abort`"
                    ) from exc
                raise KafkaClientError(
                    f"the group coordinator did not answer committed offsets for {len(partitions)} partitions "
                    f"in {timeout_s:.0f} s: {exc.args[0].str()}"
                ) from exc
            log.warning("committed offsets not answered; asking again", extra={"error": exc.args[0].str()})


def _held_by_a_transaction(config: Mapping[str, Any], partitions: list[TopicPartition]) -> bool:
    """True when the group's offsets are answered to a read_uncommitted consumer only. A read_committed
    consumer asks for stable offsets (KIP-447), and while a transaction holds offsets of the group the
    coordinator answers UNSTABLE_OFFSET_COMMIT, which librdkafka retries until its timeout."""
    if config.get("isolation.level", "read_committed") != "read_committed":
        return False
    probe = Consumer({**config, "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        probe.committed(partitions, timeout=COMMITTED_ATTEMPT_S)
        return True
    except KafkaException:
        return False
    finally:
        probe.close()


def group_lag(
    consumer: Consumer, admin: Admin, topics: list[str], *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> dict[tuple[str, int], int] | None:
    """Per partition of `topics` that the consumer's group has not committed up to its end, how many
    offsets it is behind: judged from the broker, whatever this member's own assignment is. None when
    an end or the committed offsets are not known (a coordinator that is slow or moving)."""
    metadata = consumer.list_topics(timeout=timeout_s).topics
    partitions = [(topic, p) for topic in topics if topic in metadata for p in metadata[topic].partitions]
    ends = admin.list_offsets(partitions, OffsetSpec.latest(), timeout_s=timeout_s)
    if len(ends) != len(partitions):  # `Admin.list_offsets` has logged which
        return None
    try:
        committed = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    except KafkaException as exc:
        log.warning("committed offsets unknown", extra={"group_topics": len(topics), "error": exc.args[0].str()})
        return None
    behind = {(tp.topic, tp.partition): ends[(tp.topic, tp.partition)] - max(tp.offset, 0) for tp in committed}
    return {key: lag for key, lag in behind.items() if lag > 0}


def group_caught_up(
    consumer: Consumer, admin: Admin, topics: list[str], *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> bool:
    """True when the consumer's group has committed up to the end of EVERY partition of `topics`."""
    return group_lag(consumer, admin, topics, timeout_s=timeout_s) == {}


RANGE_READER = {
    "group.id": "kaudit-range-reader",  # assigned, never committed: the group is not joined
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 20,  # an idle partition's fetch returns at once, as in the books' Spark reads
}


def read_ranges(
    config: Mapping[str, Any],
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    *,
    stall_s: float,
    what: str,
    to_eof: bool = False,
) -> list:
    """Every committed message of each partition's offset range [start, end), `end` at most the partition's last
    stable offset (`list_offsets`). Offsets without a message (transaction markers, aborted records, records
    deleted by retention) are passed over, as Spark's Kafka source with failOnDataLoss=false does. Raises a
    KafkaClientError naming `what` and the partitions not read to their end when no message comes for `stall_s`.

    `to_eof`: a partition also ends where its reader first finds no more committed messages (its last stable
    offset then, below the high watermark while a transaction is open), for readers of what is committed now."""
    wanted = {key: span for key, span in ranges.items() if span[1] > span[0]}
    consumer = Consumer({**config, **RANGE_READER})
    messages: list = []
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in wanted.items()])
        unread = dict(wanted)
        stalled_at = time.monotonic() + stall_s
        while unread:
            batch = consumer.consume(10_000, timeout=0.5)
            if batch:
                stalled_at = time.monotonic() + stall_s
            elif time.monotonic() > stalled_at:
                missing = ", ".join(
                    f"{t}[{p}] from {consumer.position([TopicPartition(t, p)])[0].offset}" for t, p in unread
                )
                raise KafkaClientError(f"{what}: no message for {stall_s:.0f} s before the end of {missing}")
            for message in batch:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    if error.fatal():
                        raise KafkaException(error)
                    log.warning("read error, retried", extra={"what": what, "error": error.str()})
                    continue
                key, offset = (message.topic(), message.partition()), message.offset()
                if key not in unread or offset is None:
                    continue
                end = unread[key][1]
                if error is None and offset < end:
                    messages.append(message)
                if offset + (error is None) >= end or (error is not None and to_eof):  # EOF: the next offset
                    del unread[key]
        return messages
    finally:
        consumer.close()
