"""The content digest on real parts: counts that balance while content differs are found as `mismatch`, in the
window and partition where it happened and nowhere else. One byte flipped by the replicator's fault hook; 5
messages lost and 5 others repeated by a copying client of the test's own; intact topics beside both, compressed
(lz4, zstd) and copied by Apache MirrorMaker 2, whose digests equal the source's at every tier."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from audit.books.run import reconcile
from audit.contract.tables import COMPLETENESS, TIER_COUNTS
from audit.contract.windows import window_length_ms
from audit.hops.faults import FlipFault
from audit.io import delta_io
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.local.mirrormaker2 import mm2_properties, running_mm2
from tests.audit.local.test_pipeline_e2e import (
    PARTITIONS,
    START,
    count_cluster,
    land,
    mirror,
    produce,
)
from tests.conftest import cache_dir
from tests.traffic import held_by_partition
from tests.waiting import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PER_TOPIC = 600  # 200 per window, spread over the three partitions


def verdicts(spark, settings, logical_topic: str) -> dict[tuple[int, str], tuple]:
    """(window ms, tier) -> (status, observed, mismatched partitions)."""
    frame = delta_io.read_table(spark, lake_of(settings), COMPLETENESS.name).where(f"logical_topic = '{logical_topic}'")
    return {
        (int(row.window_start.timestamp() * 1000), row.tier): (row.status, row.observed, row.mismatched_partitions)
        for row in frame.collect()
    }


def copy_dropping_5_and_repeating_5(settings, topic: str, partition: int) -> None:
    """A copier of the test's own: dc1's `topic` into the aggregate's `dc1.<topic>`, as it is, except that of
    `partition` the first 5 messages are left out and the next 5 sent twice."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.cluster("dc1").bootstrap_servers,
            "group.id": f"copier-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": settings.cluster("aggregate").bootstrap_servers, "acks": "all"})
    consumer.subscribe([topic])
    copied, idle_since = 0, time.monotonic()
    while copied < PER_TOPIC and time.monotonic() - idle_since < 30:
        batch = [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        idle_since = time.monotonic() if batch else idle_since
        for message in batch:
            copied += 1
            lost = message.partition() == partition and message.offset() < 5
            repeated = message.partition() == partition and 5 <= message.offset() < 10
            for _ in range(0 if lost else 2 if repeated else 1):
                producer.produce(
                    f"dc1.{topic}",
                    message.value(),
                    message.key(),
                    partition=message.partition(),
                    timestamp=message.timestamp()[1],
                    headers=message.headers(),
                )
    consumer.close()
    assert copied == PER_TOPIC and producer.flush(30) == 0


def digests(spark, settings, logical_topic: str) -> dict[tuple[int, str], dict[int, int]]:
    """(window ms, tier) -> the tier's content digest per partition."""
    frame = delta_io.read_table(spark, lake_of(settings), TIER_COUNTS.name).where(f"logical_topic = '{logical_topic}'")
    return {
        (int(row.window_start.timestamp() * 1000), row.tier): dict(row.digest_by_partition or {})
        for row in frame.collect()
    }


def mirrormaker_2(settings, topics: list[str], folder):
    """Apache MirrorMaker 2 copying `topics` from dc1 to the aggregate (`dc1.<topic>`, as our prefix naming),
    its producer compressing with gzip, whatever the source's codec: every batch is written anew."""
    bootstrap = {name: settings.cluster(name).bootstrap_servers for name in ("dc1", "aggregate")}
    properties = mm2_properties(bootstrap, "dc1", "aggregate", "|".join(f"^{t}$" for t in topics))
    properties["aggregate.producer.compression.type"] = "gzip"
    return running_mm2(folder, "mm2", properties, "aggregate", cache_dir())


def copied_to_aggregate(settings, topics: list[str]) -> bool:
    aggregate = settings.cluster("aggregate").bootstrap_servers
    try:
        return all(sum(held_by_partition(aggregate, f"dc1.{t}", PARTITIONS).values()) == PER_TOPIC for t in topics)
    except KafkaException:  # a topic MirrorMaker 2 has not created yet: nothing copied
        return False


def test_a_flipped_byte_and_a_hidden_loss_are_mismatches_only_where_they_happened(
    spark, settings_factory, topic_factory, tmp_path
):
    settings = settings_factory()
    intact, flipped, copied = (topic_factory("dc1", partitions=PARTITIONS) for _ in range(3))
    by_mm2 = [topic_factory("dc1", partitions=PARTITIONS, config={"compression.type": c}) for c in ("lz4", "zstd")]
    for topic in (flipped, copied):
        topic_factory("aggregate", partitions=PARTITIONS, name=f"dc1.{topic}")
    replicas = [f"dc1.{topic}" for topic in (intact, flipped, copied, *by_mm2)]
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    with mirrormaker_2(settings, by_mm2, tmp_path) as mm2_log:
        produce(settings, [intact, flipped, copied, *by_mm2], PER_TOPIC)
        count_cluster(settings, "dc1", [intact, flipped, copied, *by_mm2])
        fault = FlipFault(f"^{flipped}$", partition=1, window_ms=START, byte_index=-1)
        mirror(settings, [intact, flipped], group=f"mirror-{settings.audit_topic}", fault=fault)
        assert fault.flipped == 1 and fault.flipped_at[1] == 1
        copy_dropping_5_and_repeating_5(settings, copied, partition=2)
        wait_for(lambda: copied_to_aggregate(settings, by_mm2), f"MirrorMaker 2's copies (log: {mm2_log})", 180)
    count_cluster(settings, "aggregate", replicas)
    land(spark, settings, replicas)
    reconcile(spark, settings)

    windows = [START + index * window_length_ms() for index in range(3)]
    for topic, partition in ((flipped, 1), (copied, 2)):
        books = verdicts(spark, settings, f"dc1.{topic}")
        assert set(books) == {(w, tier) for w in windows for tier in ("dc1", "aggregate", "lake")}, books
        for (window, tier), (status, observed, partitions) in books.items():
            changed = window == START and tier != "dc1"
            expected = ("mismatch", 200, [partition]) if changed else ("complete", 200, None)
            assert (status, observed, partitions) == expected, (topic, window, tier, books)
    for topic in (intact, *by_mm2):
        books = verdicts(spark, settings, f"dc1.{topic}")
        assert len(books) == 9 and {v[0] for v in books.values()} == {"complete"}, (topic, books)
    for topic in by_mm2:  # the same digests, not only no mismatch: producer, dc1, aggregate (MM2's copy), lake
        per_tier = digests(spark, settings, f"dc1.{topic}")
        for window in windows:
            seen = [per_tier[(window, tier)] for tier in ("producer", "dc1", "aggregate", "lake")]
            assert len(seen[0]) == PARTITIONS and all(d == seen[0] for d in seen), (topic, window, seen)
