"""The replicator's exactly-once mode (`kaudit mirror --exactly-once`), after MirrorMaker 2's KIP-618.

The target producer is transactional, with a transactional id stable across restarts
(`kaudit-mirror-<source>-<target>-<instance>`): a restarted instance fences its predecessor and
aborts whatever it left open. Each transaction holds the copied messages (the audit topic's
included) and, in a small compacted topic on the TARGET (`_kaudit_mirror_offsets`), the source
position of every partition they cover, keyed by (group, topic, partition). Copies and positions
are committed together or not at all, so a `read_committed` reader of the target sees every source
message exactly once whatever crashes.

On start and after every rebalance the positions are read back from the target (read_committed,
up to the last stable offset) and the source consumer is placed there; the source group's
committed offsets are only a hint, used for a partition the target holds no position for (a switch
from at-least-once mode), and committed after each transaction so that lag tools and
`--until-caught-up` keep working. A flow's `acked` position is the committed one: lag, stall and
status records count only committed data.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from audit.contract.errors import KafkaClientError
from audit.hops.mirror_state import COPIED, ERRORS, PartitionFlow, copy_headers, provenance
from audit.hops.replicator import Replicator
from audit.hops.retention import Skip
from audit.io.clients import FENCED, LATE_ANSWER_S, bounded, committed_offsets, ensure_topics, is_lost, read_ranges

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "_kaudit_mirror_offsets"
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "1", "segment.ms": "600000"}
TRANSACTION_TIMEOUT_MS = 60_000


def transactional_id(source: str, target: str, group: str, instance: str) -> str:
    """Stable across restarts of one instance, distinct between instances and groups."""
    default_group = f"kaudit-mirror-{source}-{target}"
    base = default_group if group == default_group else f"{default_group}-{group}"
    return f"{base}-{instance}"


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return json.dumps([group, topic, partition], separators=(",", ":")).encode()


def read_positions(target_config: dict, group: str, *, timeout_s: float) -> dict[tuple[str, int], int]:
    """Every source position `group` committed on the target, read up to the last stable offset."""
    reader = Consumer({**target_config, "group.id": f"kaudit-mirror-offsets-reader-{uuid.uuid4().hex[:8]}"})
    try:
        partitions = reader.list_topics(OFFSETS_TOPIC, timeout=timeout_s).topics[OFFSETS_TOPIC].partitions
    finally:
        reader.close()
    whole = {(OFFSETS_TOPIC, partition): (OFFSET_BEGINNING, sys.maxsize) for partition in partitions}
    try:
        messages = read_ranges(
            target_config, whole, stall_s=timeout_s, what="reading the mirror offsets topic", to_eof=True
        )
    except KafkaClientError as exc:  # the replicator retries what the client calls a time-out
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc))) from exc
    positions: dict[tuple[str, int], int] = {}
    for message in messages:
        key, value = message.key(), message.value()
        if key is None or value is None:
            continue
        group_topic_partition = json.loads(key)
        if group_topic_partition[0] == group:
            positions[(group_topic_partition[1], group_topic_partition[2])] = json.loads(value)["offset"]
    return positions


class ExactlyOnceReplicator(Replicator):
    """A Replicator whose copies and source positions are committed in one target transaction."""

    def __init__(self, *args, instance: str = "0", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transactional_id = transactional_id(self.options.source, self.options.target, self.options.group, instance)
        self._stored: dict[tuple[str, int], int] = {}  # position committed on the target
        self._pending: dict[tuple[str, int], tuple[int, int]] = {}  # (next offset, last time) in this transaction
        self._pending_copied: dict[str, int] = defaultdict(int)
        self._in_transaction = False
        self._transaction_started = 0.0
        self.transactions = 0
        self.aborts = 0

    # -- clients -------------------------------------------------------------------------------

    def open(self) -> None:
        super().open()
        self._producer.flush(0)  # the base producer is never used: replaced by a transactional one
        ensure_topics(
            self.target_config,
            {OFFSETS_TOPIC: 1},
            topic_configs={OFFSETS_TOPIC: OFFSETS_TOPIC_CONFIG},
            timeout_s=self.options.client_timeout_s,
        )
        self._start_producer()
        log.info("exactly-once mode", extra={"target": self.options.target, "transactional_id": self.transactional_id})

    def _new_producer(self) -> Producer:
        return Producer(
            {
                **self.target_config,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": self.options.linger_ms,
            }
        )

    def _start_producer(self) -> None:
        """A new transactional producer; its init fences every earlier one with the same id (a stuck
        one left to its thread included) and aborts the transaction that one left open."""
        self._producer = producer = self._new_producer()
        timeout_s = self.options.client_timeout_s
        self._retry(
            "init_transactions",
            lambda: self._bounded(lambda: producer.init_transactions(timeout_s), "init_transactions"),
        )

    def _bounded(self, call, what: str):
        """A transactional call given the client timeout plus LATE_ANSWER_S to return (`clients.bounded`):
        librdkafka was seen never to answer some of them after a broker restart (librdkafka #5511)."""
        return bounded(call, self.options.client_timeout_s + LATE_ANSWER_S, f"{what} ({self.transactional_id})")

    def _retry(self, what: str, call) -> None:
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or self._stop.is_set():
                    raise
                log.warning(f"{what}: retrying", extra={"target": self.options.target, "error": exc.args[0].str()})

    # -- rebalance -----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        stored = read_positions(self.target_config, self.options.group, timeout_s=self.options.client_timeout_s)
        hints = {
            (tp.topic, tp.partition): tp.offset
            for tp in committed_offsets(
                consumer, partitions, timeout_s=self.options.client_timeout_s, config=self._consumer_config
            )
        }
        unknown = [key for key in hints if key not in stored and hints[key] < 0]
        earliest = self._list_offsets(unknown, OffsetSpec.earliest()) if unknown else {}
        starts = []
        with self._lock:
            for key, hint in hints.items():
                start = stored.get(key, hint if hint >= 0 else earliest.get(key, 0))
                self._stored[key] = start
                self.flows[key] = PartitionFlow(committed=hint if hint >= 0 else start, acked=start, next_offset=start)
                starts.append(TopicPartition(key[0], key[1], start))
        self._log_assignment(starts, from_target_positions=sum(key in stored for key in hints))
        consumer.assign(starts)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"source": self.options.source, "partitions": len(partitions)})
        # Commit what is copied before the next owner reads the positions back.
        self._commit_transaction()
        self.commit()
        with self._lock:
            for tp in partitions:
                self.flows.pop((tp.topic, tp.partition), None)
                self._stored.pop((tp.topic, tp.partition), None)

    # -- copying -------------------------------------------------------------------------------

    def copy_batch(self, messages: list) -> None:
        super().copy_batch(messages)  # _copy below, then the retention gaps found on the way
        if self._pending and (not messages or time.monotonic() - self._transaction_started >= self._interval()):
            self._commit_transaction()

    def _copy(self, messages: list, skips: list[Skip]) -> None:
        source, target = self.options.source, self.options.target
        for message in messages:
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error", extra={"source": source, "error": message.error().str()})
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            flow = self.flows.get((topic, partition))
            if flow is None:
                continue  # fetched before a revoke: no longer ours
            kind, timestamp_ms = message.timestamp()
            flow.note_read(topic, partition, offset, timestamp_ms, skips)
            headers = message.headers() or []
            path = provenance(headers)
            previous = self._pending.get((topic, partition))
            self._pending[(topic, partition)] = (
                offset + 1,
                timestamp_ms if timestamp_ms > 0 else (previous[1] if previous else 0),
            )
            if target in path or (self.fault is not None and self.fault.should_drop(topic, timestamp_ms)):
                self._count_not_copied(topic, dropped=target not in path)
                continue
            if not self._begin():
                return
            target_partitions = self._target_partitions.get(topic, 0)
            if not self._produce(
                self.naming.target_topic(source, topic),
                message.value(),
                message.key(),
                copy_headers(headers, path, source, kind, timestamp_ms),
                timestamp_ms,
                partition if partition < target_partitions else -1,
                None,
            ):
                self._abort()  # stopping with the target unreachable: nothing of this transaction counts
                return
            self._pending_copied[topic] += 1

    def _interval(self) -> float:
        return min(self.options.commit_interval_s, 1.0)

    def _begin(self) -> bool:
        """Open a transaction unless one is open. False when the producer was lost (stuck, or in a fatal state) and
        was replaced: the consumer is back at the committed positions, so the messages in hand are read again."""
        if self._in_transaction:
            return True
        try:
            self._bounded(self._producer.begin_transaction, "begin_transaction")
        except KafkaException as exc:
            if is_lost(exc.args[0]):
                self._replace_lost_producer(exc.args[0])
                return False
            if exc.args[0].fatal():
                raise self._unrecoverable(exc.args[0]) from exc
            raise
        self._in_transaction = True
        self._transaction_started = time.monotonic()
        return True

    def _replace_lost_producer(self, error: KafkaError) -> None:
        log.warning(
            "transactional producer lost (stuck or in a fatal state); a new one takes over and what the old one "
            "left open is aborted",
            extra={**self._log_extra(), "error": error.str(), "code": error.code()},
        )
        self._in_transaction = False  # the lost producer is not asked to abort: the new one's init does
        self._start_producer()
        self._abort()

    def _unrecoverable(self, error: KafkaError) -> KafkaClientError:
        """The error a fatal state no new producer cures stops the replicator with (`clients.FENCED_OR_REFUSED`)."""
        what = f"replicator {self.options.source} -> {self.options.target}"
        if error.code() in FENCED:
            return KafkaClientError(
                f"{what}: transactional id {self.transactional_id} was taken over by another instance "
                f"({error.str()}); give each instance its own --instance",
                code=error.code(),
            )
        return KafkaClientError(f"{what}: transactional id {self.transactional_id}: {error.str()}", code=error.code())

    def _commit_transaction(self) -> bool:
        """Write the pending positions and commit them with the copies; False when aborted."""
        if not self._pending:
            return True
        if not self._begin():
            return False
        group = self.options.group
        for (topic, partition), (position, _) in self._pending.items():
            value = json.dumps({"offset": position, "instance": self.instance_id}).encode()
            self._produce(OFFSETS_TOPIC, value, offset_key(group, topic, partition), None, 0, -1, None)
        producer, timeout_s = self._producer, self.options.client_timeout_s
        try:
            self._retry(
                "commit_transaction",
                lambda: self._bounded(lambda: producer.commit_transaction(timeout_s), "commit_transaction"),
            )
        except KafkaException as exc:
            if is_lost(exc.args[0]):
                self._replace_lost_producer(exc.args[0])
                return False
            if exc.args[0].fatal():
                raise self._unrecoverable(exc.args[0]) from exc
            self._abort()
            return False
        self._in_transaction = False
        self.transactions += 1
        with self._lock:
            for key, (position, timestamp_ms) in self._pending.items():
                self._stored[key] = position
                flow = self.flows.get(key)
                if flow is not None:
                    flow.acked = max(flow.acked, position)
                    flow.last_progress = time.monotonic()
                    if timestamp_ms > 0:
                        flow.last_audit_time_ms = timestamp_ms
        for topic, count in self._pending_copied.items():
            self.stats.copied += count
            self.stats.copied_by_topic[topic] += count
            COPIED.labels(self.options.source, self.options.target, topic).inc(count)
        self._pending.clear()
        self._pending_copied.clear()
        return True

    def _abort(self) -> None:
        """Abort the open transaction and put the consumer back where the target's positions are."""
        self.aborts += 1
        self.stats.errors += 1
        ERRORS.labels(*self._labels).inc()
        log.warning("transaction aborted; copying again from the committed positions", extra=self._log_extra())
        if self._in_transaction:
            producer, timeout_s = self._producer, self.options.client_timeout_s
            try:
                self._retry(
                    "abort_transaction",
                    lambda: self._bounded(lambda: producer.abort_transaction(timeout_s), "abort_transaction"),
                )
            except KafkaException as exc:
                if is_lost(exc.args[0]):
                    self._start_producer()  # its init aborts what the lost one left open
                elif exc.args[0].fatal():
                    raise self._unrecoverable(exc.args[0]) from exc
                elif not self._stop.is_set():
                    raise
        self._in_transaction = False
        self._pending.clear()
        self._pending_copied.clear()
        with self._lock:
            rewind = [
                TopicPartition(t, p, position) for (t, p), position in self._stored.items() if (t, p) in self.flows
            ]
            for tp in rewind:
                self.flows[(tp.topic, tp.partition)].next_offset = tp.offset
        for tp in rewind:
            try:
                self._consumer.seek(tp)
            except KafkaException as exc:
                log.warning("seek after abort failed", extra={**self._log_extra(), "error": exc.args[0].str()})

    def _log_extra(self) -> dict:
        return {"source": self.options.source, "target": self.options.target, "transactional_id": self.transactional_id}

    def _read_past_markers(self) -> None:
        # Only with nothing in an open transaction: the consumer's position is then the committed one.
        if not self._pending and not self._in_transaction:
            super()._read_past_markers()

    def _pass_deleted(self, ends: dict[tuple[str, int], int]) -> None:
        # Likewise: only a partition with nothing in an open transaction may move to its log start.
        if not self._pending and not self._in_transaction:
            super()._pass_deleted(ends)

    # -- the run loop's steps ------------------------------------------------------------------------

    def caught_up(self) -> bool:
        self._commit_transaction()
        return super().caught_up()

    def finish(self) -> None:
        self._commit_transaction()
        super().finish()
