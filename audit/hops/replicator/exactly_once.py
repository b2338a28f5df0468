"""The replicator's exactly-once mode (`kaudit mirror --exactly-once`), after MirrorMaker 2's KIP-618.

The target producer is transactional (`audit.io.transactions`), with a transactional id stable across restarts
(`kaudit-mirror-<source>-<target>-<instance>`): a restarted instance fences its predecessor and aborts whatever
it left open. Each transaction holds the copied messages (the audit topic's included) and, in a small compacted
topic on the TARGET (`_kaudit_mirror_offsets`), the source position of every partition they cover, keyed by
(group, topic, partition). Copies and positions are committed together or not at all, so a `read_committed`
reader of the target sees every source message exactly once whatever crashes.

The copy loop is the replicator's; what differs is how a copy is committed (`_send`, `_not_sent`): into the open
transaction, which is committed once its interval has passed or nothing more was read.

On start and after every rebalance the positions are read back from the target (read_committed, up to the last
stable offset) and the source consumer is placed there; the source group's committed offsets are only a hint,
used for a partition the target holds no position for (a switch from at-least-once mode), and committed after
each transaction so that lag tools and `--until-caught-up` keep working. A flow's `acked` position is the
committed one: lag, stall and status records count only committed data.
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
from audit.contract.windows import MS_PER_MINUTE
from audit.hops.replicator.hop import Replicator, TargetMessage
from audit.hops.replicator.state import PartitionFlow
from audit.io.clients import ensure_topics
from audit.io.offsets import committed_offsets, read_ranges
from audit.io.transactions import TRANSACTION_TIMEOUT_MS, Transactions, producer_config

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "_kaudit_mirror_offsets"
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "1", "segment.ms": str(10 * MS_PER_MINUTE)}


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
        source, target = self.options.source, self.options.target
        self.transactional_id = transactional_id(source, target, self.options.group, instance)
        self.transactions = Transactions(
            lambda: self._new_producer(),
            transactional_id=self.transactional_id,
            call_timeout_s=self.options.client_timeout_s,
            owner=f"replicator {source} -> {target}",
            log_fields={"source": source, "target": target},
        )
        self._stored: dict[tuple[str, int], int] = {}  # position committed on the target
        self._pending: dict[tuple[str, int], tuple[int, int]] = {}  # (next offset, last time) in this transaction
        self._pending_copied: dict[str, int] = defaultdict(int)
        self._transaction_started = 0.0
        self.transactions_committed = 0
        self.aborts = 0

    # -- the target producer -------------------------------------------------------------------

    def _open_target(self) -> None:
        ensure_topics(
            self.target_config,
            {OFFSETS_TOPIC: 1},
            topic_configs={OFFSETS_TOPIC: OFFSETS_TOPIC_CONFIG},
            timeout_s=self.options.client_timeout_s,
        )
        self.transactions.start(self.options.client_timeout_s, address=str(self.target_config.get("bootstrap.servers")))
        log.info("exactly-once mode", extra={"target": self.options.target, "transactional_id": self.transactional_id})

    def _new_producer(self) -> Producer:
        return Producer(
            {
                **self.target_config,
                **producer_config(self.transactional_id),
                "message.timeout.ms": TRANSACTION_TIMEOUT_MS,  # a copy not delivered by then fails its transaction
                "linger.ms": self.options.linger_ms,
            }
        )

    @property
    def target_producer(self) -> Producer:
        return self.transactions.active

    def _queued(self) -> int:
        return self.transactions.queued()

    def _flush_target(self, timeout_s: float) -> None:
        self.transactions.flush(timeout_s)

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
        at = {key: stored.get(key, hint if hint >= 0 else earliest.get(key, 0)) for key, hint in hints.items()}
        self._stored.update(at)
        starts = self.positions.assign(
            at, committed={key: hint if hint >= 0 else at[key] for key, hint in hints.items()}
        )
        self.status.log_assignment(starts, from_target_positions=sum(key in stored for key in hints))
        consumer.assign(starts)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"source": self.options.source, "partitions": len(partitions)})
        # Commit what is copied before the next owner reads the positions back.
        self._commit_transaction()
        self.commit()
        self.positions.release(partitions)
        for tp in partitions:
            self._stored.pop((tp.topic, tp.partition), None)

    # -- how a copy is committed: in the open transaction, with its source position -------------

    def copy_batch(self, messages: list) -> None:
        super().copy_batch(messages)
        if self._pending and (not messages or time.monotonic() - self._transaction_started >= self._interval()):
            self._commit_transaction()

    def _not_sent(self, message, *, dropped: bool) -> None:
        self._note_pending(message)
        self.status.not_copied(message.topic(), dropped=dropped)

    def _send(self, flow: PartitionFlow, message, copy: TargetMessage) -> bool:
        self._note_pending(message)
        if not self._begin():
            return False
        if not self._produce(copy, None):
            self._abort()  # stopping with the target unreachable: nothing of this transaction counts
            return False
        self._pending_copied[message.topic()] += 1
        return True

    def _note_pending(self, message) -> None:
        """The source position after `message`, and the audit time before it, for the open transaction."""
        key, timestamp_ms = (message.topic(), message.partition()), message.timestamp()[1]
        if timestamp_ms <= 0:  # no usable time: the one before it stays
            previous = self._pending.get(key)
            timestamp_ms = previous[1] if previous else 0
        self._pending[key] = (message.offset() + 1, timestamp_ms)

    def _interval(self) -> float:
        return min(self.options.commit_interval_s, 1.0)

    def _begin(self) -> bool:
        """Open a transaction unless one is open. False when none could be (a lost producer not replaced yet):
        the consumer is back at the committed positions, so the messages in hand are read again."""
        if self.transactions.in_transaction:
            return True
        if not self.transactions.begin():
            self._abort()
            return False
        self._transaction_started = time.monotonic()
        return True

    def _commit_transaction(self) -> bool:
        """Write the pending positions and commit them with the copies; False when aborted."""
        if not self._pending:
            return True
        if not self._begin():
            return False
        for (topic, partition), (position, _) in self._pending.items():
            value = json.dumps({"offset": position, "instance": self.instance_id}).encode()
            self._produce(TargetMessage(OFFSETS_TOPIC, value, offset_key(self.options.group, topic, partition)), None)
        if not self.transactions.commit():
            self._abort()
            return False
        self.transactions_committed += 1
        self._stored.update({key: position for key, (position, _) in self._pending.items()})
        self.positions.advance(self._pending, time.monotonic())
        for topic, count in self._pending_copied.items():
            self.status.copied(topic, count)
        self._pending.clear()
        self._pending_copied.clear()
        return True

    def _abort(self) -> None:
        """Abort the open transaction and put the consumer back where the target's positions are."""
        self.aborts += 1
        self.status.error()
        log.warning(
            "transaction aborted; copying again from the committed positions",
            extra={
                "source": self.options.source,
                "target": self.options.target,
                "transactional_id": self.transactional_id,
            },
        )
        self.transactions.abort()
        self._pending.clear()
        self._pending_copied.clear()
        for tp in self.positions.rewind(self._stored):
            try:
                self._consumer.seek(tp)
            except KafkaException as exc:
                log.warning(
                    "seek after abort failed", extra={"source": self.options.source, "error": exc.args[0].str()}
                )

    def _read_past_markers(self) -> None:
        # Only with nothing in an open transaction: the consumer's position is then the committed one.
        if not self._pending and not self.transactions.in_transaction:
            super()._read_past_markers()

    def _pass_deleted(self, ends: dict[tuple[str, int], int]) -> None:
        # Likewise: only a partition with nothing in an open transaction may move to its log start.
        if not self._pending and not self.transactions.in_transaction:
            super()._pass_deleted(ends)

    # -- the run loop's steps ------------------------------------------------------------------------

    def caught_up(self) -> bool:
        self._commit_transaction()
        return super().caught_up()

    def finish(self) -> None:
        self._commit_transaction()
        super().finish()
