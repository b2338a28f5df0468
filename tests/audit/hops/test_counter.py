"""The per-cluster audit counter against real brokers: exact counts, crashes, rebalances, odd timestamps."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from audit.contract.record import AUDIT_TIME_HEADER, Kind
from audit.contract.windows import window_length_ms, window_start
from audit.hops.counter import fastcount
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.counter.state import SESSION_TIMEOUT_MS
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import ensure_topics, watermarks
from audit.local.clusters import LocalClusters
from tests.conftest import cache_dir
from tests.waiting import wait_for

pytestmark = pytest.mark.kafka

WINDOW_MINUTES = 10
WINDOW_MS = window_length_ms(WINDOW_MINUTES)
BASE_MS = 1_763_800_000_000 // WINDOW_MS * WINDOW_MS  # an aligned window start in 2025


def produce_plain(
    bootstrap: str, topics: list[str], count: int, *, windows: int, partitions: int, seed: int = 1
) -> Counter:
    """Produce `count` messages spread over `windows` windows; the expected (topic, window) counts."""
    rng = random.Random(seed)
    expected: Counter = Counter()
    failures = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "on_delivery": lambda err, _msg: err and failures.append(err),
        }
    )
    for i in range(count):
        topic = topics[i % len(topics)]
        ts = BASE_MS + rng.randrange(windows * WINDOW_MS)
        while True:
            try:
                producer.produce(
                    topic,
                    value=b"x" * rng.randrange(1, 100),
                    key=str(i).encode(),
                    timestamp=ts,
                    partition=rng.randrange(partitions),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        expected[(topic, window_start(ts, WINDOW_MINUTES))] += 1
    assert producer.flush(60) == 0
    assert failures == [], failures[:3]
    return expected


def counter_for(
    bootstrap: str,
    audit_topic: str,
    prefix: str,
    *,
    instance: str = "0",
    group: str | None = None,
    flush_interval_s: float = 0.5,
) -> ClusterCounter:
    options = CounterOptions(
        cluster="dc1",
        audit_topic=audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=flush_interval_s,
        instance=instance,
        group_id=group or f"g-{audit_topic}",
        topic_refresh_s=1.0,
        by_partition=True,
    )
    return ClusterCounter({"bootstrap.servers": bootstrap}, options, lambda topic: topic.startswith(prefix))


def counted(bootstrap: str, audit_topic: str) -> dict:
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    return counts_by_window(records, "dc1")


@pytest.fixture(params=["plugin", "python"])
def counting_loop(request, monkeypatch):
    """Run the test with the counter counting through the librdkafka plugin and in its Python loop."""
    if request.param == "python":
        monkeypatch.setenv(fastcount.PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(fastcount.PURE_PYTHON_ENV, raising=False)
        assert fastcount.plugin_available(), "make setup builds the plugin"
    return request.param


def test_counts_every_message_once_per_topic_and_window(local_clusters, topic_factory, unique_name, counting_loop):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("exact")
    topics = [topic_factory("dc1", partitions=6, name=f"{prefix}-{i}") for i in range(3)]
    audit_topic = topic_factory("dc1", partitions=1, name=f"{prefix}-audit")
    expected = produce_plain(bootstrap, topics, 30_000, windows=6, partitions=6)

    stats = counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=120)

    assert stats.counted == 30_000
    assert counted(bootstrap, audit_topic) == dict(expected)
    assert len({window for _topic, window in expected}) >= 5


class HangingOnce:
    """A transactional producer one of whose calls never returns, as librdkafka's begin_transaction and
    send_offsets_to_transaction can after a broker restart; the rest goes to the real one."""

    def __init__(self, producer: Producer, stuck_call: str, released: threading.Event) -> None:
        self._producer, self._stuck_call, self.released = producer, stuck_call, released

    def __getattr__(self, name: str):
        if name == self._stuck_call:
            return lambda *args: self.released.wait()
        return getattr(self._producer, name)

    def __len__(self) -> int:  # messages in the queue: looked up on the type, so not through __getattr__
        return len(self._producer)


def count_with_producers(local_clusters, topic_factory, unique_name, name: str, wrap):
    """Count 500 messages with each producer the counter makes passed through `wrap(number, producer,
    released)` (`released` lets a stuck call return at the end). Returns the stats, the producers made,
    and the counts in the audit topic beside the expected ones."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name(name)
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", partitions=1, name=f"{prefix}-audit")
    expected = produce_plain(bootstrap, [topic], 500, windows=2, partitions=2)
    counter = counter_for(bootstrap, audit_topic, prefix)
    counter.options = dataclasses.replace(counter.options, transaction_call_timeout_s=3.0)
    made, released = [], threading.Event()

    def new_producer(real=counter._new_producer):
        made.append(real())
        return wrap(len(made), made[-1], released)

    counter._new_producer = new_producer
    try:
        stats = counter.run(until_caught_up=True, max_seconds=90)
    finally:
        released.set()
    return stats, made, counted(bootstrap, audit_topic), dict(expected)


