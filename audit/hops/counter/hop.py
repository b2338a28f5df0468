"""The audit counter of one cluster: reads every message of the selected topics, counts it once.

Exactly once, across crashes: every flush writes the count deltas, a status record per topic and
the consumer offsets in ONE Kafka transaction (`audit.io.transactions`). A crash before the commit
loses the uncommitted deltas and offsets together, so the restarted counter recounts exactly what
was not yet counted. The transactional id is stable per instance slot (`--instance`), so a restarted
slot fences its predecessor's open transaction at once instead of waiting for it to time out.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from audit.contract.errors import KafkaClientError
from audit.contract.record import AuditRecord, Kind, encode
from audit.contract.tally import Tally
from audit.contract.watermarks import topic_statuses
from audit.contract.windows import window_length_ms
from audit.hops.counter import fastcount
from audit.hops.counter.batch import add_groups, message_error, plugin_batch_groups, with_counting_plugin
from audit.hops.counter.records import CounterRecords
from audit.hops.counter.state import (
    ABORTS,
    FLUSHES,
    LAG,
    LAST_FLUSH,
    MESSAGES,
    RETENTION_SKIPPED,
    SERVICE,
    SESSION_TIMEOUT_MS,
    CounterOptions,
    CounterStats,
    PartitionProgress,
)
from audit.hops.retention import RetentionGaps, Skip, seek_past_deleted, skips_in_batch
from audit.hops.runloop import run_hop
from audit.hops.upkeep import check_audit_retention, drop_series
from audit.io.clients import Admin, check_credentials, ensure_topics
from audit.io.offsets import committed_offsets, group_caught_up
from audit.io.transactions import Transactions, producer_config

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
        self.records = CounterRecords(options, host=host)
        self.tally = Tally(options.window_minutes)
        self.progress: dict[tuple[str, int], PartitionProgress] = {}
        self.stats = CounterStats()
        self._subscribed: list[str] = []
        self._stop = threading.Event()
        self._until_caught_up = False  # set by run(): a batch that reads nothing flushes at once
        self._consumer_config: dict[str, Any] = {}  # set by open(); asked again when committed offsets are held
        self._consumer: Consumer | None = None
        self._admin: Admin | None = None
        self.transactions = Transactions(
            lambda: self._new_producer(),
            transactional_id=options.transactional_id,
            call_timeout_s=options.transaction_call_timeout_s,
            owner=f"counter {options.cluster}",
            log_fields={"cluster": options.cluster},
        )
        self._failing_since: float | None = None  # the first abort or postponed flush since the last commit (monotonic)
        self.native = True  # count through the plugin when it is built (tests turn it off to compare)
        self._plugin_id: str | None = None  # the consumer's kaudit.instance.id while the plugin counts
        self.retention = RetentionGaps(
            lambda topic, partition, n: RETENTION_SKIPPED.labels(options.cluster, topic, str(partition)).inc(n),
            keep_ms=options.audit_retention_ms,
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
    def admin(self) -> Admin:
        return _opened(self._admin)

    def open(self) -> None:
        timeout_s, address = self.options.client_timeout_s, str(self.config.get("bootstrap.servers"))
        check_credentials(self.config, self.options.cluster, timeout_s=timeout_s)
        self._consumer_config = {
            **self.config,
            "group.id": self.options.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "client.id": f"{SERVICE}-{self.options.cluster}-{self.options.instance}",
            # Dynamic membership on purpose: a static member (group.instance.id) can be fenced by its own
            # rejoin after a broker restart, a fatal error, and is handed its predecessor's assignment even
            # when its topic list changed. A dead member's partitions move after the session timeout; the
            # transactional id still fences zombies.
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
        plugged, self._plugin_id = with_counting_plugin(
            self._consumer_config,
            self.options.window_minutes,
            native=self.native,
            digest_exclude=self.options.digest_exclude,
        )
        self._consumer = Consumer(plugged)
        self._admin = Admin(self.config)
        self.transactions.start(timeout_s, address=address)  # fences an earlier incarnation of this slot
        try:
            # Without its audit topic every transaction would wait for a topic that never comes.
            ensure_topics(self.config, {self.options.audit_topic: 1}, timeout_s=timeout_s)
        except KafkaException as exc:
            raise KafkaClientError(
                f"counter {self.options.cluster}: audit topic {self.options.audit_topic} not created at {address} "
                f"({exc.args[0].str()})",
                code=exc.args[0].code(),
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
        return Producer({**self.config, **producer_config(self.options.transactional_id), "linger.ms": 5})

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
        # The coordinators were away as long: a transaction of the old producer can still hold its own, and
        # the next call on it wait its whole timeout. A new producer, made at the next flush while the group
        # rejoins, fences and settles that transaction with its init.
        self.transactions.retire()

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.progress.pop((tp.topic, tp.partition), None)
            if self.stats.lag.pop((tp.topic, tp.partition), None) is not None:
                LAG.remove(self.options.cluster, tp.topic, str(tp.partition))
        # Counted up to this revoke, which came after the topic left the subscription.
        self._forget_topics({tp.topic for tp in partitions} - set(self._subscribed))

    # -- counting ------------------------------------------------------------------------------

    def count_batch(self, messages: list, *, now_ms: int | None = None) -> int:
        """Bucket a batch by (topic, partition, window) in Python and add it to the tally (see count_consumed)."""
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        on_error = functools.partial(message_error, cluster=self.options.cluster)
        window_ms = window_length_ms(self.options.window_minutes)
        groups = fastcount.count_in_python(messages, now_ms, window_ms, on_error, self.options.digest_off)
        return self._add_groups(groups)

    def count_consumed(self, messages: list) -> int:
        """Add the batch the consumer just handed over to the tally: the counter's hot path, counted by the plugin
        in C when it is loaded (batch.plugin_batch_groups), else in Python."""
        groups = None
        if self._plugin_id is not None:
            groups = plugin_batch_groups(self._plugin_id, messages, cluster=self.options.cluster)
        return self.count_batch(messages) if groups is None else self._add_groups(groups)

    def _add_groups(self, groups: dict[tuple[str, int, int], list]) -> int:
        added = add_groups(self.tally, self.progress, groups, by_partition=self.options.by_partition)
        for topic, count in added.by_topic.items():
            MESSAGES.labels(self.options.cluster, topic).inc(count)
        self.stats.counted += added.counted
        # Checked by `check_retention` once the batch is in, never message by message.
        self._skipped.update(added.skipped)
        return added.counted

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

    # -- flushing ------------------------------------------------------------------------------

    def _status_records(self, ends: dict[tuple[str, int], int]) -> list[AuditRecord]:
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
        return self.records.statuses(by_topic, now_ms, self.retention.of_topic)

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
        if not self.transactions.ready():
            return False
        self._read_past_markers()
        if not self._has_news() and not heartbeat:
            return True
        ends = self._list_offsets(list(self.progress), OffsetSpec.latest())
        if self.progress and not ends:
            return self._postpone("no end offset answered")
        if self.progress and not self.consumer.memberid():
            return self._postpone("dropped from the group")
        records = self.records.counts(self.tally.drain()) + self._status_records(ends)
        offsets = [TopicPartition(topic, partition, p.position) for (topic, partition), p in self.progress.items()]
        if not records and not offsets:
            return True
        if not self._commit(records, offsets):
            self._aborted()
            return False
        self._committed(records)
        return True

    def _commit(self, records: list[AuditRecord], offsets: list[TopicPartition]) -> bool:
        """One transaction: `records` and the group's `offsets`, committed together or not at all."""
        transactions = self.transactions
        if not transactions.begin():
            return False
        try:
            for record in records:
                transactions.active.produce(self.options.audit_topic, key=record.topic.encode(), value=encode(record))
        except KafkaException as exc:
            transactions.fail(exc.args[0])
            return False
        if offsets and not transactions.send_offsets(offsets, self.consumer.consumer_group_metadata()):
            return False
        return transactions.commit()

    def _committed(self, records: list[AuditRecord]) -> None:
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

    def _postpone(self, why: str) -> bool:
        """Begin no transaction this flush (False, for `flush` to return); its counts stay for the next one.

        Not one end offset answered: the broker is away or only just back, and a transaction now would
        wait on it. No member id: the group dropped this consumer (a broker away past the session timeout,
        maybe during this very flush) and its offsets would go out under a stale generation. Either way the
        call would wait its whole timeout, then cost an abort. The next consume serves the group's news
        first (a lost assignment rewinds)."""
        log.warning("flush postponed", extra={"cluster": self.options.cluster, "why": why})
        self._failing()
        # A transaction the outage interrupted can hold the coordinator, and the next call on it wait its
        # whole timeout: a new producer's init fences and aborts it at once instead.
        self.transactions.retire()
        return False

    def _failing(self) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def _aborted(self) -> None:
        """The flush's transaction failed and nothing of it committed (`Transactions` settled it): what it
        held is counted again from the last commit."""
        self.stats.aborts += 1
        self._failing()
        ABORTS.labels(self.options.cluster).inc()
        log.warning("transaction aborted; recounting from the last commit", extra={"cluster": self.options.cluster})
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
        reach the ends, not one flush interval later. With no topic to count, nothing is left to read."""
        messages = self.consumer.consume(self.options.batch_size, timeout=0.5) if self._subscribed else []
        if not self._subscribed:
            self._stop.wait(0.5)
        self.count_consumed(messages)
        self.check_retention(messages)
        read_all = self._until_caught_up and not messages
        if read_all:
            self._read_past_markers()
        at_end = read_all and self._has_news()
        if time.monotonic() < self._next_flush and not at_end:
            return read_all  # idle with nothing to commit: the run asks whether its group has caught up
        self.flush()
        self._next_flush = time.monotonic() + self.options.flush_interval_s
        return not messages

    def caught_up(self) -> bool:
        """The group has committed up to every end, or there is no topic to count (its topics refreshed)."""
        return not self._subscribed or self.group_caught_up()

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
        self.transactions.flush(self.options.client_timeout_s)


def _opened(client: T | None) -> T:
    if client is None:
        raise KafkaClientError("counter: a client was used before open()")
    return client
