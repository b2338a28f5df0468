"""Transactional producers and the producer tier (DESIGN invariant 7): the AuditedProducer tells the plugin of its
transactions, so its records count exactly what a read_committed reader reads and say what was aborted; a client
that does not tell (a plain Producer with the plugin and a transactional.id) gets records marked unknown, as does
a transaction still open when its client is destroyed."""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import Producer

from audit.contract.windows import window_length_ms, window_start
from audit.io import plugin
from audit.io.transactions import abort_written
from producers.audited import AuditedProducer
from tests.producers.test_plugin import counter_by_partition, producer_counts
from tests.traffic import BASE_MS, WINDOW_MINUTES

pytestmark = pytest.mark.kafka

PARTITIONS = 3
TRANSACTION_SIZE = 300
ABORTED = {3, 10}  # of 15 transactions: 13 committed (3,900 messages), 2 aborted (600)


def by_window(records, field: str) -> Counter:
    counted: Counter = Counter()
    for record in records:
        counted[(record.topic, record.window_start_ms)] += getattr(record, field)
    return +counted


def test_an_audited_producer_counts_its_commits_and_its_aborts_apart(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=PARTITIONS)
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    committed, aborted, by_partition = Counter(), Counter(), Counter()
    producer = AuditedProducer(
        config={"bootstrap.servers": bootstrap, "transactional.id": unique_name("txn"), "linger.ms": 5},
        cluster="dc1",
        audit_topic=audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=0.2,  # emissions while transactions are open: they must not count them yet
    )
    producer.init_transactions(30)
    sequence = 0
    for transaction in range(15):
        producer.begin_transaction()
        expected = aborted if transaction in ABORTED else committed
        for _ in range(TRANSACTION_SIZE):
            ts = BASE_MS + (sequence * 7_919) % (3 * window_length_ms(WINDOW_MINUTES))
            partition = sequence % PARTITIONS
            producer.produce(topic, key=b"k%d" % sequence, value=b"v%d" % sequence, timestamp=ts, partition=partition)
            expected[(topic, window_start(ts, WINDOW_MINUTES))] += 1
            if transaction not in ABORTED:
                by_partition[(topic, partition)] += 1
            sequence += 1
        if transaction in ABORTED:
            abort_written(producer, 30)  # every message acknowledged first: aborted, none purged
        else:
            producer.commit_transaction(30)
    assert producer.backlog().untold_transactional is False
    producer.close()
    del producer

    delivered, failed, records = producer_counts(bootstrap, audit_topic)
    assert sum(committed.values()) == 3_900 and sum(aborted.values()) == 600
    assert not any(r.unknown for r in records), "an audited producer vouches for its transactions"
    assert by_window(records, "count") == committed
    assert by_window(records, "aborted") == aborted
    assert delivered == by_partition and sum(failed.values()) == 0
    assert counter_by_partition(bootstrap, topic) == by_partition, "the cluster's read_committed count"


def test_a_transactional_client_that_does_not_tell_gets_unknown_counts(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    instance_id = unique_name("plain")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique_name("txn"),
            **plugin.plugin_config(cluster="dc1", audit_topic=audit_topic, instance_id=instance_id),
        }
    )
    producer.init_transactions(30)
    for commit in (True, False, True):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, value=b"v%d" % i, partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            abort_written(producer, 30)
    assert plugin.backlog(instance_id).untold_transactional is True
    del producer

    _delivered, _failed, records = producer_counts(bootstrap, audit_topic)
    assert sum(r.count for r in records) == 150, "counted as acknowledged: it cannot tell the aborted ones"
    assert records and all(r.unknown for r in records), "so none of its counts is vouched for"


def test_a_transaction_open_when_the_client_is_destroyed_is_unknown(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    producer = AuditedProducer(
        config={"bootstrap.servers": bootstrap, "transactional.id": unique_name("txn")},
        cluster="dc1",
        audit_topic=audit_topic,
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i, timestamp=BASE_MS)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(7):
        producer.produce(topic, value=b"w%d" % i, timestamp=BASE_MS)
    producer.flush(30)
    assert producer.backlog().transaction_entries == 1
    del producer  # its outcome is never told

    _delivered, _failed, records = producer_counts(bootstrap, audit_topic)
    assert sum(r.count for r in records) == 27
    assert [r.count for r in records if r.unknown] == [7]
    assert [r.count for r in records if not r.unknown] == [20]
