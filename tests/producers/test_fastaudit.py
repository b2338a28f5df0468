"""The native delivery tally against the Python closures, without a broker: the same deltas for any
sequence of delivery reports, drains in between, and in-flight messages that outlive a drain."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.tally import latency_floor
from producers import audited
from producers.audited import AuditedProducer

pytestmark = pytest.mark.skipif(audited.native_tally_type is None, reason="the native delivery counting is not built")

WINDOW_MS = 600_000


class FakeProducer:
    """Keeps each produced message's callback; `deliver` plays the broker's reports back."""

    def __init__(self):
        self.sent: list[tuple] = []

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None):
        self.sent.append((topic, value, key, partition, on_delivery, timestamp, headers))

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=None):
        return 0


def audited_producer(native: bool) -> AuditedProducer:
    producer = AuditedProducer(config={}, cluster="dc1", service="t", flush_interval_s=3600)
    if not native:
        producer._native = None  # the Python closures
    producer._producer = FakeProducer()
    return producer


def drained(producer: AuditedProducer) -> dict:
    """The drained deltas, latencies as percentiles (the report time differs by a few ms between runs)."""
    return {
        key: (w.count, w.bytes, w.send_failed, dict(w.by_partition), sum(w.latency_histogram.values()))
        for key, w in producer._drain().items()
    }


sends = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "ü"]),
        st.sampled_from([1, WINDOW_MS - 1, WINDOW_MS, 1_700_000_000_000, 0]),  # 0: now
        st.none() | st.binary(max_size=4),
        st.binary(max_size=20),
        st.integers(0, 5),
        st.sampled_from(["ok", "ok", "ok", "failed", "later"]),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(sends, min_size=1, max_size=3))
def test_native_and_python_delivery_counting_give_the_same_deltas(rounds):
    results = []
    for native in (True, False):
        producer = audited_producer(native)
        now_window = time.time_ns() // 1_000_000
        per_round, later = [], []
        for round_ in rounds:
            fake = producer._producer
            for topic, timestamp, key, value, partition, fate in round_:
                producer.produce(topic, value=value, key=key, timestamp=timestamp)
                _t, _v, _k, _p, callback, ts, _h = fake.sent[-1]
                message = Message(topic=topic, partition=partition, key=key, value=value, timestamp=(1, ts))
                if fate == "ok":
                    callback(None, message)
                elif fate == "failed":
                    callback(KafkaError(KafkaError._MSG_TIMED_OUT), Message(topic=topic, key=key, value=value))
                else:
                    later.append((callback, message))
            per_round.append(drained(producer))
        for callback, message in later:  # reports that arrive after the drains
            callback(None, message)
        per_round.append(drained(producer))
        per_round.append(drained(producer))
        results.append((per_round, now_window // WINDOW_MS))
    assert results[0] == results[1]


def test_the_user_callback_is_called_after_counting():
    producer = audited_producer(True)
    seen = []
    producer.produce("t", value=b"v", timestamp=5, on_delivery=lambda err, msg: seen.append((err, msg.topic())))
    callback = producer._producer.sent[-1][4]
    callback(None, Message(topic="t", partition=1, value=b"v", timestamp=(1, 5)))
    assert seen == [(None, "t")]
    window = producer._drain()[("t", 0)]
    assert (window.count, window.bytes, window.by_partition) == (1, 1, {1: 1})
    assert sum(window.latency_histogram.values()) == 1
    assert all(latency == latency_floor(latency) for latency in window.latency_histogram)


def test_an_exception_in_the_user_callback_propagates():
    producer = audited_producer(True)

    def boom(err, msg):
        raise RuntimeError("boom")

    producer.produce("t", value=b"v", timestamp=5, callback=boom)
    with pytest.raises(RuntimeError, match="boom"):
        producer._producer.sent[-1][4](None, Message(topic="t", partition=0, value=b"v"))


def test_entries_are_forgotten_once_drained_with_nothing_in_flight():
    producer = audited_producer(True)
    for i in range(100):
        producer.produce("t", value=b"v", timestamp=1 + i * WINDOW_MS)
    callbacks = [sent[4] for sent in producer._producer.sent]
    producer._producer.sent.clear()
    for i, callback in enumerate(callbacks):
        callback(None, Message(topic="t", partition=0, value=b"v", timestamp=(1, 1 + i * WINDOW_MS)))
    del callback, callbacks
    assert len(producer._drain()) == 100
    assert producer._native.entries() == 0, "memory is bounded by the windows in flight, not by messages"