@pytest.mark.parametrize("stuck_call", ["begin_transaction", "send_offsets_to_transaction"])
def test_a_transactional_call_that_never_returns_costs_a_new_producer_not_the_counter(
    local_clusters, topic_factory, unique_name, stuck_call, caplog
):
    caplog.set_level(logging.INFO, logger="audit.hops.counter.hop")

    def first_hangs(number, producer, released):
        return HangingOnce(producer, stuck_call, released) if number == 1 else producer

    stats, made, counts, expected = count_with_producers(
        local_clusters, topic_factory, unique_name, "hang", first_hangs
    )

    assert len(made) == 2, "the stuck producer was replaced"
    assert stats.aborts >= 1 and stats.counted >= 500
    assert counts == expected
    # The first commit after the abort says how long the counter could not commit (3 s call timeout).
    again = [r for r in caplog.records if r.getMessage() == "counter committing again"]
    assert again and all(r.seconds_failing >= 0 and r.statuses >= 1 for r in again)


class InitTimesOutOnce:
    """A producer whose first init_transactions gives up at once, as librdkafka's does while a restarted
    coordinator loads ("retry call to resume"); its InitProducerId request goes on in the background."""

    def __init__(self, producer: Producer) -> None:
        self._producer, self.inits = producer, 0

    def init_transactions(self, timeout_s: float) -> None:
        self.inits += 1
        self._producer.init_transactions(0.001 if self.inits == 1 else timeout_s)

    def __getattr__(self, name: str):
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


def test_a_renewal_whose_init_timed_out_resumes_on_the_same_producer(local_clusters, topic_factory, unique_name):
    """A second producer would race the first one's pending init, and the later answer fences the other:
    after a broker restart the counter would take its own renewal for another instance and exit."""

    def renewal_init_times_out(number, producer, released):
        if number == 1:
            return HangingOnce(producer, "send_offsets_to_transaction", released)  # forces a renewal
        return InitTimesOutOnce(producer) if number == 2 else producer

    stats, made, counts, expected = count_with_producers(
        local_clusters, topic_factory, unique_name, "renew", renewal_init_times_out
    )

    assert len(made) == 2, "the renewal's init was resumed, not raced by a third producer"
    assert stats.counted >= 500
    assert counts == expected


