"""The replicator: MirrorMaker-style copy of topics, the audit topic included, between two clusters.

At least once, never lossy: the target producer runs with acks=all, idempotence and no delivery
timeout, and a source offset is committed only once the target acknowledged every message before
it. A crash can therefore only repeat messages, which the target's counter counts as duplicates.

Cycles are impossible whatever the naming policy: every copy carries a provenance header listing
the clusters the message has been in, and a message is never written to a cluster on that list.

How a copy is committed is a hook (`_send`, `_not_sent`, and the target producer's `target_producer`,
`_queued`, `_flush_target`): here each message is acknowledged by the target on its own and the source
offsets committed behind them; `exactly_once.ExactlyOnceReplicator` commits copies and source positions
in target transactions instead, through the same copy loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from audit.contract.naming import NamingPolicy, is_audit_topic
from audit.contract.record import encode, new_instance_id
from audit.hops.faults import DropFault, FlipFault, PauseFault
from audit.hops.replicator.positions import SourcePositions
from audit.hops.replicator.state import (
    LAST_COMMIT,
    RETENTION_SKIPPED,
    SERVICE,
    PartitionFlow,
    ReplicatorOptions,
    ReplicatorStats,
    copy_headers,
    provenance,
)
from audit.hops.replicator.status import PARTITIONS_LOGGED, ReplicatorStatus
from audit.hops.replicator.topics import ReplicatedTopics
from audit.hops.retention import RetentionGaps, Skip
from audit.hops.runloop import run_hop
from audit.hops.upkeep import check_audit_retention
from audit.io.clients import Admin, check_credentials, ensure_topics
from audit.io.offsets import committed_offsets, group_lag

log = logging.getLogger(__name__)


class TargetMessage(NamedTuple):
    """One message for the target producer."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: list | None = None
    timestamp_ms: int = 0
    partition: int = -1  # -1: the target's partitioner chooses


