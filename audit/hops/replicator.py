"""The replicator: MirrorMaker-style copy of topics, the audit topic included, between two clusters.

At least once, never lossy: the target producer runs with acks=all, idempotence and no delivery
timeout, and a source offset is committed only once the target acknowledged every message before
it. A crash can therefore only repeat messages, which the target's counter counts as duplicates.

Cycles are impossible whatever the naming policy: every copy carries a provenance header listing
the clusters the message has been in, and a message is never written to a cluster on that list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from audit.contract.naming import NamingPolicy
from audit.contract.record import (
    encode,
    new_instance_id,
    record_id,
    status_record,
)
from audit.contract.watermarks import topic_statuses, watermark_ms
from audit.hops.faults import DropFault, PauseFault
from audit.hops.mirror_state import (
    COPIED,
    DROPPED,
    ERRORS,
    LAG,
    LAST_COMMIT,
    RETENTION_SKIPPED,
    SERVICE,
    SKIPPED,
    STALLED,
    MirrorOptions,
    MirrorStats,
    PartitionFlow,
    copy_headers,
    lags_and_stall,
    provenance,
)
from audit.hops.mirror_topics import create_target_topics
from audit.hops.retention import RetentionGaps, Skip, seek_past_deleted
from audit.hops.runloop import run_hop
from audit.hops.upkeep import check_audit_retention, drop_series
from audit.io.clients import Admin, check_credentials, committed_offsets, ensure_topics, group_lag

__all__ = ["MirrorOptions", "MirrorStats", "Replicator", "provenance"]

log = logging.getLogger(__name__)


_PARTITIONS_LOGGED = 5  # a "catching up" line names at most this many partitions


def _flow_state(flow: PartitionFlow | None) -> str:
    """Where this instance stands on a partition, for a log line."""
    if flow is None:
        return "not-assigned-here"
    return f"committed={flow.committed},acked={flow.acked},next={flow.next_offset},in-flight={len(flow.sent)}"


class Replicator:
    """Copies the selected topics of a source cluster to a target cluster.

    Its state is bounded by the source as it is now, never by how long it has run: `flows` holds the partitions
    assigned now (removed on revoke), `_released` only partitions of the topics mirrored now, and what it keeps
    per topic (`_target_partitions`, the metric series, `stats.copied_by_topic`) leaves with the topic
    (`_forget_topics`, at each topic refresh)."""

    def __init__(
        self,
        source_config: Mapping[str, Any],
        target_config: Mapping[str, Any],
        options: MirrorOptions,
        naming: NamingPolicy,
        select_topic: Callable[[str], bool],
        *,
        fault: DropFault | None = None,
        pause: PauseFault | None = None,
    ) -> None:
        self.source_config = dict(source_config)
        self.target_config = dict(target_config)
        self.options = options
        self.naming = naming
        self.select_topic = select_topic
        self.fault = fault
        self.pause = pause
        self.stats = MirrorStats()
        self.flows: dict[tuple[str, int], PartitionFlow] = {}
        self.instance_id = new_instance_id(f"{SERVICE}-{options.source}-{options.target}")
        self._sequence = 0
        self._subscribed: list[str] = []
        self._consumer_config: dict[str, Any] = {}  # set by open(); asked again when committed offsets are held
        self._target_partitions: dict[str, int] = {}
        self._lock = threading.Lock()
        self._released: dict[tuple[str, int], int] = {}  # acknowledged position of partitions given up
        self._stop = threading.Event()
        self._labels = (options.source, options.target)
        self._copied_metrics: dict[str, Any] = {}  # prometheus_client children, one per topic
        self._next_commit = self._next_status = 0.0  # monotonic seconds; set by run()
        self._next_behind_log = 0.0
        self._quiet = False  # status records paused (only while finishing a run-until-caught-up)
        self.retention = RetentionGaps(
            lambda topic, partition, n: RETENTION_SKIPPED.labels(
                options.source, options.target, topic, str(partition)
            ).inc(n),
            source=options.source,
            target=options.target,
        )
        for hook in (fault, pause):
            if hook is not None:
                log.warning("FAULT HOOK ON: this replicator misbehaves on purpose", extra={"fault": hook.describe()})

    # -- clients -------------------------------------------------------------------------------

    def open(self) -> None:
        check_credentials(self.source_config, self.options.source, timeout_s=self.options.client_timeout_s)
        check_credentials(self.target_config, self.options.target, timeout_s=self.options.client_timeout_s)
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
        # Status records go to the source's audit topic, reachable whenever we are reading at all,
        # and from there they are replicated like every audit record.
        self._status_producer = Producer(
            {
                **self.source_config,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": int(self.options.client_timeout_s * 1000),
            }
        )
        self._source_admin = Admin(self.source_config)
        self._target_admin = AdminClient(self.target_config)
        ensure_topics(self.source_config, {self.options.audit_topic: 1}, timeout_s=self.options.client_timeout_s)
        self._check_audit_retention()

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

    def _is_replica_of_target(self, topic: str) -> bool:
        return self.naming.origin(self.options.source, topic).cluster == self.options.target

    def refresh_topics(self) -> None:
        metadata = self._consumer.list_topics(timeout=self.options.client_timeout_s).topics
        selected = {
            name
            for name in metadata
            if not name.startswith("__")
            and not self._is_replica_of_target(name)
            and (
                self.select_topic(name)
                or self.naming.origin(self.options.source, name).topic == self.options.audit_topic
            )
        }
        # A topic whose metadata has an error this time is still there: what is kept for it stays.
        self._forget_topics(selected)
        wanted = sorted(name for name in selected if metadata[name].error is None)
        missing = [name for name in wanted if name not in self._target_partitions]
        if missing:
            partitions = {name: len(metadata[name].partitions) for name in missing}
            target_names = {topic: self.naming.target_topic(self.options.source, topic) for topic in partitions}
            self._target_partitions.update(
                create_target_topics(
                    self._source_admin.client,
                    self._target_admin,
                    target_names,
                    partitions,
                    target=self.options.target,
                    timeout_s=self.options.client_timeout_s,
                )
            )
        # A topic whose target partitions are not known yet waits for the next refresh (see create_target_topics).
        wanted = [name for name in wanted if name in self._target_partitions]
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
        with self._lock:
            self._released = {key: acked for key, acked in self._released.items() if key[0] in present}
        known = {*self._target_partitions, *self._copied_metrics, *self.stats.copied_by_topic}
        for topic in known - present:
            self._target_partitions.pop(topic, None)
            self._copied_metrics.pop(topic, None)
            self.stats.copied_by_topic.pop(topic, None)
            for metric in (COPIED, DROPPED, RETENTION_SKIPPED):
                drop_series(metric, source=self.options.source, target=self.options.target, topic=topic)

    # -- rebalance -----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = committed_offsets(
            consumer, partitions, timeout_s=self.options.client_timeout_s, config=self._consumer_config
        )
        earliest = self._list_offsets(
            [(tp.topic, tp.partition) for tp in committed if tp.offset < 0], OffsetSpec.earliest()
        )
        starts = []
        with self._lock:
            for tp in committed:
                start = tp.offset if tp.offset >= 0 else earliest.get((tp.topic, tp.partition), 0)
                # A partition this process copied before the rebalance: resume after what the target
                # acknowledged, even when the commit in _on_revoke did not land (it can fail mid-rebalance).
                resume = max(start, self._released.pop((tp.topic, tp.partition), -1))
                self.flows[(tp.topic, tp.partition)] = PartitionFlow(committed=start, acked=resume, next_offset=resume)
                starts.append(TopicPartition(tp.topic, tp.partition, resume))
        self._log_assignment(starts)
        consumer.assign(starts)
        if self.pause is not None and self.pause.paused(time.monotonic()):
            consumer.pause(starts)  # else the poll that assigned them could copy from them during the pause

    def _log_assignment(self, starts: list[TopicPartition], **counts: int) -> None:
        log.info(
            "partitions assigned",
            extra={
                "source": self.options.source,
                "target": self.options.target,
                "partitions": len(starts),
                **counts,
                "first": " ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in starts[:_PARTITIONS_LOGGED]),
            },
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"source": self.options.source, "partitions": len(partitions)})
        # Deliver what is in flight, then commit it, so the next owner repeats as little as possible.
        # When stopping, run() has already waited for the target once: do not wait again.
        if not self._stop.is_set():
            self._producer.flush(self.options.client_timeout_s)
        self.commit()
        with self._lock:
            for tp in partitions:
                flow = self.flows.pop((tp.topic, tp.partition), None)
                if flow is not None and tp.topic in self._subscribed:  # a topic gone is not assigned again
                    self._released[(tp.topic, tp.partition)] = flow.acked

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
        flows = self.flows
        for message in messages:
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error", extra={"source": source, "error": message.error().str()})
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            flow = flows.get((topic, partition))
            if flow is not None:
                flow.note_read(topic, partition, offset, message.timestamp()[1], skips)
            headers = message.headers() or []
            path = provenance(headers)
            if target in path or (self.fault is not None and self.fault.should_drop(topic, message.timestamp()[1])):
                self._resolve_without_sending(
                    topic, partition, offset, message.timestamp()[1], dropped=target not in path
                )
                continue
            kind, timestamp_ms = message.timestamp()
            stamped = copy_headers(headers, path, source, kind, timestamp_ms)
            target_partitions = self._target_partitions.get(topic, 0)
            with self._lock:
                flow = self.flows.get((topic, partition))
                if flow is not None:
                    flow.sent.append(offset)
            if not self._produce(
                self.naming.target_topic(source, topic),
                message.value(),
                message.key(),
                stamped,
                timestamp_ms,
                partition if partition < target_partitions else -1,
                self._delivery_callback(topic, partition, offset, timestamp_ms),
            ):
                return  # stopping with the target unreachable: the rest is not sent, not committed

    def _produce(self, topic, value, key, headers, timestamp, partition, callback) -> bool:
        """Queue one message; False only when stopping and the queue stayed full for client_timeout_s."""
        give_up_at = None
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers,
                    partition=partition,
                    timestamp=timestamp if timestamp > 0 else 0,
                    on_delivery=callback,
                )
                return True
            except BufferError:
                # Target slower than source (or down): wait for acknowledgements, keep reporting.
                self._producer.poll(0.1)
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
            if err is not None:
                # With no delivery timeout only a fatal producer error gets here; the source offset is
                # never committed past it, so a restart sends it again.
                self.stats.errors += 1
                ERRORS.labels(*self._labels).inc()
                log.error(
                    "delivery failed",
                    extra={
                        "source": self.options.source,
                        "topic": topic,
                        "partition": partition,
                        "offset": offset,
                        "error": err.str(),
                    },
                )
                return
            self._acknowledge(topic, partition, offset, timestamp_ms)
            self.stats.copied += 1
            self.stats.copied_by_topic[topic] += 1
            copied_metric.inc()

        if topic not in self._copied_metrics:
            self._copied_metrics[topic] = COPIED.labels(self.options.source, self.options.target, topic)
        copied_metric = self._copied_metrics[topic]
        return delivered

    def _resolve_without_sending(
        self, topic: str, partition: int, offset: int, timestamp_ms: int, *, dropped: bool
    ) -> None:
        with self._lock:
            flow = self.flows.get((topic, partition))
            if flow is not None:
                flow.sent.append(offset)
        self._acknowledge(topic, partition, offset, timestamp_ms)
        self._count_not_copied(topic, dropped=dropped)

    def _count_not_copied(self, topic: str, *, dropped: bool) -> None:
        """One message dropped by the fault hook, or skipped because the target is on its path."""
        if dropped:
            self.stats.dropped += 1
            DROPPED.labels(self.options.source, self.options.target, topic).inc()
        else:
            self.stats.skipped += 1
            SKIPPED.labels(*self._labels).inc()

    def _acknowledge(self, topic: str, partition: int, offset: int, timestamp_ms: int) -> None:
        with self._lock:
            flow = self.flows.get((topic, partition))
            if flow is not None:
                flow.acknowledge(offset, timestamp_ms)

    def _read_past_markers(self) -> None:
        """Move the acknowledged position of every partition with nothing in flight over the offsets a
        read_committed reader never gets (commit and abort markers, aborted batches): the consumer has
        passed them, so they are neither lag nor something to copy."""
        with self._lock:
            idle = [
                TopicPartition(topic, partition) for (topic, partition), flow in self.flows.items() if not flow.sent
            ]
        if not idle:
            return
        positions = self._consumer.position(idle)
        skips = []
        with self._lock:
            for tp in positions:
                flow = self.flows.get((tp.topic, tp.partition))
                if flow is not None and not flow.sent and tp.offset > flow.acked:
                    flow.acked = tp.offset
                if flow is not None and not flow.sent and tp.offset > flow.next_offset >= 0:
                    # Its consumer may also have jumped to the log start after a deletion, with no message since.
                    skips.append(Skip(tp.topic, tp.partition, flow.next_offset, (tp.offset,), flow.last_audit_time_ms))
                    flow.next_offset = tp.offset
        if skips:
            self.retention.check(skips, lambda keys: self._list_offsets(keys, OffsetSpec.earliest()))
            self.stats.retention_skipped = self.retention.skipped

    def commit(self) -> None:
        """Commit, per source partition, the position before which the target acknowledged everything."""
        self._read_past_markers()
        with self._lock:
            offsets = [TopicPartition(t, p, f.acked) for (t, p), f in self.flows.items() if f.acked > f.committed]
        try:
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.stats.errors += 1
            ERRORS.labels(*self._labels).inc()
            log.warning(
                "offset commit failed; will retry", extra={"source": self.options.source, "error": exc.args[0].str()}
            )
            return
        with self._lock:
            for tp in offsets:
                flow = self.flows.get((tp.topic, tp.partition))
                if flow is not None:
                    flow.committed = max(flow.committed, tp.offset)
        LAST_COMMIT.labels(*self._labels).set_to_current_time()  # nothing left to commit counts as a commit

    # -- health --------------------------------------------------------------------------------

    def check_stall(self) -> dict[tuple[str, int], int]:
        """Lag per partition; a stall is lag > 0 with nothing acknowledged for stall_after_s."""
        self._read_past_markers()
        ends = self._list_offsets(list(self.flows), OffsetSpec.latest())
        self._pass_deleted(ends)
        now = time.monotonic()
        with self._lock:
            lags, stalled = lags_and_stall(self.flows, ends, now, self.options.stall_after_s)
        self.stats.lag = sum(lags.values())
        LAG.labels(*self._labels).set(self.stats.lag)
        if stalled and not self.stats.stalled:
            self.stats.stall_episodes += 1
            log.error(
                "replication stalled: lag with no progress",
                extra={
                    "source": self.options.source,
                    "target": self.options.target,
                    "lag": self.stats.lag,
                    "stall_after_s": self.options.stall_after_s,
                },
            )
        elif self.stats.stalled and not stalled:
            log.warning("replication recovered", extra={"source": self.options.source, "target": self.options.target})
        self.stats.stalled = stalled
        STALLED.labels(*self._labels).set(1 if stalled else 0)
        return lags

    def _pass_deleted(self, ends: dict[tuple[str, int], int]) -> None:
        """Idle partitions behind whose next offset retention deleted move to the log start (`seek_past_deleted`)."""
        with self._lock:
            behind = [key for key, flow in self.flows.items() if not flow.sent and ends.get(key, -1) > flow.acked]
        if not behind:
            return
        starts = self._list_offsets(behind, OffsetSpec.earliest())
        with self._lock:
            idle = {key: flow for key in behind if (flow := self.flows.get(key)) is not None and not flow.sent}
            positions = {key: (max(f.acked, f.next_offset), f.last_audit_time_ms) for key, f in idle.items()}
            skips = seek_past_deleted(self._consumer, positions, starts)
            for skip in skips:
                idle[(skip.topic, skip.partition)].acked = idle[(skip.topic, skip.partition)].next_offset = (
                    skip.offsets[0]
                )
        self.retention.check(skips, lambda _keys: starts)
        self.stats.retention_skipped = self.retention.skipped

    def emit_status(self, lags: dict[tuple[str, int], int]) -> None:
        """One status record per topic (tier = the target) into the source's audit topic."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            positions = {key: flow.acked for key, flow in self.flows.items()}
            audit_times = {key: flow.last_audit_time_ms for key, flow in self.flows.items()}
        ends = {key: positions[key] + lag for key, lag in lags.items() if key in positions}
        by_topic, withheld = topic_statuses(positions, ends, audit_times)
        if withheld:
            log.warning(
                "status withheld: end offsets unknown",
                extra={"source": self.options.source, "target": self.options.target, "topics": ",".join(withheld)},
            )
        for topic, partitions in by_topic.items():
            self._sequence += 1
            record = status_record(
                record_id=record_id(self.instance_id, self._sequence),
                tier=self.options.target,
                cluster=self.options.source,
                service=SERVICE,
                instance_id=self.instance_id,
                topic=topic,
                window_minutes=self.options.window_minutes,
                partitions=partitions,
                watermark_ms=watermark_ms(partitions, now_ms),
                stalled=self.stats.stalled,
                retention_gaps=self.retention.of_topic(topic),
                emitted_at_ms=now_ms,
            )
            self._status_producer.produce(self.options.audit_topic, key=topic.encode(), value=encode(record))
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
        """One `catching up` line: the lag of the group and this instance's offsets on the first partitions."""
        with self._lock:
            flows = {key: self.flows.get(key) for key in sorted(behind)[:_PARTITIONS_LOGGED]}
        log.info(
            "catching up",
            extra={
                "source": self.options.source,
                "target": self.options.target,
                "partitions_behind": len(behind),
                "lag": sum(behind.values()),
                "first": " ".join(f"{t}[{p}]:{behind[(t, p)]}:{_flow_state(flow)}" for (t, p), flow in flows.items()),
            },
        )

    def _finished(self) -> bool:
        """For run-until-caught-up: data topics first; then, with our own status records paused
        (each would move the audit topic's end again), the audit topic."""
        if not self._subscribed:
            return False
        audit = [
            t for t in self._subscribed if self.naming.origin(self.options.source, t).topic == self.options.audit_topic
        ]
        if not self._quiet:
            self._quiet = self.group_caught_up([t for t in self._subscribed if t not in audit])
            return False
        return self.group_caught_up(audit)

    def run(self, *, max_seconds: float | None = None, until_caught_up: bool = False) -> MirrorStats:
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
        self._producer.poll(0)
        self._maybe_housekeep()
        return not messages and len(self._producer) == 0

    def caught_up(self) -> bool:
        self.commit()
        return self._finished()

    def finish(self) -> None:
        self._producer.flush(self.options.client_timeout_s)
        self.commit()
        self.emit_status(self.check_stall())

    def close(self) -> None:
        # Whatever the target acknowledges from here on is not committed any more: a short last
        # flush only saves the next run some repeats, and a target that is down must not hold up exit.
        for closing in (
            lambda: self._consumer.close(),
            lambda: self._status_producer.flush(self.options.client_timeout_s),
            lambda: self._producer.flush(min(self.options.client_timeout_s, 1.0)),
        ):
            try:
                closing()
            except (AttributeError, KafkaException) as exc:  # never opened, or the cluster is gone
                log.warning("closing", extra={"source": self.options.source, "error": str(exc)})
