"""Topics written by transactional producers (Kafka Streams, Flink exactly-once, any transactional.id):
every hop counts what a read_committed consumer reads, reports lag 0 once it has read it all, and its
run-until-caught-up returns. Commit and abort markers take offsets that hold no message (invariant 7)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from audit.contract.naming import PrefixNaming
from audit.contract.record import Kind
from audit.io.audit_log import read_audit_topic
from tests.audit.hops.test_counter import counted, counter_for
from tests.audit.hops.test_replicator import options_for, read_all, replicator
from tests.traffic import MIXED, produce_transactions

pytestmark = pytest.mark.kafka

PREFIX = PrefixNaming(frozenset({"dc1", "aggregate"}))


def counts_by_partition(settings, topic: str) -> dict[tuple[str, int], dict[int, int]]:
    """Each tier's audited count per (tier, window) and partition, read from both audit topics: what a
    failed verdict is made of."""
    counts: dict[tuple[str, int], dict[int, int]] = {}
    for cluster in ("dc1", "aggregate"):
        records, _ = read_audit_topic(
            {"bootstrap.servers": settings.cluster(cluster).bootstrap_servers}, settings.audit_topic
        )
        for record in records:
            if record.kind == Kind.COUNT and record.topic.endswith(topic) and record.by_partition:
                by_partition = counts.setdefault((record.tier, record.window_start_ms), {})
                for partition, count in record.by_partition.items():
                    by_partition[partition] = by_partition.get(partition, 0) + count
    return counts


def last_status_by_partition(bootstrap: str, audit_topic: str, tier: str) -> dict[int, tuple[int, int, int]]:
    records, _ = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    newest = {}
    for record in records:
        if record.kind == Kind.STATUS and record.tier == tier:
            for p in record.partitions:
                newest[p.partition] = (p.position, p.end_offset, p.lag)
    return newest


@pytest.mark.parametrize("partitions", [1, 8])
def test_the_counter_counts_only_committed_messages_and_ends_at_lag_0(
    local_clusters, topic_factory, unique_name, partitions
):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("txn")
    topic = topic_factory("dc1", partitions=partitions, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    expected = produce_transactions(bootstrap, topic, partitions=partitions, batches=MIXED)

    began = time.monotonic()
    counter = counter_for(bootstrap, audit_topic, prefix)
    stats = counter.run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 45, "run-until-caught-up never saw the end: lag stuck on a commit marker"
    assert stats.counted == sum(expected.values())
    assert counted(bootstrap, audit_topic) == dict(expected)
    assert stats.total_lag == 0, stats.lag
    status = last_status_by_partition(bootstrap, audit_topic, "dc1")
    assert sorted(status) == list(range(partitions))
    assert all(lag == 0 and position == end for position, end, lag in status.values()), status


@pytest.mark.parametrize("partitions", [1, 8])
def test_the_replicator_copies_only_committed_messages_and_ends_at_lag_0(
    local_clusters, topic_factory, unique_name, partitions
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=partitions)
    expected = produce_transactions(dc1, topic, partitions=partitions, batches=MIXED)
    options = options_for(unique_name)

    began = time.monotonic()
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    stats = mirror.run(until_caught_up=True, max_seconds=60)

    assert time.monotonic() - began < 45, "run-until-caught-up never saw the end: lag stuck on a commit marker"
    assert stats.lag == 0
    assert len(read_all(aggregate, f"dc1.{topic}", sum(expected.values()), timeout_s=20)) == sum(expected.values())
    status = last_status_by_partition(dc1, options.audit_topic, "aggregate")
    assert sorted(status) == list(range(partitions))
    assert all(lag == 0 and position == end for position, end, lag in status.values()), status


@pytest.mark.spark
def test_every_tier_of_a_transactional_topic_is_complete_and_none_lags(spark, settings_factory, topic_factory):
    """Counter, replicator, aggregate counter, lake job and books over a topic of commits and aborts:
    the origin cluster is the reference (the producer does not audit), every window is complete at
    every tier, and the lake's own status says lag 0."""
    from audit.books.run import reconcile
    from audit.io.clients import ensure_topics
    from tests.audit.local.test_pipeline_e2e import books, count_cluster, land, mirror

    settings = settings_factory()
    dc1 = settings.cluster("dc1").bootstrap_servers
    topic = topic_factory("dc1", partitions=3)
    ensure_topics({"bootstrap.servers": dc1}, {settings.audit_topic: 1})
    expected = produce_transactions(dc1, topic, partitions=3, batches=MIXED)
    count_cluster(settings, "dc1", [topic])
    mirror(settings, [topic], group=f"mirror-{settings.audit_topic}")
    count_cluster(settings, "aggregate", [f"dc1.{topic}"])
    land(spark, settings, [f"dc1.{topic}"])
    reconcile(spark, settings)

    verdicts = books(spark, settings, f"dc1.{topic}")
    windows = {window for _topic, window in expected}
    # dc1, the origin cluster, is the reference (the producer does not audit): the tiers after it are judged.
    assert set(verdicts) == {(w, tier) for w in windows for tier in ("aggregate", "lake")}, verdicts
    for (window, tier), (status, expected_count, observed, missing, duplicated) in verdicts.items():
        # On a failure, each tier's counts by partition say where the difference is.
        assert (status, missing, duplicated) == ("complete", 0, 0), (window, tier, counts_by_partition(settings, topic))
        assert expected_count == observed == expected[(topic, window)]
    aggregate = settings.cluster("aggregate").bootstrap_servers
    lake_status = last_status_by_partition(aggregate, settings.audit_topic, "lake")
    assert lake_status and all(lag == 0 for _position, _end, lag in lake_status.values()), lake_status


def test_a_transaction_left_open_holds_the_counters_watermark_until_it_ends(local_clusters, topic_factory, unique_name):
    """A read_committed reader stops at the first offset of an open transaction. The counter reports the lag
    behind it up to the high watermark: lag 0 there moved the tier's watermark to now past the messages written
    after it (here 10, committed by a plain producer that an audited one could be), and their windows turned
    final and short at this tier, a loss until the transaction ended."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("held")
    topic = topic_factory("dc1", partitions=1, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce_plain(messages: int) -> None:
        for _ in range(messages):
            plain.produce(topic, b"m", partition=0)
        assert plain.flush(30) == 0

    produce_plain(5)
    open_one = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-open"})
    open_one.init_transactions(30)
    open_one.begin_transaction()
    open_one.produce(topic, b"held", partition=0)
    open_one.flush(30)
    produce_plain(10)

    held = counter_for(bootstrap, audit_topic, prefix).run(max_seconds=8)
    (position, end, lag) = last_status_by_partition(bootstrap, audit_topic, "dc1")[0]
    assert held.counted == 5 and position == 5, "read up to the open transaction"
    assert (end, lag) == (16, 11), "the lag runs to the high watermark, past the open transaction"

    open_one.commit_transaction(30)
    ended = counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)
    assert ended.counted == 11 and ended.total_lag == 0, ended.lag
    (position, end, lag) = last_status_by_partition(bootstrap, audit_topic, "dc1")[0]
    assert lag == 0 and position == end == 17, "the commit marker's offset passed too"