class Replicator:
    """Copies the selected topics of a source cluster to a target cluster.

    Its state is bounded by the source as it is now, never by how long it has run: `flows` holds the partitions
    assigned now (removed on revoke), `positions.released` only partitions of the topics mirrored now, and what it
    keeps per topic (`topics.target_partitions`, the metric series, `stats.copied_by_topic`) leaves with the topic
    (`_forget_topics`, at each topic refresh)."""

    def __init__(
        self,
        source_config: Mapping[str, Any],
        target_config: Mapping[str, Any],
        options: ReplicatorOptions,
        naming: NamingPolicy,
        select_topic: Callable[[str], bool],
        *,
        fault: DropFault | FlipFault | None = None,
        pause: PauseFault | None = None,
    ) -> None:
        self.source_config = dict(source_config)
        self.target_config = dict(target_config)
        self.options = options
        self.naming = naming
        self.select_topic = select_topic
        self.fault = fault
        self.pause = pause
        self.stats = ReplicatorStats()
        self.positions = SourcePositions()
        self.instance_id = new_instance_id(f"{SERVICE}-{options.source}-{options.target}")
        self.status = ReplicatorStatus(options, self.stats, self.instance_id)
        self.topics = ReplicatedTopics(options, naming, select_topic)
        self._subscribed: list[str] = []
        self._consumer_config: dict[str, Any] = {}  # set by open(); asked again when committed offsets are held
        self._stop = threading.Event()
        self._labels = (options.source, options.target)
        self._next_commit = self._next_status = 0.0  # monotonic seconds; set by run()
        self._next_behind_log = 0.0
        self._quiet = False  # status records paused (only while finishing a run-until-caught-up)
        self.retention = RetentionGaps(
            lambda topic, partition, n: RETENTION_SKIPPED.labels(
                options.source, options.target, topic, str(partition)
            ).inc(n),
            keep_ms=options.audit_retention_ms,
            source=options.source,
            target=options.target,
        )
        for hook in (fault, pause):
            if hook is not None:
                log.warning("FAULT HOOK ON: this replicator misbehaves on purpose", extra={"fault": hook.describe()})

    @property
    def flows(self) -> dict[tuple[str, int], PartitionFlow]:
        """The partitions assigned now (`positions`)."""
        return self.positions.flows

    # -- clients -------------------------------------------------------------------------------

    def open(self) -> None:
        timeout_s = self.options.client_timeout_s
        check_credentials(self.source_config, self.options.source, timeout_s=timeout_s)
        check_credentials(self.target_config, self.options.target, timeout_s=timeout_s)
        self._consumer_config = {
            **self.source_config,
            "group.id": self.options.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # Aborted audit records of the counters must not be copied.
            "isolation.level": "read_committed",
            "client.id": f"{SERVICE}-{self.options.source}-{self.options.target}",
            # Dynamic membership on purpose: a static member restarted with another topic list is
            # handed its predecessor's stale assignment by the broker and copies nothing new.
            "session.timeout.ms": self.options.session_timeout_ms,
        }
        self._consumer = Consumer(self._consumer_config)
        # Status records go to the source's audit topic, reachable whenever we are reading at all,
        # and from there they are replicated like every audit record.
        self._status_producer = Producer(
            {
                **self.source_config,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": int(timeout_s * 1000),
            }
        )
        self._source_admin = Admin(self.source_config)
        self._target_admin = AdminClient(self.target_config)
        ensure_topics(self.source_config, {self.options.audit_topic: 1}, timeout_s=timeout_s)
        self._check_audit_retention()
        self._open_target()

    def _open_target(self) -> None:
        self._producer = Producer(
            {
                **self.target_config,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": self.options.linger_ms,
                # Never give up on a message: while the target is down the queue fills and we wait.
                "message.timeout.ms": 0,
            }
        )

    @property
    def target_producer(self) -> Producer:
        return self._producer

    def _queued(self) -> int:
        """Messages handed to the target and not acknowledged yet, once the acknowledgements in are served."""
        self._producer.poll(0)
        return len(self._producer)

    def _flush_target(self, timeout_s: float) -> None:
        self._producer.flush(timeout_s)

    def _check_audit_retention(self) -> None:
        """The audit topic it reads (on the source) and its copy (on the target, once created) must keep their
        records as long as the books need: a warning and a gauge when not (`upkeep.check_audit_retention`)."""
        source, audit_topic = self.options.source, self.options.audit_topic
        copy = self.naming.target_topic(source, audit_topic)
        for admin, config, cluster, topic in (
            (self._source_admin.client, self.source_config, source, audit_topic),
            (self._target_admin, self.target_config, self.options.target, copy),
        ):
            check_audit_retention(
                admin,
                config,
                service=SERVICE,
                cluster=cluster,
                topic=topic,
                needed_ms=self.options.audit_retention_ms,
                timeout_s=self.options.client_timeout_s,
            )

    def stop(self) -> None:
        self._stop.set()

    # -- topics --------------------------------------------------------------------------------

    def refresh_topics(self) -> None:
        metadata = self._consumer.list_topics(timeout=self.options.client_timeout_s).topics
        selected = self.topics.selected(metadata)
        # A topic whose metadata has an error this time is still there: what is kept for it stays.
        self._forget_topics(selected)
        wanted = self.topics.readable(metadata, selected, self._source_admin.client, self._target_admin)
        if wanted != self._subscribed:
            log.info(
                "mirroring topics",
                extra={"source": self.options.source, "target": self.options.target, "topics": len(wanted)},
            )
            self._consumer.subscribe(wanted, on_assign=self._on_assign, on_revoke=self._on_revoke)
            self._subscribed = wanted

    def _forget_topics(self, present: set[str]) -> None:
        """Forget what is kept per topic of every topic not in `present` (deleted, or no longer selected): its
        target's partition count (asked again should it come back), its metric series and copy count, and the
        acknowledged positions of its partitions given up. A year of topics created and deleted leaves nothing."""
        self.positions.forget_topics(present)
        gone = {*self.topics.target_partitions, *self.status.copied_metrics, *self.stats.copied_by_topic} - present
        for topic in gone:
            self.topics.target_partitions.pop(topic, None)
        self.status.forget_topics(gone)

    # -- rebalance -----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = committed_offsets(
            consumer, partitions, timeout_s=self.options.client_timeout_s, config=self._consumer_config
        )
        earliest = self._list_offsets(
            [(tp.topic, tp.partition) for tp in committed if tp.offset < 0], OffsetSpec.earliest()
        )
        at = {
            (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else earliest.get((tp.topic, tp.partition), 0)
            for tp in committed
        }
        starts = self.positions.assign(self.positions.resumed(at), committed=at)
        self.status.log_assignment(starts)
        consumer.assign(starts)
        if self.pause is not None and self.pause.paused(time.monotonic()):
            consumer.pause(starts)  # else the poll that assigned them could copy from them during the pause

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"source": self.options.source, "partitions": len(partitions)})
        # Deliver what is in flight, then commit it, so the next owner repeats as little as possible.
        # When stopping, run() has already waited for the target once: do not wait again.
        if not self._stop.is_set():
            self._flush_target(self.options.client_timeout_s)
        self.commit()
        self.positions.release(partitions, remember=self._subscribed)

    def _list_offsets(self, partitions: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        return self._source_admin.list_offsets(partitions, spec, timeout_s=self.options.client_timeout_s)

    # -- copying -------------------------------------------------------------------------------

    def copy_batch(self, messages: list) -> None:
        skips: list[Skip] = []
        try:
            self._copy(messages, skips)
        finally:  # offsets skipped on the way (markers, or a retention gap): one log start request a batch
            self.retention.close_open(messages)
            if skips:
                self.retention.check(skips, lambda keys: self._list_offsets(keys, OffsetSpec.earliest()))
                self.stats.retention_skipped = self.retention.skipped

    def _copy(self, messages: list, skips: list[Skip]) -> None:
        source, target = self.options.source, self.options.target
        for message in messages:
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error", extra={"source": source, "error": message.error().str()})
                continue
            topic, partition = message.topic(), message.partition()
            flow = self.flows.get((topic, partition))
            if flow is None:
                continue  # fetched before a revoke: its next owner copies it
            kind, timestamp_ms = message.timestamp()
            flow.note_read(topic, partition, message.offset(), timestamp_ms, skips)
            headers = message.headers() or []
            path = provenance(headers)
            if target in path or (self.fault is not None and self.fault.should_drop(topic, timestamp_ms)):
                self._not_sent(message, dropped=target not in path)
                continue
            value = (
                message.value()
                if self.fault is None
                else self.fault.changed_value(topic, partition, timestamp_ms, message.value())
            )
            copy = TargetMessage(
                self.naming.target_topic(source, topic),
                value,
                message.key(),
                copy_headers(headers, path, source, kind, timestamp_ms),
                timestamp_ms,
                self.topics.target_partition(topic, partition),
            )
            if not self._send(flow, message, copy):
                return  # stopping with the target unreachable: the rest is not sent, not committed

    def _not_sent(self, message, *, dropped: bool) -> None:
        """A message not copied (the target is on its path, or the fault hook dropped it): done at once."""
        key = (message.topic(), message.partition())
        self.positions.acknowledge(key, message.offset(), message.timestamp()[1], sent=False)
        self.status.not_copied(message.topic(), dropped=dropped)

    def _send(self, flow: PartitionFlow, message, copy: TargetMessage) -> bool:
        """Hand `copy` of `message` to the target; its source offset is committable once the target acknowledged
        it and every offset before it. False only when stopping with the target's queue full."""
        self.positions.sent(flow, message.offset())
        delivered = self._delivery_callback(message.topic(), message.partition(), message.offset(), copy.timestamp_ms)
        return self._produce(copy, delivered)

    def _produce(self, copy: TargetMessage, callback: Callable[[KafkaError | None, Any], None] | None) -> bool:
        """Queue one message; False only when stopping and the queue stayed full for client_timeout_s."""
        give_up_at = None
        while True:
            producer = self.target_producer
            try:
                producer.produce(
                    copy.topic,
                    value=copy.value,
                    key=copy.key,
                    headers=copy.headers,
                    partition=copy.partition,
                    timestamp=max(copy.timestamp_ms, 0),
                    on_delivery=callback,
                )
                return True
            except BufferError:
                # Target slower than source (or down): wait for acknowledgements, keep reporting.
                producer.poll(0.1)
                self._maybe_housekeep()
                if self._stop.is_set():
                    # Finish the batch if the target takes it within the timeout; else leave the rest
                    # unsent and uncommitted, for the next run to copy.
                    give_up_at = give_up_at or time.monotonic() + self.options.client_timeout_s
                    if time.monotonic() >= give_up_at:
                        log.warning("stopping with the target queue full", extra={"target": self.options.target})
                        return False

    def _delivery_callback(self, topic: str, partition: int, offset: int, timestamp_ms: int):
        def delivered(err: KafkaError | None, _msg) -> None:
            if err is None:
                self.positions.acknowledge((topic, partition), offset, timestamp_ms)
                self.status.copied(topic)
                return
            # With no delivery timeout only a fatal producer error gets here; the source offset is never
            # committed past it, so a restart sends it again.
            self.status.error()
            where = {"source": self.options.source, "topic": topic, "partition": partition, "offset": offset}
            log.error("delivery failed", extra={**where, "error": err.str()})

        return delivered

    def _read_past_markers(self) -> None:
        """Move the acknowledged position of every partition with nothing in flight over the offsets a
        read_committed reader never gets (`SourcePositions.read_past`)."""
        idle = self.positions.idle()
        if not idle:
            return
        skips = self.positions.read_past(self._consumer.position(idle))
        if skips:
            self.retention.check(skips, lambda keys: self._list_offsets(keys, OffsetSpec.earliest()))
            self.stats.retention_skipped = self.retention.skipped

    def commit(self) -> None:
        """Commit, per source partition, the position before which the target acknowledged everything."""
        self._read_past_markers()
        offsets = self.positions.committable()
        try:
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.status.error()
            log.warning(
                "offset commit failed; will retry", extra={"source": self.options.source, "error": exc.args[0].str()}
            )
            return
        self.positions.mark_committed(offsets)
        LAST_COMMIT.labels(*self._labels).set_to_current_time()  # nothing left to commit counts as a commit

    # -- health --------------------------------------------------------------------------------

    def check_stall(self) -> dict[tuple[str, int], int]:
        """Lag per partition; a stall is lag > 0 with nothing acknowledged for stall_after_s."""
        self._read_past_markers()
        ends = self._list_offsets(list(self.flows), OffsetSpec.latest())
        self._pass_deleted(ends)
        lags, stalled = self.positions.lags(ends, time.monotonic(), self.options.stall_after_s)
        self.status.judge(lags, stalled)
        return lags

    def _pass_deleted(self, ends: dict[tuple[str, int], int]) -> None:
        """Idle partitions behind whose next offset retention deleted move to the log start (`seek_past_deleted`)."""
        behind = self.positions.idle_behind(ends)
        if not behind:
            return
        starts = self._list_offsets(behind, OffsetSpec.earliest())
        skips = self.positions.pass_deleted(self._consumer, behind, starts)
        self.retention.check(skips, lambda _keys: starts)
        self.stats.retention_skipped = self.retention.skipped

    def emit_status(self, lags: dict[tuple[str, int], int]) -> None:
        """One status record per topic (tier = the target) into the source's audit topic."""
        positions, audit_times = self.positions.snapshot()
        for record in self.status.records(positions, audit_times, lags, self.retention.of_topic):
            self._status_producer.produce(self.options.audit_topic, key=record.topic.encode(), value=encode(record))
        self._status_producer.poll(0)

    # -- the loop ------------------------------------------------------------------------------

    def _maybe_housekeep(self) -> None:
        now = time.monotonic()
        if now >= self._next_commit:
            self.commit()
            self._next_commit = now + self.options.commit_interval_s
        if now >= self._next_status and not self._quiet:
            self.emit_status(self.check_stall())
            self._next_status = now + self.options.status_interval_s

    def group_caught_up(self, topics: list[str]) -> bool:
        """Every partition of `topics` acknowledged and committed up to its end, by the group. While not,
        says once per status interval which partitions are behind and where this instance stands on them."""
        behind = group_lag(self._consumer, self._source_admin, topics, timeout_s=self.options.client_timeout_s)
        if behind and time.monotonic() >= self._next_behind_log:
            self._next_behind_log = time.monotonic() + self.options.status_interval_s
            self._log_behind(behind)
        return behind == {}

    def _log_behind(self, behind: dict[tuple[str, int], int]) -> None:
        keys = sorted(behind)[:PARTITIONS_LOGGED]
        self.status.log_behind(behind, self.positions.of(keys, getattr(self, "_consumer", None)))  # none before open()

    def _finished(self) -> bool:
        """For run-until-caught-up: data topics first; then, with our own status records paused
        (each would move the audit topic's end again), the audit topic."""
        if not self._subscribed:
            return False
        audit = [
            t for t in self._subscribed if is_audit_topic(self.naming, self.options.source, t, self.options.audit_topic)
        ]
        if not self._quiet:
            self._quiet = self.group_caught_up([t for t in self._subscribed if t not in audit])
            return False
        return self.group_caught_up(audit)

    def run(self, *, max_seconds: float | None = None, until_caught_up: bool = False) -> ReplicatorStats:
        """Copy until stopped (SIGTERM, `stop()`), `max_seconds`, or, with `until_caught_up`, nothing left."""
        started = time.monotonic()
        self._next_commit = started + self.options.commit_interval_s
        self._next_status = started
        run_hop(self, self._stop, max_seconds=max_seconds, until_caught_up=until_caught_up)
        return self.stats

    # -- the run loop's steps (audit.hops.runloop.Hop) --------------------------------------------

    @property
    def topic_refresh_s(self) -> float:
        return self.options.topic_refresh_s

    def step(self) -> bool:
        """Copy one batch, commit and report when due; idle when nothing was read and nothing is in flight."""
        if self.pause is not None and self.pause.paused(time.monotonic()):
            self._consumer.pause(self._consumer.assignment())
            # Polling paused partitions returns nothing but keeps us in the group; status goes on.
            self.copy_batch(self._consumer.consume(self.options.batch_size, timeout=0.5))
            self._maybe_housekeep()
            return False
        if self.pause is not None:
            self._consumer.resume(self._consumer.assignment())
        messages = self._consumer.consume(self.options.batch_size, timeout=0.5) if self._subscribed else []
        self.copy_batch(messages)
        queued = self._queued()  # the acknowledgements in are served before the commit
        self._maybe_housekeep()
        return not messages and queued == 0

    def caught_up(self) -> bool:
        self.commit()
        return self._finished()

    def finish(self) -> None:
        self._flush_target(self.options.client_timeout_s)
        self.commit()
        self.emit_status(self.check_stall())

    def close(self) -> None:
        # Whatever the target acknowledges from here on is not committed any more: a short last
        # flush only saves the next run some repeats, and a target that is down must not hold up exit.
        for closing in (
            lambda: self._consumer.close(),
            lambda: self._status_producer.flush(self.options.client_timeout_s),
            lambda: self._flush_target(min(self.options.client_timeout_s, 1.0)),
        ):
            try:
                closing()
            except (AttributeError, KafkaException) as exc:  # never opened, or the cluster is gone
                log.warning("closing", extra={"source": self.options.source, "error": str(exc)})
