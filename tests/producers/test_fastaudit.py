"""The native produce path against the Python one, on librdkafka's in-process mock cluster (no JVM):
the same deltas for any sequence of messages, drains while messages are in flight, bounded entries,
and confluent-kafka's produce() behaviour kept (callbacks, errors, a closed producer)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.tally import latency_floor
from producers import audited
from producers.audited import AuditedProducer

pytestmark = pytest.mark.skipif(audited.native_module is None, reason="the native produce path is not built")

WINDOW_MS = 600_000
MOCK = {"test.mock.num.brokers": 1, "log_level": 2}  # its topics get 4 partitions


def mock_producer(native: bool, **config) -> AuditedProducer:
    module = audited.native_module
    try:
        if not native:
            audited.native_module = None
        return AuditedProducer(config={**MOCK, **config}, cluster="dc1", service="t", flush_interval_s=3600)
    finally:
        audited.native_module = module


def totals(drains: list[dict]) -> dict:
    """The drains summed by (topic, window): what reaches the audit records in the end."""
    summed: dict = {}
    for drained in drains:
        for key, w in drained.items():
            count, size, failed, partitions, latencies = summed.get(key, (0, 0, 0, {}, 0))
            for partition, n in w.by_partition.items():
                partitions[partition] = partitions.get(partition, 0) + n
            summed[key] = (
                count + w.count,
                size + w.bytes,
                failed + w.send_failed,
                partitions,
                latencies + sum(w.latency_histogram.values()),
            )
    return summed


messages = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "ü"]),
        st.sampled_from([1, WINDOW_MS - 1, WINDOW_MS, 1_700_000_000_000, 0]),  # 0: now
        st.none() | st.binary(max_size=4) | st.text(max_size=3),
        st.none() | st.binary(max_size=20),
        st.sampled_from([-1, 0, 3]),
        st.none() | st.just([("app", b"1")]) | st.just({"app": None}),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=5, deadline=None)
@given(messages, st.integers(0, 60))
def test_native_and_python_count_the_same(sent, drain_at):
    # librdkafka puts a message with no (or an empty) key and no partition where it likes: pin those
    sent = [(t, ts, k, v, 0 if not k and p == -1 else p, h) for t, ts, k, v, p, h in sent]
    results = []
    for native in (True, False):
        producer = mock_producer(native)
        drains = []
        for i, (topic, timestamp, key, value, partition, headers) in enumerate(sent):
            if i == drain_at:
                drains.append(producer._drain())  # messages still in flight: they land in a later drain
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=timestamp, headers=headers)
        assert producer.producer.flush(10) == 0
        drains.append(producer._drain())
        results.append(totals(drains))
    assert results[0] == results[1]
    assert sum(count for count, *_ in results[0].values()) == len(sent)


def test_counts_bytes_partitions_and_latency_of_what_was_acknowledged():
    producer = mock_producer(True)
    for i in range(10):
        producer.produce("t", value=b"v" * 10, key=b"k", partition=i % 2, timestamp=WINDOW_MS + 5)
    assert producer.producer.flush(10) == 0
    window = producer._drain()[("t", WINDOW_MS)]
    assert (window.count, window.bytes, window.send_failed, window.by_partition) == (10, 110, 0, {0: 5, 1: 5})
    assert sum(window.latency_histogram.values()) == 10
    assert all(latency == latency_floor(latency) for latency in window.latency_histogram)


def test_an_acknowledgement_after_a_drain_lands_in_the_next_one_and_entries_stay_bounded():
    producer = mock_producer(True)
    for i in range(100):
        producer.produce("t", value=b"v", timestamp=1 + i * WINDOW_MS)
    first = producer._drain()  # before any acknowledgement: nothing counted, every entry kept
    assert first == {} and producer._native.entries() == 100
    assert producer.producer.flush(10) == 0
    assert len(producer._drain()) == 100
    assert producer._native.entries() == 0, "memory is bounded by the windows in flight, not by messages"


def test_the_users_callbacks_see_every_report_and_the_configs_on_delivery_is_the_default():
    by_message, by_config = [], []
    producer = mock_producer(True, on_delivery=lambda err, msg: by_config.append((err, msg.value())))
    producer.produce("t", value=b"mine", on_delivery=lambda err, msg: by_message.append((err, msg.value())))
    producer.produce("t", value=b"theirs", callback=lambda err, msg: by_message.append((err, msg.value())))
    producer.produce("t", value=b"default")
    assert producer.producer.flush(10) == 0
    assert sorted(by_message) == [(None, b"mine"), (None, b"theirs")]
    assert by_config == [(None, b"default")]
    assert producer._drain()  # counted as well


def test_an_exception_in_the_users_callback_comes_out_of_flush():
    producer = mock_producer(True)

    def boom(err, msg):
        raise RuntimeError("boom")

    producer.produce("t", value=b"v", callback=boom)
    with pytest.raises(RuntimeError, match="boom"):
        producer.producer.flush(10)


def test_bad_arguments_and_unknown_partitions_raise_like_confluent_kafka_and_count_nothing():
    producer = mock_producer(True)
    producer.produce("t", value=b"warm")
    producer.producer.flush(10)  # the topic's metadata: 4 partitions
    producer._drain()
    with pytest.raises(TypeError, match="value must be bytes"):
        producer.produce("t", value=1)
    with pytest.raises(TypeError, match="topic"):
        producer.produce(value=b"v")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        producer.produce("t", colour=1)
    with pytest.raises(TypeError, match="header"):
        producer.produce("t", headers=[("k",)])
    with pytest.raises(KafkaException, match="Unknown partition"):
        producer.produce("t", value=b"v", partition=99)
    producer.producer.flush(10)
    assert producer._drain() == {}


def test_it_binds_only_to_a_producer_made_with_its_interceptor():
    tally = audited.native_module.Tally(WINDOW_MS)
    plain = Producer(MOCK)
    with pytest.raises(RuntimeError, match="plugin.library.paths"):
        tally.bind(plain, None, lambda: None, audited.produce_error, 1, 0.1)
    with pytest.raises(RuntimeError, match="not an open confluent-kafka Producer"):
        tally.bind(object(), None, lambda: None, audited.produce_error, 1, 0.1)


def test_a_closed_producer_refuses_to_produce():
    producer = mock_producer(True)
    producer.close()
    producer.producer.close()
    with pytest.raises(RuntimeError, match="closed"):
        producer.produce("t", value=b"v")


class ReportServedMidway(set):
    """The in-flight record ids, whose first lookup lets another thread serve the delivery reports (a poll() on
    an application's other thread) and waits a second for it."""

    def __init__(self, producer: AuditedProducer, ids: set[str]) -> None:
        super().__init__(ids)
        self.producer = producer
        self.server: threading.Thread | None = None

    def __contains__(self, rid: object) -> bool:
        if self.server is None:
            self.server = threading.Thread(target=self.producer.producer.poll, args=(5,))
            self.server.start()
            self.server.join(1.0)
        return super().__contains__(rid)


def test_an_audit_record_acknowledged_while_emit_lists_the_unacknowledged_is_neither_an_error_nor_lost():
    """test_audited.py's four producing threads met it once: an audit record's delivery report, served on another
    thread while emit() went through the records awaiting their ack, raised "dictionary changed size during
    iteration" in the application's produce()."""
    producer = mock_producer(True)
    producer.produce("t", value=b"v", timestamp=WINDOW_MS)
    assert producer.producer.flush(10) == 0
    assert producer.emit() == 1  # the audit record is sent; its delivery report is not served yet
    time.sleep(0.2)  # the mock broker acknowledges it
    producer._in_flight = midway = ReportServedMidway(producer, producer._in_flight)

    assert producer.emit() == 0, "in flight: not sent again"

    assert midway.server is not None
    midway.server.join(10)
    assert producer._unacked == {} and not producer._in_flight, "the acknowledgement was taken once emit() let go"
