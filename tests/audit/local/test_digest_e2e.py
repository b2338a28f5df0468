"""The content digest on real parts: counts that balance while content differs are found as `mismatch`, in the
window and partition where it happened and nowhere else. One byte flipped by the replicator's fault hook; 5
messages lost and 5 others repeated by a copying client of the test's own; an intact topic beside both."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from audit.books.run import reconcile
from audit.contract.tables import COMPLETENESS
from audit.hops.faults import FlipFault
from audit.io import delta_io
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from tests.audit.local.test_pipeline_e2e import PARTITIONS, START, count_cluster, land, mirror, produce

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


def test_a_flipped_byte_and_a_hidden_loss_are_mismatches_only_where_they_happened(
    spark, settings_factory, topic_factory
):
    settings = settings_factory()
    intact, flipped, copied = (topic_factory("dc1", partitions=PARTITIONS) for _ in range(3))
    for topic in (flipped, copied):
        topic_factory("aggregate", partitions=PARTITIONS, name=f"dc1.{topic}")
    replicas = [f"dc1.{topic}" for topic in (intact, flipped, copied)]
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    produce(settings, [intact, flipped, copied], PER_TOPIC)
    count_cluster(settings, "dc1", [intact, flipped, copied])
    fault = FlipFault(f"^{flipped}$", partition=1, window_ms=START, byte_index=-1)
    mirror(settings, [intact, flipped], group=f"mirror-{settings.audit_topic}", fault=fault)
    assert fault.flipped == 1 and fault.flipped_at[1] == 1
    copy_dropping_5_and_repeating_5(settings, copied, partition=2)
    count_cluster(settings, "aggregate", replicas)
    land(spark, settings, replicas)
    reconcile(spark, settings)

    windows = [START + index * 10 * 60_000 for index in range(3)]
    for topic, partition in ((flipped, 1), (copied, 2)):
        books = verdicts(spark, settings, f"dc1.{topic}")
        assert set(books) == {(w, tier) for w in windows for tier in ("dc1", "aggregate", "lake")}, books
        for (window, tier), (status, observed, partitions) in books.items():
            changed = window == START and tier != "dc1"
            expected = ("mismatch", 200, [partition]) if changed else ("complete", 200, None)
            assert (status, observed, partitions) == expected, (topic, window, tier, books)
    intact_books = verdicts(spark, settings, f"dc1.{intact}")
    assert len(intact_books) == 9 and {v[0] for v in intact_books.values()} == {"complete"}, intact_books
