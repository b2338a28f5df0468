"""State that stays bounded (issue #59, "A year of operation"): every in-memory structure of the long-running
services is driven through a simulated long life, with fake clients and fake clocks (no broker, no sleeping),
and held to its bound: its size never grows with the deployment's age, and what it evicts is never something
still needed (a count not yet committed, a window not yet emitted, a table a page still reads)."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter as Tallied
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from audit.books.run import COUNTED_TIERS_MAX_AGE_MS, RunMemory
from audit.contract.naming import naming_policy
from audit.contract.tally import LATENCY_FLOORS, Tally
from audit.contract.windows import MINUTES_PER_DAY, MS_PER_MINUTE, window_length_ms
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.counter.state import LAG, MESSAGES
from audit.hops.replicator import topics as replicator_topics
from audit.hops.replicator.hop import Replicator, ReplicatorOptions
from audit.hops.replicator.state import COPIED, PartitionFlow
from audit.hops.retention import EXPIRY_EVERY_MS, RetentionGaps, Skip
from audit.io import plugin, transactions
from dashboards import data as dashboard_data
from dashboards.data import MAX_CACHED, LakeCache
from producers import audited

WINDOW_MS = window_length_ms()
BASE_MS = 1_700_000_000_000 // WINDOW_MS * WINDOW_MS
DAY_MS = 86_400_000
PARTITIONS = 2
LIVE_TOPICS = 3  # topics alive at once, beside the one that lives for ever
LONG_LIVED = "forever"
LIFE_WINDOWS = 30 * 144  # 30 days of 10-minute windows
TOPIC_EVERY = 4  # windows between a topic created (and the oldest deleted): 1,080 topics over the life
FLUSH_EVERY = 2  # windows between two flushes of the counter (and a flush at every rebalance)


def series(metric, **labels) -> set[tuple]:
    """The label values of every series of `metric` whose labels include `labels`."""
    return {
        tuple(sample.labels.values())
        for family in metric.collect()
        for sample in family.samples
        if all(sample.labels.get(key) == value for key, value in labels.items())
    }


# -- a fake cluster and its clients ---------------------------------------------------------------


class FakeCluster:
    """Topics and log end offsets; messages appended with the audit time given."""

    def __init__(self) -> None:
        self.topics: dict[str, int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.appended: Tallied = Tallied()  # (topic, window start) -> messages

    def create(self, topic: str) -> None:
        self.topics[topic] = PARTITIONS
        for partition in range(PARTITIONS):
            self.ends[(topic, partition)] = 0

    def delete(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for partition in range(PARTITIONS):
            self.ends.pop((topic, partition), None)

    def append(self, topic: str, partition: int, time_ms: int) -> Message:
        offset = self.ends[(topic, partition)]
        self.ends[(topic, partition)] = offset + 1
        self.appended[(topic, time_ms - time_ms % WINDOW_MS)] += 1
        return Message(
            topic=topic, partition=partition, offset=offset, value=b"v" * 20, timestamp=(TIMESTAMP_CREATE_TIME, time_ms)
        )

    def metadata(self):
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(partitions=dict.fromkeys(range(count)), error=None)
                for name, count in self.topics.items()
            }
        )


class FakeConsumer:
    """A group member alone in its group: an eager rebalance when the test says so, commits kept."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.topics: list[str] = []
        self.assignment: list[TopicPartition] = []
        self.commits: dict[tuple[str, int], int] = {}
        self._on_assign = self._on_revoke = None

    def list_topics(self, timeout=None):
        return self.cluster.metadata()

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None):
        self.topics, self._on_assign, self._on_revoke = list(topics), on_assign, on_revoke

    def unsubscribe(self):
        self.topics = []

    def rebalance(self) -> None:
        """As librdkafka does at the next poll after the subscription changed: revoke all, assign all."""
        self._on_revoke(self, list(self.assignment))
        self.assignment = [
            TopicPartition(topic, partition)
            for topic in self.topics
            if topic in self.cluster.topics
            for partition in range(self.cluster.topics[topic])
        ]
        self._on_assign(self, list(self.assignment))

    def assign(self, partitions):
        self.assignment = [TopicPartition(tp.topic, tp.partition) for tp in partitions]

    def committed(self, partitions, timeout=None):
        return [
            TopicPartition(tp.topic, tp.partition, self.commits.get((tp.topic, tp.partition), -1001))
            for tp in partitions
        ]

    def commit(self, offsets=None, asynchronous=True):
        for tp in offsets:
            self.commits[(tp.topic, tp.partition)] = tp.offset

    def position(self, partitions):
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def memberid(self):
        return "member-1"

    def consumer_group_metadata(self):
        return "group-metadata"

    def seek(self, partition):
        pass

    def pause(self, partitions):
        pass

    def resume(self, partitions):
        pass

    def close(self):
        pass


