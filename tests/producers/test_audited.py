"""The audited producer against a real broker: it counts exactly what was acknowledged."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer

from audit.contract.record import AUDIT_TIME_HEADER, Kind
from audit.contract.windows import window_start
from audit.io.audit_log import counts_by_window, read_audit_topic
from producers.audited import AuditedProducer
from producers.loadgen import generate

pytestmark = pytest.mark.kafka

WINDOW_MS = 600_000


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


def test_stamps_the_audit_time_header_and_calls_the_users_callback(local_clusters, topic_factory, unique_name):
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
    assert message.headers() == [("app", b"1"), (AUDIT_TIME_HEADER, b"1700000123456")]
    assert message.timestamp()[1] == 1_700_000_123_456


def audit_time_headers(bootstrap: str, topic: str, group: str, expected: int) -> list[bytes | None]:
    """The `kaudit-time` header of each message of `topic` (None where absent), in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found = []
    deadline = time.monotonic() + 30
    while len(found) < expected and time.monotonic() < deadline:
        for message in consumer.consume(500, 1):
            found.append((message.offset(), dict(message.headers() or []).get(AUDIT_TIME_HEADER)))
    consumer.close()
    assert len(found) == expected
    return [header for _offset, header in sorted(found)]


def test_the_audit_time_header_goes_where_the_topic_uses_log_append_time(local_clusters, topic_factory, unique_name):
    """DESIGN: the header is the audit time where a topic uses LogAppendTime; on CreateTime topics the
    timestamp is, and the producer stops stamping once an acknowledgement shows the topic keeps it."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    log_append = topic_factory("dc1", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    create_time = topic_factory("dc1", partitions=1)
    audit_topic = topic_factory("dc1")
    with producer_for(bootstrap, audit_topic) as producer:
        for batch in range(3):
            for i in range(5):
                for topic in (log_append, create_time):
                    producer.produce(topic, value=b"v", timestamp=1_700_000_000_000 + batch * WINDOW_MS + i)
            producer.flush(10)  # acknowledged: the producer now knows each topic's timestamp type

    stamped = audit_time_headers(bootstrap, log_append, unique_name("g"), 15)
    assert stamped == [b"%d" % (1_700_000_000_000 + b * WINDOW_MS + i) for b in range(3) for i in range(5)]
    plain = audit_time_headers(bootstrap, create_time, unique_name("g"), 15)
    assert plain[5:] == [None] * 10, "a CreateTime topic needs no header once its first acknowledgement came"
    counts = counts_by_window(records_of(bootstrap, audit_topic), "producer")
    for topic in (log_append, create_time):
        assert [counts[(topic, 1_699_999_800_000 + b * WINDOW_MS)] for b in range(3)] == [5, 5, 5]


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

    records = records_of(bootstrap, audit_topic)
    window = window_start(ts, 10)
    assert counts_by_window(records, "producer") == {(good, window): 1, (missing, window): 0}
    assert counts_by_window(records, "producer", "send_failed") == {(good, window): 0, (missing, window): 3}


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


def test_undelivered_audit_record_is_retried_under_the_same_id(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    audit_topic = unique_name("audit-later")  # does not exist yet: the first emission fails
    producer = AuditedProducer(
        config={"bootstrap.servers": bootstrap},
        cluster="dc1",
        audit_topic=audit_topic,
        extra_config={"message.timeout.ms": 1500},
    )
    producer.produce(topic, value=b"v", timestamp=1_700_000_000_000)
    producer.flush(10)
    assert len(producer._unacked) == 1
    first_id = next(iter(producer._unacked))

    topic_factory("dc1", name=audit_topic)
    producer.close()

    records = records_of(bootstrap, audit_topic)
    assert [r.record_id for r in records] == [first_id]
    assert records[0].count == 1