def test_a_flush_while_its_broker_is_away_or_its_group_dropped_it_begins_no_transaction(tmp_path, unique_name, caplog):
    """A transaction begun with the broker away waits on it; one begun after the group dropped the consumer
    (a broker away past the session timeout) sends its offsets under a stale generation. Each would hang for
    the whole call timeout, then cost an abort and a new producer. Such a flush is postponed instead: nothing
    begun, counts kept, and every count committed once the consumer is back in its group."""
    caplog.set_level(logging.INFO, logger="audit.hops.counter.hop")
    cluster = LocalClusters(["solo"], state_dir=tmp_path / "clusters", cache_dir=cache_dir())
    cluster.up()
    try:
        bootstrap = cluster["solo"].bootstrap_servers
        prefix = unique_name("away")
        topic, audit_topic = f"{prefix}-t", f"{prefix}-audit"
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: 2, audit_topic: 1})
        expected = produce_plain(bootstrap, [topic], 200, windows=2, partitions=2)
        counter = counter_for(bootstrap, audit_topic, prefix, flush_interval_s=3600)
        counter.options = dataclasses.replace(counter.options, client_timeout_s=3.0)
        counter.open()
        counter.refresh_topics()
        counter._next_flush = float("inf")  # this test flushes by hand

        def counted_all() -> bool:
            counter.step()
            return counter.stats.counted == 200

        def postponed(why: str) -> bool:
            began = time.monotonic()
            assert counter.flush() is False
            assert time.monotonic() - began < counter.options.transaction_call_timeout_s, "a call hung"
            assert len(counter.tally) > 0 and counter.stats.aborts == 0, "nothing begun, nothing thrown away"
            return any(getattr(r, "why", None) == why for r in caplog.records)

        wait_for(counted_all, "the first count")
        cluster["solo"].kill()
        killed_at = time.monotonic()
        assert postponed("no end offset answered")

        time.sleep(max(0.0, SESSION_TIMEOUT_MS / 1000 + 2 - (time.monotonic() - killed_at)))
        cluster["solo"].start()
        # No consume since: the group's news is not served, so only the missing member id tells.
        wait_for(lambda: postponed("dropped from the group"), "a flush postponed for the lost membership", 60)

        def committed_all() -> bool:
            counter.step()
            return counter.flush() and counter.group_caught_up()

        wait_for(committed_all, "every count committed after the broker's return", 90)
        counter.close()
        assert counter.stats.aborts == 0
        assert counted(bootstrap, audit_topic) == dict(expected)
    finally:
        cluster.down()


def test_a_run_until_caught_up_ends_when_its_commit_reaches_the_ends_not_a_flush_later(
    local_clusters, topic_factory, unique_name
):
    """`kaudit count --until-caught-up` (a batch job, every test of a CLI) flushes once it reads nothing: with
    an hour between flushes it still ends as soon as it has counted everything, exactly."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("prompt")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    expected = produce_plain(bootstrap, [topic], 2_000, windows=2, partitions=2)

    began = time.monotonic()
    stats = counter_for(bootstrap, audit_topic, prefix, flush_interval_s=3600).run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 60, "it ran until max_seconds: caught up only at a flush"
    assert stats.counted == 2_000
    assert counted(bootstrap, audit_topic) == dict(expected)


def test_a_run_until_caught_up_with_nothing_new_returns_at_once(local_clusters, topic_factory, unique_name):
    """Nothing new since the group's last commit, an hour between flushes: the run ends at once, not at
    its first flush or at max_seconds."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("nothing-new")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    expected = produce_plain(bootstrap, [topic], 300, windows=2, partitions=2)
    counter_for(bootstrap, audit_topic, prefix, flush_interval_s=3600).run(until_caught_up=True, max_seconds=60)

    began = time.monotonic()
    stats = counter_for(bootstrap, audit_topic, prefix, flush_interval_s=3600).run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 30, "it ran until max_seconds: caught up only at a flush"
    assert stats.counted == 0
    assert counted(bootstrap, audit_topic) == dict(expected)


