"""Retention deleting messages before a hop read them (invariant 9): the hop counts exactly the offsets
it skipped, exports and logs them, and carries the gap in its status records. `delete_records` moves a
partition's log start offset exactly as retention does, at once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from audit.contract.naming import PrefixNaming
from audit.contract.record import Kind
from audit.io.audit_log import read_audit_topic
from tests.audit.hops.test_counter import counter_for
from tests.audit.hops.test_replicator import options_for, produce, read_all, replicator

pytestmark = pytest.mark.kafka

PREFIX = PrefixNaming(frozenset({"dc1", "aggregate"}))
BASE_TS_MS = 1_700_000_000_000  # `produce` stamps message i with BASE_TS_MS + i


def delete_before(bootstrap: str, topic: str, offset: int, partition: int = 0) -> None:
    """Move the log start offset of `topic`'s partition to `offset`, as retention would."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures are done
    futures = admin.delete_records([TopicPartition(topic, partition, offset)], request_timeout=30)
    for future in futures.values():
        assert future.result(30).low_watermark == offset


def reported_gaps(bootstrap: str, audit_topic: str, tier: str) -> set[tuple[int, int, int]]:
    """Every (partition, from_offset, to_offset) the status records of `tier` report."""
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    return {
        (g.partition, g.from_offset, g.to_offset)
        for r in records
        if r.kind == Kind.STATUS and r.tier == tier
        for g in r.retention_gaps
    }


def steps_until(hop, condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        hop.step()


def test_a_replicator_restarted_after_retention_passed_its_offset_reports_exactly_the_skipped(
    local_clusters, topic_factory, unique_name
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1")
    options = options_for(unique_name)
    produce(dc1, topic, 100, partitions=1)
    first = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic).run(until_caught_up=True, max_seconds=60)
    assert first.copied_by_topic[topic] == 100 and first.retention_skipped == 0

    produce(dc1, topic, 50, partitions=1)  # offsets 100..149, while the replicator is down
    delete_before(dc1, topic, 130)  # 100..129 gone before it read them
    stats = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic).run(until_caught_up=True, max_seconds=60)

    assert stats.copied_by_topic[topic] == 20
    assert stats.retention_skipped == 30
    assert reported_gaps(dc1, options.audit_topic, "aggregate") == {(0, 100, 130)}
    assert len(read_all(aggregate, f"dc1.{topic}", 120, timeout_s=20)) == 120


def test_a_running_replicator_behind_a_deletion_reports_exactly_the_skipped(local_clusters, topic_factory, unique_name):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    options = options_for(unique_name)
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    mirror.open()
    try:
        mirror.refresh_topics()
        produce(dc1, topic, 100, partitions=2)  # 50 a partition
        steps_until(mirror, lambda: mirror.stats.copied_by_topic[topic] == 100, "the first 100 copied")
        mirror._consumer.pause(mirror._consumer.assignment())  # a stall: nothing fetched from here on
        produce(dc1, topic, 100, partitions=2)  # offsets 50..99 of each partition
        delete_before(dc1, topic, 71, partition=1)  # 21 of partition 1 gone before they were read
        mirror._consumer.resume(mirror._consumer.assignment())
        steps_until(mirror, lambda: mirror.stats.copied_by_topic[topic] == 179, "the rest copied")
        mirror.finish()
    finally:
        mirror.close()

    assert mirror.stats.retention_skipped == 21
    assert mirror.retention.of_topic(topic)[0].skipped == 21
    assert reported_gaps(dc1, options.audit_topic, "aggregate") == {(1, 50, 71)}


def test_a_running_counter_behind_a_deletion_reports_exactly_the_skipped(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("ret")
    topic = topic_factory("dc1", name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    counter = counter_for(bootstrap, audit_topic, prefix)
    counter.open()
    counter._next_flush = time.monotonic()  # set by run(); the test drives step() itself
    try:
        counter.refresh_topics()
        produce(bootstrap, topic, 100, partitions=1)
        steps_until(counter, lambda: counter.stats.counted == 100, "the first 100 counted")
        counter.consumer.pause(counter.consumer.assignment())
        produce(bootstrap, topic, 100, partitions=1)  # offsets 100..199
        delete_before(bootstrap, topic, 160)
        counter.consumer.resume(counter.consumer.assignment())
        steps_until(counter, lambda: counter.stats.counted == 140, "the rest counted")
        counter.flush()
    finally:
        counter.close()

    assert counter.stats.retention_skipped == 60
    assert reported_gaps(bootstrap, audit_topic, "dc1") == {(0, 100, 160)}
    gap = counter.retention.of_topic(topic)[0]
    assert gap.after_time_ms == BASE_TS_MS + 99  # the last message read before the gap
    assert gap.before_time_ms == BASE_TS_MS + 60  # the first one after it (message 60 of the second 100)


def test_a_counter_restarted_below_the_log_start_with_nothing_after_it_reports_the_gap_and_no_lag(
    local_clusters, topic_factory, unique_name
):
    """Everything it had not read deleted: no message follows the gap, its position still moves past it
    (else its lag and the tier's watermark would stay behind for ever)."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("ret")
    topic = topic_factory("dc1", name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    produce(bootstrap, topic, 40, partitions=1)
    assert counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60).counted == 40
    produce(bootstrap, topic, 25, partitions=1)
    delete_before(bootstrap, topic, 65)  # everything after the counter's commit

    began = time.monotonic()
    stats = counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 45, "run-until-caught-up never returned: position stuck below the log start"
    assert stats.counted == 0
    assert stats.retention_skipped == 25
    assert stats.total_lag == 0
    assert reported_gaps(bootstrap, audit_topic, "dc1") == {(0, 40, 65)}


def test_a_replicator_restarted_below_the_log_start_with_nothing_after_it_reports_the_gap_and_no_lag(
    local_clusters, topic_factory, unique_name
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1")
    options = options_for(unique_name)
    produce(dc1, topic, 40, partitions=1)
    first = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic).run(until_caught_up=True, max_seconds=60)
    assert first.copied_by_topic[topic] == 40
    produce(dc1, topic, 25, partitions=1)
    delete_before(dc1, topic, 65)

    began = time.monotonic()
    stats = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic).run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 45, "run-until-caught-up never returned: position stuck below the log start"
    assert stats.copied_by_topic[topic] == 0
    assert stats.retention_skipped == 25
    assert stats.lag == 0 and not stats.stalled
    assert reported_gaps(dc1, options.audit_topic, "aggregate") == {(0, 40, 65)}
