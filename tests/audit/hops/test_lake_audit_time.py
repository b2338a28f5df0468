"""The lake buckets a message by the same audit time as the cluster tiers, on a real broker and Spark.

A topic with LogAppendTime written by a producer that does not audit: the broker replaces each
message's CreateTime with its own time, and no `kaudit-time` header says what the producer meant.
The broker's time is then the only time the message carries: the counter counts it there, flagged
`no_timestamp`, and so must the lake, however late it lands the message."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer

from audit.contract.tables import BRONZE
from audit.contract.windows import window_end, window_start
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
from audit.io import delta_io
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

WINDOW_MINUTES = 1  # the shortest window: the lake runs in a later window than the broker's after at most a minute
MESSAGES = 200
DAY_MS = 86_400_000


def produce_with_old_create_times(bootstrap: str, topic: str) -> None:
    """A plain producer (no audit header) sending CreateTimes three days old, which the broker replaces."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    old_ms = time.time_ns() // 1_000_000 - 3 * DAY_MS
    for i in range(MESSAGES):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, timestamp=old_ms + i, partition=i % 2)
    assert producer.flush(30) == 0


def broker_windows(bootstrap: str, topic: str) -> Counter:
    """Messages per window of the time the broker gave them: what every tier must count."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"truth-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    windows: Counter = Counter()
    deadline = time.monotonic() + 30
    while sum(windows.values()) < MESSAGES and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is None:
                kind, when = message.timestamp()
                assert kind == TIMESTAMP_LOG_APPEND_TIME
                windows[(topic, window_start(when, WINDOW_MINUTES))] += 1
    consumer.close()
    assert sum(windows.values()) == MESSAGES
    return windows


def count_on_dc1(settings, topic: str) -> None:
    options = CounterOptions(
        cluster="dc1",
        audit_topic=settings.audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=1.0,
        group_id=f"counter-{settings.audit_topic}",
        topic_refresh_s=2.0,
    )
    config = {"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}
    ClusterCounter(config, options, lambda t: t == topic).run(until_caught_up=True, max_seconds=120)


def land_from_dc1(spark, settings, topic: str) -> None:
    options = LakeOptions(cluster="dc1", checkpoint=default_checkpoint(settings, "dc1"), status_interval_s=2.0)
    LakeJob(spark, settings, options, lambda t: t == topic).run(until_caught_up=True)


def test_a_log_append_time_topic_without_the_header_lands_in_the_counters_windows(
    spark, settings_factory, topic_factory
):
    settings = settings_factory(window_minutes=WINDOW_MINUTES)
    dc1 = settings.cluster("dc1").bootstrap_servers
    ensure_topics({"bootstrap.servers": dc1}, {settings.audit_topic: 1})
    topic = topic_factory("dc1", partitions=2, config={"message.timestamp.type": "LogAppendTime"})
    produce_with_old_create_times(dc1, topic)
    truth = broker_windows(dc1, topic)
    last_window_end = window_end(max(start for _topic, start in truth), WINDOW_MINUTES)
    time.sleep(max(0.0, (last_window_end - time.time_ns() // 1_000_000) / 1000) + 1)  # the broker's windows are past

    count_on_dc1(settings, topic)
    land_from_dc1(spark, settings, topic)

    records, _ = read_audit_topic({"bootstrap.servers": dc1}, settings.audit_topic)
    assert counts_by_window(records, "dc1") == dict(truth), "the counter buckets by the broker's time"
    assert counts_by_window(records, "lake") == dict(truth), "the lake must bucket by the same time"
    assert counts_by_window(records, "lake", "no_timestamp") == dict(truth), "and flag it as no producer time"
    bronze = delta_io.read_table(spark, lake_of(settings), BRONZE.name).where(f"topic = '{topic}'")
    differing = bronze.where("audit_time != timestamp").count()
    assert differing == 0, f"{differing} rows of bronze hold an audit time other than the broker's"
