"""The audited producer against a real broker (CreateTime topics, which librdkafka's mock cluster cannot
show): what it remembers per topic stays within MAX_TOPICS on both produce paths, and a timestamp that is
no audit time still reaches every tier with the time the producer counted it at."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from audit.contract.audit_time import audit_time
from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS
from audit.contract.windows import window_start
from producers import audited
from producers.audited import AuditedProducer

pytestmark = pytest.mark.kafka

PATHS = pytest.mark.parametrize("native", [True, False], ids=["C", "Python"])


def audited_producer(bootstrap: str, audit_topic: str, native: bool, monkeypatch) -> AuditedProducer:
    if native and audited.native_module is None:
        pytest.skip("the native produce path is not built")
    if not native:
        monkeypatch.setattr(audited, "native_module", None)
    return AuditedProducer(
        config={"bootstrap.servers": bootstrap}, cluster="dc1", audit_topic=audit_topic, flush_interval_s=3600
    )


def remembered(producer: AuditedProducer) -> int:
    """How many topics' timestamp types the producer's path keeps."""
    return producer._native.topics() if producer._native is not None else len(producer._create_time_topics)


@PATHS
def test_the_topics_whose_timestamp_type_is_kept_stay_within_max_topics(
    local_clusters, topic_factory, monkeypatch, native
):
    monkeypatch.setattr(audited, "MAX_TOPICS", 3)
    producer = audited_producer(local_clusters["dc1"].bootstrap_servers, topic_factory("dc1"), native, monkeypatch)
    topics = [topic_factory("dc1") for _ in range(8)]
    kept = []
    for _round in range(2):
        for topic in topics:
            producer.produce(topic, value=b"v")
            assert producer.flush(30) == 0  # acknowledged, drained and emitted
            kept.append(remembered(producer))
    producer.close()
    assert max(kept) == 3, f"CreateTime learned and kept for at most MAX_TOPICS topics: {kept}"


@PATHS
def test_a_timestamp_that_is_no_audit_time_sends_the_audit_time_in_the_header(
    local_clusters, topic_factory, monkeypatch, native
):
    """On a topic already known to keep CreateTime, where a usable timestamp travels without the header."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    producer = audited_producer(bootstrap, topic_factory("dc1"), native, monkeypatch)
    producer.produce(topic, value=b"learn", partition=0)
    assert producer.flush(30) == 0 and remembered(producer) == 1
    before = time.time_ns() // 1_000_000
    for timestamp in (1_700_000_000_123, MAX_AUDIT_TIME_MS + 1, 2**53):
        producer.produce(topic, value=b"%d" % timestamp, partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0
    after = time.time_ns() // 1_000_000
    producer.close()

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 1)])
    messages = []
    while len(messages) < 3:
        messages += [m for m in consumer.consume(3, timeout=10) if m.error() is None]
    consumer.close()
    usable, *unusable = messages
    assert AUDIT_TIME_HEADER not in dict(usable.headers() or []), "a usable CreateTime needs no header here"
    assert audit_time(usable.timestamp(), usable.headers(), 0) == (1_700_000_000_123, True)
    for message in unusable:
        assert message.timestamp()[1] == int(message.value()), "the timestamp is sent as given"
        when, is_usable = audit_time(message.timestamp(), message.headers(), 0)
        assert is_usable and before <= when <= after, "every tier reads the time the producer counted it at"
    assert {window_start(before), window_start(after)} >= {window_start(when)}
