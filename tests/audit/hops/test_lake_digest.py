"""The lake job's content digest: each (topic, window, partition) of a landed micro-batch carries the digest of its
messages, equal to `audit.contract.digest.digest_of` over the same messages; in Spark alone, and end to end from
a real topic through the lake job into its count records."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime

import pytest

from audit.contract.digest import digest_of, merge
from audit.contract.record import Kind, count_record, encode, parse, validate
from audit.contract.windows import MS_PER_MINUTE, window_length_ms, window_start
from audit.hops.lake.columns import with_audit_window
from audit.hops.lake.hop import WindowCounts, batch_groups, record_digests

WINDOW_MINUTES = 10
NOW_MS = int(datetime(2025, 3, 4, 12, 3, tzinfo=UTC).timestamp() * 1000)
FIRST_WINDOW_MS = window_start(NOW_MS, WINDOW_MINUTES) - 2 * window_length_ms(WINDOW_MINUTES)

# (topic, partition, minute after the first window's start, key, value): nulls, empty values, one window each
# side of a boundary, two topics and partitions, and two messages with the same content in one partition.
MESSAGES = [
    ("orders", 0, 1, b"k1", b"v1"),
    ("orders", 0, 2, None, b"no key"),
    ("orders", 0, 3, b"tomb", None),
    ("orders", 0, 4, b"k1", b"v1"),
    ("orders", 1, 5, b"", b""),
    ("orders", 1, 9, b"k2", b"x" * 100),
    ("orders", 1, 11, b"k3", b"next window"),
    ("payments", 0, 12, None, None),
    ("payments", 2, 15, b"p", "ü".encode()),
]


def kafka_source_frame(spark, messages):
    """Rows shaped as Spark's Kafka source gives them (BINARY key and value, CreateTime timestamps)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    rows = [
        (key, value, topic, partition, offset, datetime.fromtimestamp(_time_ms(minute) / 1000, UTC), 0, [])
        for offset, (topic, partition, minute, key, value) in enumerate(messages)
    ]
    return spark.createDataFrame(rows, schema)


def _time_ms(minute: int) -> int:
    return FIRST_WINDOW_MS + minute * MS_PER_MINUTE


def expected_digests(messages) -> dict[tuple[str, int], dict[int, int]]:
    """digest_of per (topic, window start) and partition: what the lake's count records must carry."""
    grouped: dict[tuple[str, int, int], list] = defaultdict(list)
    for topic, partition, minute, key, value in messages:
        grouped[(topic, window_start(_time_ms(minute), WINDOW_MINUTES), partition)].append((key, value))
    digests: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    for (topic, start, partition), contents in grouped.items():
        digests[(topic, start)][partition] = digest_of(contents)
    return dict(digests)


def fold(groups) -> dict[tuple[str, int], WindowCounts]:
    """The groups summed by (topic, window) as the lake job folds them before writing its records."""
    windows: dict[tuple[str, int], WindowCounts] = {}
    for group in groups:
        start = int(group.window_start.timestamp() * 1000)
        windows.setdefault((group.topic, start), WindowCounts()).add(group)
    return windows


@pytest.mark.spark
def test_a_landed_micro_batch_carries_the_contracts_digest_per_partition(spark):
    rows = with_audit_window(kafka_source_frame(spark, MESSAGES), WINDOW_MINUTES, NOW_MS)
    windows = fold(batch_groups(rows, NOW_MS).collect())

    assert {key: entry.digests for key, entry in windows.items()} == expected_digests(MESSAGES)
    assert all(set(entry.digests) == set(entry.partitions) for entry in windows.values())
    # A replay of the batch (Spark replays the offsets it logged) holds the same messages: the same digests.
    again = fold(batch_groups(rows, NOW_MS + 5_000).collect())
    assert {key: entry.digests for key, entry in again.items()} == expected_digests(MESSAGES)


@pytest.mark.spark
def test_the_lakes_count_record_carries_the_digest_on_the_wire(spark):
    rows = with_audit_window(kafka_source_frame(spark, MESSAGES), WINDOW_MINUTES, NOW_MS)
    (topic, start), entry = sorted(fold(batch_groups(rows, NOW_MS).collect()).items())[0]
    record = count_record(
        record_id="kaudit-lake-aggregate-test:0.0",
        tier="lake",
        cluster="aggregate",
        service="kaudit-lake",
        host="test",
        instance_id="kaudit-lake-aggregate-test",
        topic=topic,
        window_start_ms=start,
        window_minutes=WINDOW_MINUTES,
        count=entry.count,
        bytes=entry.bytes,
        by_partition=entry.partitions,
        digest_by_partition=entry.digests,
        latency_ms=entry.latency,
    )
    assert validate(record) is None
    parsed, reason = parse(encode(record))
    assert reason is None and parsed is not None
    assert dict(parsed.digest_by_partition or {}) == expected_digests(MESSAGES)[(topic, start)]


def test_a_topic_counted_without_a_digest_gets_none_in_the_lakes_records():
    from audit.settings import Settings, TopicSelection

    entry = WindowCounts(count=1, partitions={0: 1}, digests={0: 42})
    settings = Settings.default().replace(topics=TopicSelection(digest_exclude=("^dc1[.]big",)))
    assert record_digests(settings, "dc1.orders", entry) == {0: 42}
    assert record_digests(settings, "dc1.big-blobs", entry) is None


PRODUCED = 300


@pytest.mark.kafka
@pytest.mark.spark
def test_the_lake_jobs_count_records_sum_to_the_digest_of_what_was_produced(spark, settings_factory, topic_factory):
    from confluent_kafka import Producer

    from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
    from audit.io.audit_log import read_audit_topic, unique
    from audit.io.clients import ensure_topics

    settings = settings_factory()
    dc1 = {"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}
    ensure_topics(dc1, {settings.audit_topic: 1})
    topic = topic_factory("dc1", partitions=3)
    now_ms = time.time_ns() // 1_000_000
    sent: dict[tuple[int, int], list] = defaultdict(list)
    producer = Producer({**dc1, "acks": "all"})
    for i in range(PRODUCED):
        key = None if i % 7 == 0 else b"k%d" % i
        value = None if i % 11 == 0 else b"value %d" % i
        stamp = now_ms - (i % 3) * window_length_ms(WINDOW_MINUTES)  # three windows
        producer.produce(topic, key=key, value=value, partition=i % 3, timestamp=stamp)
        sent[(window_start(stamp, settings.window_minutes), i % 3)].append((key, value))
    assert producer.flush(30) == 0

    options = LakeOptions(cluster="dc1", checkpoint=default_checkpoint(settings, "dc1"), status_interval_s=2.0)
    LakeJob(spark, settings, options, lambda t: t == topic).run(until_caught_up=True)

    records, _rejects = read_audit_topic(dc1, settings.audit_topic)
    landed: dict[tuple[int, int], list[int]] = defaultdict(list)
    for record in unique(records):
        if record.kind == Kind.COUNT and record.tier == "lake" and record.topic == topic:
            assert record.digest_by_partition is not None and set(record.digest_by_partition) == set(
                record.by_partition or {}
            ), record
            for partition, digest in record.digest_by_partition.items():
                landed[(record.window_start_ms, partition)].append(digest)
    assert landed, "the lake job wrote no count record of the topic"
    merged = {key: merge(*digests) for key, digests in landed.items()}
    assert merged == {key: digest_of(messages) for key, messages in sent.items()}