class FakeAdmin:
    """List offsets: latest is the log end, earliest 0 (retention deletes nothing here)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.client = self

    def list_offsets(self, partitions, spec, *, timeout_s=None, committed=True):
        if isinstance(spec, type(OffsetSpec.latest())):
            return {key: self.cluster.ends[key] for key in partitions if key in self.cluster.ends}
        return {key: 0 for key in partitions if key in self.cluster.ends}


class FakeTransactionalProducer:
    """Keeps what each committed transaction wrote; its offsets go to the consumer's commits."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.written: list[bytes] = []
        self._open: list[bytes] = []
        self._offsets: list[TopicPartition] = []

    def begin_transaction(self):
        self._open, self._offsets = [], []

    def produce(self, topic, key=None, value=None):
        self._open.append(value)

    def send_offsets_to_transaction(self, offsets, group, timeout):
        self._offsets = list(offsets)

    def commit_transaction(self, timeout):
        self.written.extend(self._open)
        self.consumer.commit(self._offsets)

    def flush(self, timeout=None):
        return 0


def counted_by_window(encoded: list[bytes]) -> Tallied:
    """(topic, window start) -> messages, summed over the count records (each record id once)."""
    seen, counts = set(), Tallied()
    for value in encoded:
        record = json.loads(value)
        if record["kind"] == "count" and record["record_id"] not in seen:
            seen.add(record["record_id"])
            start = datetime.fromisoformat(record["window_start"])
            counts[(record["topic"], int(start.timestamp() * 1000))] += record["count"]
    return counts


def topic_of(index: int) -> str:
    return f"topic-{index}"


def live_topics(cluster: FakeCluster) -> set[str]:
    return set(cluster.topics)


# -- the tally ------------------------------------------------------------------------------------


def test_a_tally_drained_every_flush_holds_only_the_windows_since_the_last_drain():
    tally = Tally(10)
    added, drained = Tallied(), Tallied()
    rng = random.Random(59)
    for window in range(10_000):
        start = BASE_MS + window * WINDOW_MS
        for topic in ("a", "b", "c"):
            for _ in range(3):  # a late message now and then reopens the window before
                when = start - WINDOW_MS if rng.random() < 0.1 else start + rng.randrange(WINDOW_MS)
                tally.add(topic, when, 100, partition=rng.randrange(8), latency_ms=rng.randrange(1, 10**9))
                added[(topic, when - when % WINDOW_MS)] += 1
        assert len(tally) <= 3 * 2, "one window per topic, and the one before for late messages"
        for key, window_tally in tally.drain().items():
            drained[key] += window_tally.count
            assert len(window_tally.by_partition) <= 8 and len(window_tally.latency_histogram) <= len(LATENCY_FLOORS)
        assert len(tally) == 0
    assert drained == added, "nothing added was dropped"


# -- the counter ----------------------------------------------------------------------------------


@pytest.fixture
def direct_calls(monkeypatch):
    """The transactional calls run on the caller's thread: no watchdog thread per call over 10,000 flushes."""
    monkeypatch.setattr(transactions, "bounded", lambda call, timeout_s, what: call())


def test_a_counter_over_30_days_and_1000_topics_keeps_only_what_is_assigned_now(direct_calls):
    cluster = FakeCluster()
    cluster.create(LONG_LIVED)
    options = CounterOptions(cluster="bounded-counter", flush_interval_s=1.0)
    counter = ClusterCounter({}, options, lambda topic: True, host="test")
    consumer = FakeConsumer(cluster)
    producer = FakeTransactionalProducer(consumer)
    counter._consumer, counter._admin = consumer, FakeAdmin(cluster)
    counter.transactions.producer = producer
    created = 0
    for window in range(LIFE_WINDOWS):
        start = BASE_MS + window * WINDOW_MS
        if window % TOPIC_EVERY == 0:  # a topic created, the oldest deleted
            cluster.create(topic_of(created))
            cluster.delete(topic_of(created - LIVE_TOPICS))
            created += 1
            counter.refresh_topics()
            consumer.rebalance()
        messages = [
            cluster.append(tp.topic, tp.partition, start + offset * 1_000)
            for tp in consumer.assignment
            for offset in range(2)
        ]
        counter.count_batch(messages, now_ms=start + WINDOW_MS)
        counter.check_retention(messages)
        assert len(counter.tally) <= (1 + LIVE_TOPICS) * FLUSH_EVERY, "the windows counted since the last commit"
        if window % FLUSH_EVERY == FLUSH_EVERY - 1:
            assert counter.flush()
            assert len(counter.tally) == 0, "every delta committed"

        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment}
        assert set(counter.progress) == assigned and set(counter.stats.lag) <= assigned
        if window % TOPIC_EVERY == 1:  # a window after the topics changed: a gone topic's series are gone
            alive = live_topics(cluster)
            assert {topic for _cluster, topic in series(MESSAGES, cluster=options.cluster)} <= alive
            assert {labels[1] for labels in series(LAG, cluster=options.cluster)} <= alive
    assert created >= 1_000
    counter.flush()
    assert counted_by_window(producer.written) == cluster.appended, "every message counted once, none dropped"


