"""The audit counter of one cluster: reads every message of the selected topics, counts it once.

Exactly once, across crashes: every flush writes the count deltas, a status record per topic and
the consumer offsets in ONE Kafka transaction. A crash before the commit loses the uncommitted
deltas and offsets together, so the restarted counter recounts exactly what was not yet counted.
The transactional id is stable per instance slot (`--instance`), so a restarted slot fences its
predecessor's open transaction at once instead of waiting for it to time out.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from audit.contract.errors import KafkaClientError
from audit.contract.record import Kind, count_record, encode, new_instance_id, record_id, status_record
from audit.contract.tally import Tally
from audit.contract.watermarks import topic_statuses, watermark_ms
from audit.hops import fastcount
from audit.hops.counter_state import (
    ABORTS,
    FLUSHES,
    LAG,
    LAST_FLUSH,
    MESSAGES,
    RETENTION_SKIPPED,
    SERVICE,
    SESSION_TIMEOUT_MS,
    TRANSACTION_TIMEOUT_MS,
    CounterOptions,
    CounterStats,
    PartitionProgress,
)
from audit.hops.retention import RetentionGaps, Skip, seek_past_deleted, skips_in_batch
from audit.hops.runloop import run_hop
from audit.hops.upkeep import check_audit_retention, drop_series
from audit.io.clients import (
    FENCED,
    LATE_ANSWER_S,
    Admin,
    bounded,
    check_credentials,
    committed_offsets,
    ensure_topics,
    group_caught_up,
    is_stuck,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClusterCounter:
    """One counter instance; several with the same group id share a cluster's partitions.

    Its state is bounded by the cluster as it is now, never by how long it has run: `tally` holds only the deltas
    since the last commit (drained by every flush and every rewind), `progress` and `stats.lag` one entry per
    partition assigned now (`_forget` on revoke and loss), and the metric series of a topic leave with it
    (`refresh_topics`)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        options: CounterOptions,
        select_topic: Callable[[str], bool],
        *,
        host: str | None = None,
    ) -> None:
        self.config = dict(config)
        self.options = options
        self.select_topic = select_topic
        self.host = host or socket.gethostname()
        self.instance_id = new_instance_id(f"{SERVICE}-{options.cluster}")
        self.tally = Tally(options.window_minutes)
        self.progress: dict[tuple[str, int], PartitionProgress] = {}
        self.stats = CounterStats()
        self._sequence = 0
        self._subscribed: list[str] = []
        self._stop = threading.Event()
        self._until_caught_up = False  # set by run(): a batch that reads nothing flushes at once
        self._consumer_config: dict[str, Any] = {}  # set by open(); asked again when committed offsets are held
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._admin: Admin | None = None
        self._producer_broken = False  # a fatal error: renewed before the next transaction
        self._initializing = False  # the renewed producer's init has not finished: retried on the same one
        # Producers dropped in the middle of a call (stuck, or an init not finished): a late answer of
        # theirs may still fence the current producer, once each; see `_abort`.
        self._left_behind = 0
        self._failing_since: float | None = None  # the first abort or postponed flush since the last commit (monotonic)
        self.native = True  # count with the native loop when it is built (tests turn it off to compare)
        self.retention = RetentionGaps(
            lambda topic, partition, n: RETENTION_SKIPPED.labels(options.cluster, topic, str(partition)).inc(n),
            cluster=options.cluster,
        )
        # Partitions of the last batch whose offsets moved by more than the messages counted:
        # (topic, partition) -> (position before the batch, audit time of the message before it).
        self._skipped: dict[tuple[str, int], tuple[int, int | None]] = {}

    # -- clients -------------------------------------------------------------------------------

    @property
    def consumer(self) -> Consumer:
        return _opened(self._consumer)

    @property
    def producer(self) -> Producer:
        return _opened(self._producer)

    @property
    def admin(self) -> Admin:
        return _opened(self._admin)

    def open(self) -> None:
        check_credentials(self.config, self.options.cluster, timeout_s=self.options.client_timeout_s)
        self._consumer_config = {
            **self.config,
            "group.id": self.options.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "client.id": f"{SERVICE}-{self.options.cluster}-{self.options.instance}",
            # Dynamic membership on purpose: a static member (group.instance.id) was fenced by its own
            # rejoin after a broker restart (a fatal error that hung the counter in the soak), and is
            # handed its predecessor's assignment even when its topic list changed. A dead member's
            # partitions move after the session timeout; the transactional id still fences zombies.
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
        self._consumer = Consumer(self._consumer_config)
        self._admin = Admin(self.config)
        self._producer = self._new_producer()
        try:
            # Fences an earlier incarnation of this slot and aborts its open transaction.
            self.producer.init_transactions(self.options.client_timeout_s)
            # Without its audit topic every transaction would wait for a topic that never comes.
            ensure_topics(self.config, {self.options.audit_topic: 1}, timeout_s=self.options.client_timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            raise KafkaClientError(
                f"counter {self.options.cluster}: no transaction coordinator at {self.config.get('bootstrap.servers')} "
                f"after {self.options.client_timeout_s:.0f} s ({error.str()}); is the cluster up and the address right?",
                code=error.code(),
            ) from exc
        check_audit_retention(
            self.admin.client,
            self.config,
            service=SERVICE,
            cluster=self.options.cluster,
            topic=self.options.audit_topic,
            needed_ms=self.options.audit_retention_ms,
            timeout_s=self.options.client_timeout_s,
        )

    def _new_producer(self) -> Producer:
        return Producer(
            {
                **self.config,
                "transactional.id": self.options.transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
            }
        )

    def _renew_producer(self) -> bool:
        """After a fatal producer error (a transaction left in a state the restarted coordinator refuses,
        say), a new producer with the same transactional id takes over: its init fences the old one and
        aborts whatever it left open. False while the coordinator does not answer yet: try next flush."""
        if not self._producer_broken:
            return True
        producer = self._producer
        if producer is None or not self._initializing:
            if producer is not None:
                producer.purge()
            self._producer = producer = self._new_producer()
            self._initializing = True
        # An init that timed out is resumed on the same producer ("retry call to resume"): a second
        # producer's init would race the first one's, and whichever the coordinator answers last fences
        # the other (seen after a broker restart: the counter took itself for another instance).
        timeout_s = self.options.transaction_call_timeout_s
        try:
            self._bounded(lambda: producer.init_transactions(timeout_s), "init_transactions")
        except KafkaException as exc:
            if is_stuck(exc.args[0]) or exc.args[0].fatal():
                self._leave_behind()
            log.warning(
                "transactional producer not ready yet",
                extra={"cluster": self.options.cluster, "error": exc.args[0].str()},
            )
            return False
        self._initializing = self._producer_broken = False
        log.info("transactional producer renewed", extra={"cluster": self.options.cluster})
        return True

    def _leave_behind(self) -> None:
        """Drop the producer without waiting on it: it is stuck inside librdkafka (destroying it would wait
        too) or its init did not finish. The next one's init fences it."""
        self._producer, self._initializing = None, False
        self._left_behind += 1

    def stop(self) -> None:
        """Ask the run loop to flush and return (safe from a signal handler or another thread)."""
        self._stop.set()

    # -- subscription --------------------------------------------------------------------------

    def refresh_topics(self) -> None:
        topics = self.consumer.list_topics(timeout=self.options.client_timeout_s).topics
        wanted = sorted(
            name
            for name in topics
            if name != self.options.audit_topic and not name.startswith("__") and self.select_topic(name)
        )
        if wanted != self._subscribed:
            log.info("subscribing", extra={"cluster": self.options.cluster, "topics": len(wanted)})
            if wanted:
                self.consumer.subscribe(
                    wanted, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
                )
            else:
                self.consumer.unsubscribe()
            self._forget_topics(set(self._subscribed) - set(wanted))
            self._subscribed = wanted

    def _forget_topics(self, gone: set[str]) -> None:
        """Drop the metric series of topics no longer counted (deleted, or no longer selected): a year of
        topics created and deleted must not leave a series each. Their partitions left with the rebalance."""
        for topic in gone:
            drop_series(MESSAGES, cluster=self.options.cluster, topic=topic)
            drop_series(RETENTION_SKIPPED, cluster=self.options.cluster, topic=topic)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = committed_offsets(
            consumer, partitions, timeout_s=self.options.client_timeout_s, config=self._consumer_config
        )
        never_committed = [(tp.topic, tp.partition) for tp in committed if tp.offset < 0]
        earliest = self._list_offsets(never_committed, OffsetSpec.earliest())
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else earliest.get((tp.topic, tp.partition), 0)
            self.progress[(tp.topic, tp.partition)] = PartitionProgress(position=offset, committed=offset)
        log.info("partitions assigned", extra={"cluster": self.options.cluster, "partitions": len(partitions)})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Counts and offsets of what we are losing must land before the next owner starts from them.
        self.flush(heartbeat=False)
        self._forget(partitions)
        log.info("partitions revoked", extra={"cluster": self.options.cluster, "partitions": len(partitions)})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group dropped us (a broker away past the session timeout): our offsets can no longer be
        committed, so nothing is flushed; everything since the last commit is recounted by whoever
        owns each partition next, this instance included once it rejoins."""
        log.warning("partitions lost; recounting from the last commit", extra={"cluster": self.options.cluster})
        self._forget(partitions)  # first: a lost partition cannot be seeked, and its next owner reads its commit
        self._rewind()
        # The coordinators were away as long: a transaction of the old producer can still hold its own
        # (the soak's hub restart: the first send_offsets after the rejoin hung 10 s, then a renewal).
        # Renewed at the next flush, while the group rejoins, its init fences and settles that transaction.
        self._producer_broken = True

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.progress.pop((tp.topic, tp.partition), None)
            if self.stats.lag.pop((tp.topic, tp.partition), None) is not None:
                LAG.remove(self.options.cluster, tp.topic, str(tp.partition))
        # Counted up to this revoke, which came after the topic left the subscription.
        self._forget_topics({tp.topic for tp in partitions} - set(self._subscribed))

    # -- counting ------------------------------------------------------------------------------

    def count_batch(self, messages: list, *, now_ms: int | None = None) -> int:
        """Bucket a consumed batch by (topic, partition, window) and add it to the tally.

        This loop is the counter's hot path. The native loop (`audit.hops.fastcount`, C) buckets every
        plain message (no error, a usable CreateTime) without a Python call; what it hands back, and the
        whole batch when it is not built, goes through `fastcount.count_in_python`, which gives the same groups.
        Partition positions move once per batch.
        """
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        window_ms = self.options.window_minutes * 60_000
        groups = fastcount.bucket(messages, now_ms, window_ms, native=self.native, on_error=self._on_message_error)
        return self._add_groups(groups)

    def _add_groups(self, groups: dict[tuple[str, int, int], list]) -> int:
        counted = 0
        by_topic: dict[str, int] = {}
        batch: dict[tuple[str, int], list] = {}  # partition -> [position before, counted, last offset, time before]
        for (topic, partition, start), (count, size, no_ts, latencies, offset, when) in groups.items():
            self.tally.add_many(
                topic,
                start,
                count,
                size,
                partition=partition if self.options.by_partition else None,
                no_timestamp=no_ts,
                latencies_ms=latencies,
            )
            by_topic[topic] = by_topic.get(topic, 0) + count
            progress = self.progress.get((topic, partition))
            if progress is not None:
                seen = batch.get((topic, partition))
                if seen is None:
                    seen = batch[(topic, partition)] = [progress.position, 0, -1, progress.last_audit_time_ms]
                seen[1] += count
                seen[2] = max(seen[2], offset)
                if offset + 1 > progress.position:
                    progress.position = offset + 1
                    progress.last_audit_time_ms = when
            counted += count
        for topic, count in by_topic.items():
            MESSAGES.labels(self.options.cluster, topic).inc(count)
        self.stats.counted += counted
        # Offsets passed but not counted (markers, aborted batches, or a retention gap): checked by
        # `check_retention` once the batch is in, never message by message.
        for key, (before, n, last, when_before) in batch.items():
            if last + 1 - before - n > 0:
                self._skipped[key] = (before, when_before)
        return counted

    def check_retention(self, messages: list) -> int:
        """Judge the last batch's skipped offsets against the log start offsets (one admin request):
        offsets deleted before they were read are a retention gap, reported in the status records."""
        self.retention.close_open(messages)
        if not self._skipped:
            return 0
        skipped, self._skipped = self._skipped, {}
        return self._check_skips(skips_in_batch(skipped, messages))

    def _check_skips(self, skips: list[Skip]) -> int:
        found = self.retention.check(skips, lambda keys: self._list_offsets(keys, OffsetSpec.earliest()))
        self.stats.retention_skipped = self.retention.skipped
        return found

    def _on_message_error(self, message) -> None:
        error = message.error()
        if error.code() == KafkaError._PARTITION_EOF:
            return
        # Topic deleted or not yet known to this broker: the next refresh settles the subscription.
        log.warning(
            "consume error", extra={"cluster": self.options.cluster, "topic": message.topic(), "error": error.str()}
        )
        if error.fatal():
            raise KafkaClientError(
                f"counter {self.options.cluster}: fatal consumer error: {error.str()}", code=error.code()
            )

    # -- flushing ------------------------------------------------------------------------------

    def _next_record_id(self) -> str:
        self._sequence += 1
        return record_id(self.instance_id, self._sequence)

    def _identity(self) -> dict[str, Any]:
        """The fields every record of this instance carries, with a fresh record id."""
        return {
            "record_id": self._next_record_id(),
            "tier": self.options.cluster,
            "cluster": self.options.cluster,
            "service": SERVICE,
            "host": self.host,
            "instance_id": self.instance_id,
            "window_minutes": self.options.window_minutes,
        }

    def _count_records(self, deltas) -> list:
        return [
            count_record(
                **self._identity(),
                topic=topic,
                window_start_ms=start,
                count=tally.count,
                bytes=tally.bytes,
                no_timestamp=tally.no_timestamp,
                by_partition=dict(tally.by_partition) or None,
                latency_ms=tally.latency_ms(),
            )
            for (topic, start), tally in sorted(deltas.items())
        ]

    def _status_records(self, ends: dict[tuple[str, int], int]) -> list:
        """A status record per topic from this flush's end offsets (`ends`, by partition)."""
        now_ms = int(time.time() * 1000)
        self._pass_deleted(ends)
        positions = {key: progress.position for key, progress in self.progress.items()}
        audit_times = {key: progress.last_audit_time_ms for key, progress in self.progress.items()}
        by_topic, withheld = topic_statuses(positions, self._held_back_to(ends), audit_times)
        if withheld:
            log.warning(
                "status withheld: end offsets unknown",
                extra={"cluster": self.options.cluster, "topics": ",".join(withheld)},
            )
        for topic, partitions in by_topic.items():
            for status in partitions:
                self.stats.lag[(topic, status.partition)] = status.lag
                LAG.labels(self.options.cluster, topic, str(status.partition)).set(status.lag)
        return [
            status_record(
                **self._identity(),
                topic=topic,
                partitions=tuple(partitions),
                watermark_ms=watermark_ms(partitions, now_ms),
                retention_gaps=self.retention.of_topic(topic),
            )
            for topic, partitions in by_topic.items()
        ]

    def _held_back_to(self, ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """`ends` (last stable offsets) raised to the high watermark where a transaction still open holds
        messages back. A read_committed reader stops at an open transaction's first offset; lag 0 there
        moved the tier's watermark past every message written after it, committed or not, that no tier
        can read yet: against an audited producer that counted them, a loss until the transaction ended."""
        highs = self._list_offsets(list(ends), OffsetSpec.latest(), committed=False)
        return {key: max(end, highs.get(key, end)) for key, end in ends.items()}

    def _pass_deleted(self, ends: dict[tuple[str, int], int]) -> None:
        """Partitions behind whose next offset retention deleted move to the log start (`seek_past_deleted`)."""
        behind = [key for key, progress in self.progress.items() if ends.get(key, -1) > progress.position]
        if not behind:
            return
        starts = self._list_offsets(behind, OffsetSpec.earliest())
        positions = {key: (self.progress[key].position, self.progress[key].last_audit_time_ms) for key in behind}
        skips = seek_past_deleted(self.consumer, positions, starts)
        for skip in skips:
            self.progress[(skip.topic, skip.partition)].position = skip.offsets[0]
        self.retention.check(skips, lambda _keys: starts)
        self.stats.retention_skipped = self.retention.skipped

    def _list_offsets(
        self, partitions: list[tuple[str, int]], spec: OffsetSpec, *, committed: bool = True
    ) -> dict[tuple[str, int], int]:
        return self.admin.list_offsets(partitions, spec, timeout_s=self.options.client_timeout_s, committed=committed)

    def flush(self, *, heartbeat: bool = True) -> bool:
        """Commit deltas, status and offsets in one transaction; False when it had to abort or postpone.

        Without `heartbeat`, a flush with nothing new to commit is skipped.
        """
        if not self._renew_producer():
            return False
        self._read_past_markers()
        if not self._has_news() and not heartbeat:
            return True
        ends = self._list_offsets(list(self.progress), OffsetSpec.latest())
        if self.progress and not ends:
            return self._postpone("no end offset answered")
        if self.progress and not self.consumer.memberid():
            return self._postpone("dropped from the group")
        records = self._count_records(self.tally.drain()) + self._status_records(ends)
        offsets = [TopicPartition(topic, partition, p.position) for (topic, partition), p in self.progress.items()]
        if not records and not offsets:
            return True
        producer = self.producer
        try:
            self._bounded(producer.begin_transaction, "begin_transaction")
            for record in records:
                producer.produce(self.options.audit_topic, key=record.topic.encode(), value=encode(record))
            if offsets:
                group = self.consumer.consumer_group_metadata()
                timeout_s = self.options.transaction_call_timeout_s
                self._bounded(
                    lambda: producer.send_offsets_to_transaction(offsets, group, timeout_s),
                    "send_offsets_to_transaction",
                )
        except KafkaException as exc:  # nothing was committed: the open transaction must be aborted, whatever the error
            self._abort(exc.args[0], open_transaction=True)
            return False
        try:
            self._commit_transaction()
        except KafkaException as exc:
            self._abort(exc.args[0])
            return False
        for progress in self.progress.values():
            progress.committed = progress.position
        if self._failing_since is not None:  # how long a fault kept this counter from committing
            log.info(
                "counter committing again",
                extra={
                    "cluster": self.options.cluster,
                    "seconds_failing": round(time.monotonic() - self._failing_since, 1),
                    "records": len(records),
                    "statuses": sum(record.kind == Kind.STATUS for record in records),
                },
            )
            self._failing_since = None
        self.stats.flushes += 1
        self.stats.records_emitted += len(records)
        FLUSHES.labels(self.options.cluster).inc()
        LAST_FLUSH.labels(self.options.cluster).set_to_current_time()
        return True

    def _read_past_markers(self) -> None:
        """Move each position over the offsets a read_committed reader never gets (commit and abort
        markers, aborted batches): the consumer has passed them, so they are neither lag nor loss.
        Without this a transactional topic shows lag 1 per partition for ever."""
        if not self.progress:
            return
        skips = []
        for tp in self.consumer.position([TopicPartition(topic, partition) for topic, partition in self.progress]):
            progress = self.progress.get((tp.topic, tp.partition))
            if progress is not None and tp.offset > progress.position:
                # Its consumer may also have jumped to the log start after a deletion, with no message since.
                skips.append(Skip(tp.topic, tp.partition, progress.position, (tp.offset,), progress.last_audit_time_ms))
                progress.position = tp.offset
        self._check_skips(skips)

    def _bounded(self, call, what: str):
        """A transactional call given its own timeout plus LATE_ANSWER_S to return (`clients.bounded`)."""
        return bounded(call, self.options.transaction_call_timeout_s + LATE_ANSWER_S, what)

    def _commit_transaction(self) -> None:
        producer, timeout_s = self.producer, self.options.transaction_call_timeout_s
        for attempt in range(3):
            try:
                self._bounded(lambda: producer.commit_transaction(timeout_s), "commit_transaction")
                return
            except KafkaException as exc:
                # Retriable (e.g. a timed-out request): the same commit may simply be repeated.
                if not exc.args[0].retriable() or attempt == 2:
                    raise

    def _postpone(self, why: str) -> bool:
        """Begin no transaction this flush (False, for `flush` to return); its counts stay for the next one.

        Not one end offset answered: the broker is away or only just back, and a transaction now would
        wait on it. No member id: the group dropped this consumer (a broker away past the session timeout,
        maybe during this very flush) and its offsets would go out under a stale generation. Either way
        that call hung for its whole timeout, then cost an abort and a new producer (the soak's hub
        restart). The next consume serves the group's news first (a lost assignment rewinds)."""
        log.warning("flush postponed", extra={"cluster": self.options.cluster, "why": why})
        self._failing()
        # A transaction the outage interrupted can hold the coordinator: the first send_offsets after a
        # restart hung its whole timeout. A new producer's init fences and aborts it at once instead.
        self._producer_broken = True
        return False

    def _failing(self) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def _abort(self, error: KafkaError, *, open_transaction: bool = False) -> None:
        """Throw away this flush and rewind to the last commit, so its messages are counted again.

        `open_transaction`: the error came before the commit (a broker gone while adding the offsets, say),
        so the transaction is still open and must be aborted even when the error itself does not demand it;
        left open, every later begin_transaction fails and the counter never commits again."""
        self.stats.aborts += 1
        self._failing()
        ABORTS.labels(self.options.cluster).inc()
        log.warning(
            "transaction aborted; recounting from the last commit",
            extra={"cluster": self.options.cluster, "error": error.str(), "code": error.code()},
        )
        if error.code() in FENCED and self._left_behind:
            # A producer this counter dropped mid-call was answered late and fenced the current one:
            # renewed again, once per producer left behind; a fence beyond that is another instance.
            self._left_behind -= 1
            log.warning(
                "fenced by a producer this counter left behind; renewing", extra={"cluster": self.options.cluster}
            )
            self._producer_broken = True
        elif error.code() in FENCED:
            raise KafkaClientError(
                f"counter {self.options.cluster}: slot {self.options.instance} was taken over by another instance "
                f"with transactional id {self.options.transactional_id} ({error.str()}); give each instance its own "
                "--instance",
                code=error.code(),
            )
        if error.fatal():
            if is_stuck(error):
                self._leave_behind()  # it stays with the thread that waits on it
            self._producer_broken = True
        elif error.txn_requires_abort() or open_transaction:
            try:
                producer, timeout_s = self.producer, self.options.transaction_call_timeout_s
                self._bounded(lambda: producer.abort_transaction(timeout_s), "abort_transaction")
            except KafkaException as exc:  # the broker is still away, or refuses: a new producer settles it
                if is_stuck(exc.args[0]):
                    self._leave_behind()
                log.warning(
                    "abort failed; the producer is renewed at the next flush",
                    extra={"cluster": self.options.cluster, "error": exc.args[0].str()},
                )
                self._producer_broken = True
        self._rewind()

    def _rewind(self) -> None:
        """Forget what was counted since the last commit and read it again."""
        self.tally.drain()
        for (topic, partition), progress in self.progress.items():
            progress.position = progress.committed
            try:
                self.consumer.seek(
                    TopicPartition(
                        topic, partition, progress.committed if progress.committed >= 0 else OFFSET_BEGINNING
                    )
                )
            except KafkaException as exc:  # not assigned any more: its next owner starts from the commit
                log.info("seek skipped", extra={"topic": topic, "partition": partition, "error": exc.args[0].str()})

    # -- the loop ------------------------------------------------------------------------------

    def run(self, *, max_seconds: float | None = None, until_caught_up: bool = False) -> CounterStats:
        """Count until stopped (SIGTERM, `stop()`), `max_seconds`, or, with `until_caught_up`, no lag left."""
        self._next_flush = time.monotonic() + self.options.flush_interval_s
        self._until_caught_up = until_caught_up
        run_hop(self, self._stop, max_seconds=max_seconds, until_caught_up=until_caught_up)
        return self.stats

    # -- the run loop's steps (audit.hops.runloop.Hop) --------------------------------------------

    @property
    def topic_refresh_s(self) -> float:
        return self.options.topic_refresh_s

    def step(self) -> bool:
        """Count one batch and flush when due; idle right after a flush with nothing new read.

        Run until caught up, a batch that reads nothing flushes at once what was counted or read past since the
        last commit, and is idle when there is nothing to commit: the run ends as soon as its group's commits
        reach the ends, not one flush interval later."""
        messages = self.consumer.consume(self.options.batch_size, timeout=0.5) if self._subscribed else []
        if not self._subscribed:
            self._stop.wait(0.5)
        self.count_batch(messages)
        self.check_retention(messages)
        read_all = self._until_caught_up and bool(self._subscribed) and not messages
        if read_all:
            self._read_past_markers()
        at_end = read_all and self._has_news()
        if time.monotonic() < self._next_flush and not at_end:
            return read_all  # idle with nothing to commit: the run asks whether its group has caught up
        self.flush()
        self._next_flush = time.monotonic() + self.options.flush_interval_s
        return not messages

    def caught_up(self) -> bool:
        return self.group_caught_up()

    def _has_news(self) -> bool:
        """Something counted or read past since the last commit."""
        return bool(self.tally) or any(p.position != p.committed for p in self.progress.values())

    def finish(self) -> None:
        self.flush()

    def group_caught_up(self) -> bool:
        """The group has committed up to the end of every partition of the subscribed topics."""
        return bool(self._subscribed) and group_caught_up(
            self.consumer, self.admin, self._subscribed, timeout_s=self.options.client_timeout_s
        )

    def close(self) -> None:
        if self._consumer is not None:
            self.consumer.close()
        if self._producer is not None:
            self.producer.flush(self.options.client_timeout_s)


def _opened(client: T | None) -> T:
    if client is None:
        raise KafkaClientError("counter: a client was used before open()")
    return client
