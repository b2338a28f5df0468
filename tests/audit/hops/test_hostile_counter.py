"""A real counter fed hostile messages: garbage and huge `kaudit-time` headers, empty values, control
characters in keys, timestamps past year 9999. It keeps counting, writes only valid audit records
and loses nothing else (issue 8, part 2)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from confluent_kafka import Producer

from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS, PROVENANCE_HEADER
from audit.contract.windows import window_length_ms, window_start
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.io.audit_log import counts_by_window, read_audit_topic

pytestmark = pytest.mark.kafka

WINDOW_MINUTES = 10
BASE_MS = window_start(1_763_800_000_000, WINDOW_MINUTES)
GARBAGE_HEADERS = [
    b"",
    b"junk",
    b"-1",
    b"0",
    b"1.7e12",
    b" 1763800000000",
    b"\xff\xfe\x00",
    b"9" * 21,
    str(MAX_AUDIT_TIME_MS + 1).encode(),
    "١٧٦٣٨٠٠٠٠٠٠٠٠".encode(),
    b"1763800000000\n",
]
HOSTILE_KEYS = [None, b"", b"\x00", b"\x1b[2J\r\n", "k\u202e\ufeff".encode(), b"\xff" * 300]


def test_hostile_messages_are_all_counted_and_the_audit_records_stay_valid(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("hostile")
    # LogAppendTime: the broker's clock is no audit time, so the kaudit-time header is read for every message.
    log_append = topic_factory(
        "dc1", partitions=2, name=f"{prefix}-append", config={"message.timestamp.type": "LogAppendTime"}
    )
    # A topic that lets any CreateTime in: year ~318000 reaches the counter.
    any_time = topic_factory("dc1", name=f"{prefix}-anytime", config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    plain = topic_factory("dc1", partitions=2, name=f"{prefix}-plain")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")

    rng = random.Random(8)
    good_header_ms = BASE_MS + 2 * window_length_ms(WINDOW_MINUTES) + 17
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 2_000_000})
    expected: Counter = Counter()
    flagged = 0
    for i in range(600):
        header = rng.choice(GARBAGE_HEADERS + [str(good_header_ms).encode()])
        headers = [(AUDIT_TIME_HEADER, header), (f"h\x00{i % 3}\n", b"\x07"), (PROVENANCE_HEADER, b"\xff,dc1,,")]
        if i % 50 == 0:
            headers.append(("huge", b"z" * 400_000))
        value = rng.choice([None, b"", b"\x00" * 10, "\U0001f525".encode() * 50])
        producer.produce(log_append, key=rng.choice(HOSTILE_KEYS), value=value, headers=headers, partition=i % 2)
        expected[log_append] += 1
        flagged += header != str(good_header_ms).encode()
        if i % 100 == 0:
            producer.flush(30)
    for ts in (10**16, 2**62, MAX_AUDIT_TIME_MS + 1, MAX_AUDIT_TIME_MS):
        producer.produce(any_time, value=b"far future", timestamp=ts, headers=[(AUDIT_TIME_HEADER, b"garbage")])
        expected[any_time] += 1
    flagged += 3  # all but the last: it is exactly 9999-12-31T23:59:59.999Z, a legal time
    for i in range(2000):
        producer.produce(plain, value=b"v%d" % i, timestamp=BASE_MS + i, partition=i % 2)
        expected[plain] += 1
    assert producer.flush(60) == 0

    options = CounterOptions(
        cluster="dc1",
        audit_topic=audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=0.5,
        group_id=f"g-{prefix}",
        topic_refresh_s=1.0,
        by_partition=True,
    )
    counter = ClusterCounter(
        {"bootstrap.servers": bootstrap}, options, lambda topic: topic.startswith(prefix) and topic != audit_topic
    )
    stats = counter.run(until_caught_up=True, max_seconds=90)

    assert stats.counted == sum(expected.values())
    assert stats.aborts == 0
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == [], rejects[:3]  # every record the counter wrote follows the contract
    counts = counts_by_window(records, "dc1")
    by_topic: Counter = Counter()
    for (topic, _start), count in counts.items():
        by_topic[topic] += count
    assert by_topic == expected  # nothing lost, nothing counted twice
    assert counts[(plain, BASE_MS)] == 2000  # the ordinary messages beside the hostile ones: exact
    assert counts[(log_append, window_start(good_header_ms, WINDOW_MINUTES))] >= 600 - flagged
    assert counts[(any_time, window_start(MAX_AUDIT_TIME_MS, WINDOW_MINUTES))] == 1
    assert sum(counts_by_window(records, "dc1", "no_timestamp").values()) == flagged