# -- the replicator -------------------------------------------------------------------------------


class FakeTargetProducer:
    """Acknowledges what it was given at the next poll, in a shuffled order (acks out of order happen)."""

    def __init__(self, seed: int = 59) -> None:
        self.queue: list = []
        self.copied: Tallied = Tallied()
        self._rng = random.Random(seed)

    def produce(self, topic, value=None, key=None, headers=None, partition=-1, timestamp=0, on_delivery=None):
        self.queue.append(on_delivery)
        self.copied[topic] += 1

    def poll(self, timeout=0):
        delivered, self.queue = self.queue, []
        self._rng.shuffle(delivered)
        for callback in delivered:
            callback(None, None)
        return len(delivered)

    def flush(self, timeout=None):
        self.poll()
        return 0

    def __len__(self):
        return len(self.queue)


class FakeStatusProducer:
    def __init__(self) -> None:
        self.records = 0

    def produce(self, topic, key=None, value=None):
        self.records += 1

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=None):
        return 0


def test_a_replicator_over_30_days_and_1000_topics_keeps_only_the_topics_there_now(monkeypatch):
    monkeypatch.setattr(
        replicator_topics,
        "create_target_topics",
        lambda source_admin, target_admin, target_names, partitions, *, target, timeout_s: dict(partitions),
    )
    cluster = FakeCluster()
    cluster.create(LONG_LIVED)
    options = ReplicatorOptions(source="bsrc", target="btgt")
    mirror = Replicator({}, {}, options, naming_policy("prefix", ("bsrc", "btgt")), lambda topic: True)
    consumer, target = FakeConsumer(cluster), FakeTargetProducer()
    mirror._consumer, mirror._producer, mirror._status_producer = consumer, target, FakeStatusProducer()
    mirror._source_admin = mirror._target_admin = FakeAdmin(cluster)
    created, sent = 0, Tallied()
    for window in range(LIFE_WINDOWS):
        start = BASE_MS + window * WINDOW_MS
        if window % TOPIC_EVERY == 0:
            cluster.create(topic_of(created))
            cluster.delete(topic_of(created - LIVE_TOPICS))
            created += 1
            mirror.refresh_topics()
            consumer.rebalance()
        messages = [
            cluster.append(tp.topic, tp.partition, start + offset * 1_000)
            for tp in consumer.assignment
            for offset in range(3)
        ]
        sent.update(message.topic() for message in messages)
        mirror.copy_batch(messages)
        target.poll(0)
        mirror.commit()
        if window % 6 == 0:
            mirror.emit_status(mirror.check_stall())

        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment}
        assert set(mirror.flows) == assigned
        assert all(not flow.sent and not flow.done for flow in mirror.flows.values()), "acknowledged: nothing kept"
        alive = live_topics(cluster)
        assert {topic for topic, _partition in mirror.positions.released} <= alive
        assert set(mirror.topics.target_partitions) <= alive and set(mirror.status.copied_metrics) <= alive
        assert set(mirror.stats.copied_by_topic) <= alive
        if window % TOPIC_EVERY == 1:
            assert {labels[2] for labels in series(COPIED, source="bsrc", target="btgt")} <= alive
    assert created >= 1_000
    assert mirror.topics.target_partitions[LONG_LIVED] == PARTITIONS, "a topic still there keeps its target"
    assert mirror.stats.copied_by_topic[LONG_LIVED] == sent[LONG_LIVED] == target.copied[f"bsrc.{LONG_LIVED}"]
    assert sum(target.copied.values()) == sum(sent.values()), "every message copied once"