def test_a_run_until_caught_up_with_no_topic_to_count_returns_at_once(local_clusters, unique_name):
    """`kaudit count --until-caught-up` on a cluster where no topic is selected: with nothing to read it has
    caught up, and ends after its first topic refresh, not at max_seconds."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("no-topic")

    began = time.monotonic()
    stats = counter_for(bootstrap, f"{prefix}-audit", prefix, flush_interval_s=3600).run(
        until_caught_up=True, max_seconds=60
    )

    assert time.monotonic() - began < 30, "it ran until max_seconds: nothing to read was not caught up"
    assert stats.counted == 0 and stats.aborts == 0


def test_status_records_report_positions_lag_and_watermark(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("status")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    produce_plain(bootstrap, [topic], 500, windows=2, partitions=2)

    counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)

    records, _ = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    status = [r for r in records if r.kind == Kind.STATUS]
    assert status, "no status record written"
    last = status[-1]
    assert last.topic == topic and last.tier == "dc1"
    assert sorted(p.partition for p in last.partitions) == [0, 1]
    assert sum(p.position for p in last.partitions) == 500
    assert all(p.lag == 0 and p.end_offset == p.position for p in last.partitions)
    assert last.watermark_ms is not None and last.watermark_ms > BASE_MS


def test_two_instances_and_a_rebalance_mid_stream_stay_exact(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("group")
    topics = [topic_factory("dc1", partitions=6, name=f"{prefix}-{i}") for i in range(2)]
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    group = f"g-{prefix}"
    expected: Counter = Counter()

    handed_over = threading.Event()

    def produce_until_handed_over() -> threading.Thread:
        """Batches until the second instance has taken everything over, then one more (at most 60 in
        all), so both rebalances happen while messages flow however fast or slow this machine is."""

        def work():
            for batch in range(60):
                was_handed_over = handed_over.is_set()
                expected.update(produce_plain(bootstrap, topics, 2000, windows=5, partitions=6, seed=batch))
                if was_handed_over:
                    return

        thread = threading.Thread(target=work)
        thread.start()
        return thread

    first = counter_for(bootstrap, audit_topic, prefix, instance="a", group=group, flush_interval_s=0.3)
    second = counter_for(bootstrap, audit_topic, prefix, instance="b", group=group, flush_interval_s=0.3)
    runners = [threading.Thread(target=counter.run, kwargs={"max_seconds": 180}) for counter in (first, second)]
    runners[0].start()
    producing = produce_until_handed_over()
    wait_for(lambda: first.stats.counted > 0, "the first instance to count")
    runners[1].start()  # joins the group while messages flow: a rebalance
    wait_for(lambda: second.progress and second.stats.counted > 0, "the second instance to get partitions and count")
    first.stop()  # leaves: after its session times out, the second takes everything over
    runners[0].join(60)
    assert producing.is_alive(), "the producer stops only once the takeover is done"
    handed_over.set()
    producing.join(180)
    second.stop()
    runners[1].join(60)
    assert first.stats.counted > 0 and second.stats.counted > 0

    counter_for(bootstrap, audit_topic, prefix, instance="c", group=group).run(until_caught_up=True, max_seconds=60)

    assert counted(bootstrap, audit_topic) == dict(expected)


def test_kill_minus_nine_at_random_moments_changes_no_count(local_clusters, topic_factory, unique_name, tmp_path):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("crash")
    topics = [topic_factory("dc1", partitions=6, name=f"{prefix}-{i}") for i in range(3)]
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    config = tmp_path / "kaudit.toml"
    config.write_text(
        f'state_dir = "{tmp_path}"\naudit_topic = "{audit_topic}"\nflush_interval_s = 0.2\n'
        f'[topics]\ninclude = ["^{prefix}-[0-9]+$"]\n'
        f'[[clusters]]\nname = "dc1"\nbootstrap_servers = "{bootstrap}"\n'
    )
    expected: Counter = Counter()
    producing = threading.Thread(
        target=lambda: [
            expected.update(produce_plain(bootstrap, topics, 5000, windows=5, partitions=6, seed=s)) for s in range(8)
        ]
    )
    producing.start()
    command = [
        sys.executable,
        "-m",
        "audit.cli",
        "--config",
        str(config),
        "count",
        "--cluster",
        "dc1",
        "--topic-refresh-s",
        "1",
    ]
    rng = random.Random(7)
    kills = 0
    while kills < 5 or producing.is_alive():
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
        time.sleep(rng.uniform(1.5, 4.0))
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        kills += 1
    producing.join()

    final = subprocess.run(command + ["--until-caught-up"], capture_output=True, text=True, timeout=180)
    assert final.returncode == 0, final.stderr[-2000:]

    assert kills >= 5
    got = counted(bootstrap, audit_topic)
    if got != dict(expected):
        print(diagnose(bootstrap, audit_topic, topics, "kaudit-counter-dc1"))
        print(final.stderr[-5000:])
    assert got == dict(expected)


def diagnose(bootstrap: str, audit_topic: str, topics: list[str], group: str) -> str:
    """Per partition: end offset, the group's committed offset, and what the audit records counted."""
    from confluent_kafka import Consumer, TopicPartition

    records, _ = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    per_partition: Counter = Counter()
    for record in records:
        if record.kind == Kind.COUNT and record.by_partition:
            for partition, count in record.by_partition.items():
                per_partition[(record.topic, partition)] += count
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    lines = []
    for topic in topics:
        tps = [TopicPartition(topic, p) for p in range(6)]
        for tp in consumer.committed(tps, timeout=10):
            end = watermarks(consumer, topic, tp.partition)[1]
            lines.append(
                f"{topic}[{tp.partition}] end={end} committed={tp.offset} counted={per_partition[(topic, tp.partition)]}"
            )
    consumer.close()
    return "\n".join(lines)


