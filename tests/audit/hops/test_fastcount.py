"""The counter's two ways of counting a batch, the plugin's (C, in librdkafka's consume path) and the Python
loop, give the same groups: batch by batch, on a real broker, over CreateTime and LogAppendTime topics with
and without kaudit-time headers, keys, nulls and several partitions and windows."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer

from audit.contract.record import AUDIT_TIME_HEADER
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, window_length_ms
from audit.hops.counter import fastcount
from audit.hops.counter.batch import plugin_batch_groups, with_counting_plugin
from audit.hops.counter.hop import ClusterCounter, CounterOptions

WINDOW_MS = window_length_ms()
BASE_MS = (time.time_ns() // 1_000_000 // WINDOW_MS - 3) * WINDOW_MS  # brokers refuse times far ahead


def test_the_plugin_is_built_and_counts_unless_turned_off(monkeypatch):
    """`make setup` builds it; KAUDIT_PURE_PYTHON=1 or a counter told so counts in Python."""
    monkeypatch.delenv(fastcount.PURE_PYTHON_ENV, raising=False)
    assert fastcount.plugin_available()
    config = {"client.id": "c"}
    plugged, instance_id = with_counting_plugin(config, 10, native=True)
    assert instance_id and plugged["kaudit.instance.id"] == instance_id and plugged["kaudit.window.minutes"] == "10"
    assert with_counting_plugin(config, 10, native=False) == (config, None)
    monkeypatch.setenv(fastcount.PURE_PYTHON_ENV, "1")
    assert with_counting_plugin(config, 10, native=True) == (config, None)


def test_a_fatal_consumer_error_raises():
    options = CounterOptions(cluster="dc1")
    counter = ClusterCounter({}, options, lambda topic: True, host="h")
    fatal = Message(topic="t", partition=0, error=KafkaError(KafkaError._FATAL, "boom", fatal=True))
    with pytest.raises(Exception, match="fatal consumer error"):
        counter.count_batch([fatal])


def fill(bootstrap: str, topics: list[str]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed = []
    sent = 0
    for i in range(3000):
        headers = [(AUDIT_TIME_HEADER, b"%d" % (BASE_MS + (i % 7) * 100_000))] if i % 3 == 0 else None
        if i % 11 == 0:
            headers = [(AUDIT_TIME_HEADER, b"not a time")]
        key = None if i % 5 == 0 else b"k%d" % i
        value = None if i % 13 == 0 else f"v{i}é".encode() * (i % 4)
        producer.produce(
            topics[i % len(topics)], key=key, value=value, headers=headers, timestamp=BASE_MS + (i % 5) * 250_000
        )
        sent += 1
    assert producer.flush(30) == 0 and failed == []
    return sent


def without_latencies(groups: dict) -> dict:
    return {key: [*value[:3], *value[4:]] for key, value in groups.items()}


@pytest.mark.kafka
def test_the_plugin_and_the_python_loop_count_every_batch_the_same(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topics = [
        topic_factory("dc1", partitions=3),
        topic_factory("dc1", partitions=2, config={"message.timestamp.type": "LogAppendTime"}),
    ]
    sent = fill(bootstrap, topics)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("g"),
        "auto.offset.reset": "earliest",
        "client.id": "parity",
    }
    plugged, instance_id = with_counting_plugin(config, DEFAULT_WINDOW_MINUTES, native=True)
    consumer = Consumer(plugged)
    consumer.subscribe(topics)
    counted, batches, deadline = 0, 0, time.monotonic() + 60
    try:
        while counted < sent and time.monotonic() < deadline:
            batch = consumer.consume(500, timeout=0.5)
            by_plugin = plugin_batch_groups(instance_id, batch, cluster="dc1")
            assert by_plugin is not None, "the plugin saw every message of the batch"
            now_ms = time.time_ns() // 1_000_000
            by_python = fastcount.count_in_python(batch, now_ms, WINDOW_MS, on_error=lambda m: None)
            assert without_latencies(by_plugin) == without_latencies(by_python)
            assert {k: sum(v[3].values()) for k, v in by_plugin.items()} == {k: v[0] for k, v in by_python.items()}
            counted += sum(value[0] for value in by_plugin.values())
            batches += bool(batch)
    finally:
        consumer.close()
    assert counted == sent and batches >= 2


def test_a_batch_the_plugin_did_not_see_whole_is_the_python_loops(monkeypatch):
    monkeypatch.setattr("audit.hops.counter.batch.take_consumed", lambda instance_id: {"messages": 1, "groups": []})
    plain = Message(topic="t", partition=0, offset=0, value=b"v", timestamp=(1, BASE_MS))
    assert plugin_batch_groups("x", [plain, plain], cluster="dc1") is None
    errored = Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))
    assert plugin_batch_groups("x", [plain, errored], cluster="dc1") == {}