def test_retention_gaps_over_30_days_and_1000_topics_keep_only_those_found_within_the_audit_retention():
    """A gap a day in a topic that lives for ever, and one in each topic created (none ever read past: no message
    after it): a hop keeps the topics with a gap found within `keep_ms`, and reports each gap that long at least."""
    now_s = [BASE_MS / 1000]
    gaps = RetentionGaps(lambda topic, partition, n: None, keep_ms=DAY_MS, clock=lambda: now_s[0], cluster="b")
    found_at: dict[tuple[str, int], int] = {}  # (topic, first offset of its gap) -> when found
    next_offset: dict[str, int] = defaultdict(int)
    created = 0
    for window in range(LIFE_WINDOWS):
        now_ms = BASE_MS + window * WINDOW_MS
        now_s[0] = now_ms / 1000
        topics = [LONG_LIVED] if window % 144 == 0 else []
        if window % TOPIC_EVERY == 0:
            topics.append(topic_of(created))
            created += 1
        for topic in topics:
            start = next_offset[topic]
            next_offset[topic] = start + 11
            gaps.check(
                [Skip(topic, 0, start, (start + 10,), now_ms - 1)],
                lambda keys, end=start + 10: dict.fromkeys(keys, end),
            )
            found_at[(topic, start)] = now_ms

        recent = {key for key, found in found_at.items() if now_ms - found <= DAY_MS}
        for topic, start in recent:
            assert (start, start + 10) in {(g.from_offset, g.to_offset) for g in gaps.of_topic(topic)}, (
                "kept its keep_ms"
            )
        topics_found_lately = 1 + DAY_MS // (TOPIC_EVERY * WINDOW_MS) + 1
        assert len(gaps._gaps) <= topics_found_lately, "only the topics with a gap found within keep_ms"
        assert all(len(kept) <= 32 for kept in gaps._gaps.values())
        assert {topic for topic, _partition in gaps._open} <= set(gaps._gaps)
        if window % 144 == 143:  # a day on, and a check later: every gap older than keep_ms is gone
            expired = {topic for (topic, _), found in found_at.items() if now_ms - found > DAY_MS + EXPIRY_EVERY_MS}
            assert not expired & set(gaps._gaps) - {LONG_LIVED}
    assert created >= 1_000
    assert gaps.skipped == 10 * len(found_at), "each gap counted once"


def test_a_partition_flow_keeps_only_the_offsets_in_flight():
    flow = PartitionFlow(committed=0, acked=0)
    rng = random.Random(7)
    in_flight: list[int] = []
    for offset in range(10_000):
        flow.sent.append(offset)
        in_flight.append(offset)
        if len(in_flight) >= 50 or offset == 9_999:  # the producer's queue: acknowledged in any order
            rng.shuffle(in_flight)
            for acked in in_flight:
                flow.acknowledge(acked, BASE_MS + acked)
                assert len(flow.sent) <= 50 and set(flow.done) <= set(flow.sent)
            in_flight = []
            assert not flow.sent and not flow.done and flow.acked == offset + 1
    assert flow.last_audit_time_ms == BASE_MS + 9_999


# -- the reconciliation's memory ------------------------------------------------------------------


def test_a_continuous_reconcile_remembers_the_tiers_the_table_holds_not_every_topic_it_ever_saw():
    """30 days of runs a minute apart; a topic a day is new, and at noon maintenance deletes the tier_counts rows
    of topics older than a week. The memory holds what the table holds, plus for at most a day what it lost."""
    table: set[tuple[str, str, str]] = set()
    memory, reads = RunMemory(), 0

    def read() -> set[tuple[str, str, str]]:
        nonlocal reads
        reads += 1
        return set(table)

    runs_a_day = MINUTES_PER_DAY
    for run in range(30 * runs_a_day):
        now_ms = BASE_MS + run * MS_PER_MINUTE
        day = run // runs_a_day
        if run % runs_a_day == runs_a_day // 2:
            table -= {key for key in table if int(key[1].split("-")[1]) < day - 7}  # maintenance
        new = {("dc1", f"topic-{day}", tier) for tier in ("producer", "dc1", "lake")}
        table |= new  # this run's write
        known = memory.tiers_counted(now_ms, read)
        memory.counted_tiers = known | new  # as `counted_tiers(settings, known, summed)` adds the run's own
        assert table <= memory.counted_tiers, "never forgets a tier the table holds"
        assert len(memory.counted_tiers) <= len(table) + 3, "at most the one topic maintenance deleted today"
    assert reads == 30 * DAY_MS // COUNTED_TIERS_MAX_AGE_MS
    assert len(memory.counted_tiers) <= 3 * 10