def test_missing_and_garbage_timestamps_are_counted_and_flagged(
    local_clusters, topic_factory, unique_name, counting_loop
):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("time")
    log_append = topic_factory("dc1", name=f"{prefix}-append", config={"message.timestamp.type": "LogAppendTime"})
    create_time = topic_factory("dc1", name=f"{prefix}-create")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    header_ms = BASE_MS + 3 * WINDOW_MS + 1234
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(log_append, value=b"no header")
    producer.produce(log_append, value=b"garbage header", headers=[(AUDIT_TIME_HEADER, b"not-a-number")])
    producer.produce(log_append, value=b"good header", headers=[(AUDIT_TIME_HEADER, str(header_ms).encode())])
    producer.produce(
        create_time, value=b"garbage header", timestamp=BASE_MS + 5, headers=[(AUDIT_TIME_HEADER, b"\xff\xfe")]
    )
    assert producer.flush(10) == 0

    counter = counter_for(bootstrap, audit_topic, prefix)
    stats = counter.run(until_caught_up=True, max_seconds=60)

    assert stats.counted == 4
    records, _ = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    counts = counts_by_window(records, "dc1")
    no_timestamp = counts_by_window(records, "dc1", "no_timestamp")
    assert counts[(log_append, BASE_MS + 3 * WINDOW_MS)] == 1  # the header's window, not the broker's clock
    assert counts[(create_time, BASE_MS)] == 1  # CreateTime wins over a garbage header
    assert sum(counts.values()) == 4
    assert sum(no_timestamp.values()) == 2  # the two log-append messages without a usable header


def test_producer_and_counter_tiers_agree_on_100k_messages(local_clusters, topic_factory, unique_name):
    """Invariant 1 for the first two tiers: with no fault, the cluster counts what the producer counted."""
    from producers.audited import AuditedProducer
    from producers.loadgen import generate

    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("agree")
    topics = [topic_factory("dc1", partitions=6, name=f"{prefix}-{i}") for i in range(3)]
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    with AuditedProducer(
        config={"bootstrap.servers": bootstrap, "linger.ms": 20},
        cluster="dc1",
        audit_topic=audit_topic,
        flush_interval_s=1.0,
    ) as producer:
        stats = generate(producer, topics, count=100_000, backfill_hours=1, seed=11)

    counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=180)

    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == [] and stats.acked == 100_000
    producer_counts = counts_by_window(records, "producer")
    assert producer_counts == dict(stats.acked_by_window)
    assert counts_by_window(records, "dc1") == producer_counts
    assert counts_by_window(records, "dc1", "bytes") == counts_by_window(records, "producer", "bytes")
    assert len({window for _topic, window in producer_counts}) >= 5
