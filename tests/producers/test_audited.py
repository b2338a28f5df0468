"""The audited producer against a real broker: it counts exactly what was acknowledged."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer

from audit.contract.record import Kind
from audit.contract.windows import window_length_ms, window_start
from audit.io.audit_log import counts_by_window, read_audit_topic
from producers.audited import AuditedProducer
from producers.loadgen import generate
from tests.audit.hops.test_counter import counter_for

pytestmark = pytest.mark.kafka

WINDOW_MS = window_length_ms()


def producer_for(bootstrap: str, audit_topic: str, **options) -> AuditedProducer:
    return AuditedProducer(
        config={"bootstrap.servers": bootstrap, "linger.ms": 5},
        cluster="dc1",
        audit_topic=audit_topic,
        service="test",
        **options,
    )


def records_of(bootstrap: str, audit_topic: str):
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    return records


def test_counts_exactly_what_was_acknowledged_per_topic_and_window(local_clusters, topic_factory):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topics = [topic_factory("dc1", partitions=3) for _ in range(2)]
    audit_topic = topic_factory("dc1")
    with producer_for(bootstrap, audit_topic) as producer:
        stats = generate(producer, topics, count=20_000, backfill_hours=2, seed=3)

    assert stats.acked == 20_000 and stats.failed == 0
    assert len(stats.acked_by_window) >= 12
    records = records_of(bootstrap, audit_topic)
    assert counts_by_window(records, "producer") == dict(stats.acked_by_window)
    assert all(r.kind == Kind.COUNT and r.tier == "producer" and r.cluster == "dc1" for r in records)
    assert sum(counts_by_window(records, "producer", "bytes").values()) == stats.bytes


def test_sends_what_the_application_gave_and_calls_its_callback(local_clusters, topic_factory, unique_name):
    """Nothing is added to the send path: the message, its headers and timestamp go out as given."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic, audit_topic = topic_factory("dc1"), topic_factory("dc1")
    delivered = []
    with producer_for(bootstrap, audit_topic) as producer:
        producer.produce(
            topic,
            value=b"v",
            headers=[("app", b"1")],
            timestamp=1_700_000_123_456,
            on_delivery=lambda err, msg: delivered.append((err, msg.topic())),
        )
    assert delivered == [(None, topic)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = None
    deadline = time.monotonic() + 30
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(1)
    consumer.close()
    assert message.headers() == [("app", b"1")]
    assert message.timestamp()[1] == 1_700_000_123_456
    assert counts_by_window(records_of(bootstrap, audit_topic), "producer") == {
        (topic, window_start(1_700_000_123_456, 10)): 1
    }


def test_a_log_append_time_topic_is_counted_where_the_counter_counts_it(local_clusters, topic_factory):
    """DESIGN: on a LogAppendTime topic the broker's time is the audit time of a message without a header; the
    acknowledgement carries it, so the producer tier's windows are the counter's."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    log_append = topic_factory("dc1", partitions=2, config={"message.timestamp.type": "LogAppendTime"})
    audit_topic = topic_factory("dc1")
    with producer_for(bootstrap, audit_topic) as producer:
        for i in range(200):
            producer.produce(log_append, value=b"v", timestamp=1_700_000_000_000 + i)
    produced = counts_by_window(records_of(bootstrap, audit_topic), "producer")
    assert sum(produced.values()) == 200 and all(start > 1_700_000_000_000 + WINDOW_MS for _t, start in produced)
    counter_topic = topic_factory("dc1")
    counter = counter_for(bootstrap, counter_topic, log_append)
    try:
        counter.run(until_caught_up=True)
    finally:
        counter.close()
    assert counts_by_window(records_of(bootstrap, counter_topic), "dc1") == produced


def test_failed_sends_count_as_send_failed_not_as_count(local_clusters, topic_factory):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    good, audit_topic = topic_factory("dc1"), topic_factory("dc1")
    missing = f"{good}-does-not-exist"  # auto-create is off on the test brokers
    ts = 1_700_000_000_000
    with AuditedProducer(
        config={"bootstrap.servers": bootstrap},
        cluster="dc1",
        audit_topic=audit_topic,
        extra_config={"message.timeout.ms": 2000},
    ) as producer:
        for _ in range(3):
            producer.produce(missing, value=b"lost", timestamp=ts)
        producer.produce(good, value=b"kept", timestamp=ts)

    failed_at = {window_start(time.time_ns() // 1_000_000 - lag, 10) for lag in (0, 10_000)}
    records = records_of(bootstrap, audit_topic)
    window = window_start(ts, 10)
    counted = counts_by_window(records, "producer")
    failed = counts_by_window(records, "producer", "send_failed")
    # librdkafka gives no timestamp with a failed delivery: a failure is in the window it failed in.
    ((missing_key, missing_count),) = [(key, n) for key, n in counted.items() if key[0] == missing]
    assert counted[(good, window)] == 1 and missing_count == 0 and missing_key[1] in failed_at
    assert failed == {(good, window): 0, missing_key: 3}


def test_concurrent_threads_are_counted_exactly(local_clusters, topic_factory):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic, audit_topic = topic_factory("dc1", partitions=3), topic_factory("dc1")
    producer = producer_for(bootstrap, audit_topic, flush_interval_s=0.05)
    expected: Counter = Counter()
    warm_up = generate(producer, [topic], count=1, seed=99)  # the idempotent producer id is in hand
    expected.update(warm_up.acked_by_window)
    lock = threading.Lock()

    def work(seed: int) -> None:
        stats = generate(producer, [topic], count=5000, rate=10_000, backfill_hours=1, seed=seed)
        with lock:
            expected.update(stats.acked_by_window)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    producer.close()
    producer.close()  # a second close is harmless

    records = records_of(bootstrap, audit_topic)
    assert sum(expected.values()) == 20_001
    assert counts_by_window(records, "producer") == dict(expected)
    assert len(records) > len(expected), "short flush interval: several deltas per window expected"


def test_counts_wait_for_an_audit_topic_that_does_not_answer_yet(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    audit_topic = unique_name("audit-later")  # does not exist yet: the first emission is not delivered
    producer = AuditedProducer(config={"bootstrap.servers": bootstrap}, cluster="dc1", audit_topic=audit_topic)
    producer.produce(topic, value=b"v", timestamp=1_700_000_000_000)
    assert producer.flush(10) == 0
    assert producer.emit(1) == 1, "one count record waits for the audit topic"

    topic_factory("dc1", name=audit_topic)
    assert producer.emit(30) == 0
    producer.close()

    records = records_of(bootstrap, audit_topic)
    assert len(records) == 1 and records[0].count == 1