def test_a_run_memory_holds_one_offset_per_audit_partition_and_one_state_per_cluster():
    memory = RunMemory(offsets={}, cluster_states={})
    for run in range(10_000):
        read_up_to = {(cluster, "_audit", partition): run for cluster in ("dc1", "aggregate") for partition in range(3)}
        memory.offsets = {**memory.offsets, **read_up_to}  # as `reconcile` keeps them
        memory.cluster_states = {cluster: (True, None) for cluster in ("dc1", "aggregate")}
    assert len(memory.offsets) == 6 and set(memory.offsets.values()) == {9_999}
    assert len(memory.cluster_states) == 2


# -- the UI's cache -------------------------------------------------------------------------------

PAGE_READS = [  # (table, columns) as the pages ask for them
    ("completeness", None),
    ("completeness", ("window_start",)),
    ("completeness", ("logical_topic", "window_start", "tier")),
    ("tier_counts", None),
    ("tier_status", None),
    ("cluster_reads", None),
    ("restatements", None),
    ("alerts", None),
    ("audit_records", ("kind", "emitted_at")),
]


def test_the_ui_cache_over_30_days_keeps_at_most_max_cached_snapshots_and_never_its_hot_ones(monkeypatch):
    reads: Tallied = Tallied()
    since_asked: list = []

    def read_arrow(lake, name, *, columns=None, since=None, **kwargs):
        reads[(name, tuple(columns or ()))] += 1
        since_asked.append(since)
        return pa.table({"n": [reads[(name, tuple(columns or ()))]]})

    versions = defaultdict(int)  # the pages' tables never change here; the others change every read
    monkeypatch.setattr(dashboard_data, "read_arrow", read_arrow)
    monkeypatch.setattr(dashboard_data, "table_version", lambda lake, name: versions[name])
    now = [0.0]
    cache = LakeCache(None, refresh_s=30.0, days=7, clock=lambda: now[0])
    computed = Tallied()

    def cells(table):
        computed["cells"] += 1
        return table.num_rows

    for tick in range(30 * 288):  # every 5 minutes for 30 days
        now[0] = tick * 300.0
        for name, columns in PAGE_READS:
            cache.table(name, list(columns) if columns else None)
        assert cache.derived("completeness", None, cells) == 1
        # A caller asking for ever new column sets, and derived values under ever new keys.
        versions[f"adhoc-{tick}"] += 1
        cache.table(f"adhoc-{tick}", ["c"])
        cache.derived("tier_status", None, functools.partial(lambda table, n: n, n=tick))
        assert len(cache._entries) <= MAX_CACHED and len(cache._derived) <= MAX_CACHED

    hot = {(name, tuple(columns or ())) for name, columns in PAGE_READS}
    assert {key: reads[key] for key in hot} == dict.fromkeys(hot, 1), "a table in use is never evicted and reread"
    assert computed["cells"] == 1, "a derived value in use is computed once per snapshot"
    oldest = (datetime.now(UTC) - timedelta(days=7 + 1)).date()
    assert all(since is not None and since >= oldest - timedelta(days=1) for since in since_asked)


# -- the audited producer: its plugin --------------------------------------------------------------


def test_an_audited_producer_over_a_month_and_1000_topics_holds_only_what_it_has_not_emitted():
    """The plugin's tally holds the (topic, window) entries since its last emission, and no record stays once
    the audit topic took it: on librdkafka's mock cluster, 3,000 windows of 3 of 1,000 topics each."""
    mock = Producer({"test.mock.num.brokers": 1, "log_level": 2})  # the cluster, kept up by this client
    broker = next(iter(mock.list_topics(timeout=10).brokers.values()))
    producer = audited.AuditedProducer(
        config={"bootstrap.servers": f"{broker.host}:{broker.port}", "log_level": 2, "linger.ms": 1},
        cluster="bounded-app",
        flush_interval_s=3600,
    )
    topic_count = 0
    for window in range(3_000):
        start = BASE_MS + window * WINDOW_MS
        topic_count += window % 3 == 0
        for index in range(max(0, topic_count - 3), topic_count):
            producer.produce(topic_of(index), b"v", timestamp=start)
        if window % 10 == 9:
            assert producer.flush(10) == 0
            entries, pending = plugin.held(producer.instance_id)
            assert (entries, pending) == (0, 0), "emitted and taken: nothing held"
        else:
            assert plugin.held(producer.instance_id)[0] <= 3 * 10, "at most the entries of 10 windows"
    assert topic_count == 1_000
    assert plugin.totals(producer.instance_id) == (sum(min(3, 1 + w // 3) for w in range(3_000)), 0)
    producer.close()
