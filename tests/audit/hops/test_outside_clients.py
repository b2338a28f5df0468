"""Traffic from clients kafka-audit did not write: Apache Kafka's own Java producer writing transactions
that commit and abort, and kcat, into topics of 1 to 64 partitions, CreateTime and LogAppendTime. The
counter counts exactly what a read_committed consumer reads, per window, and ends at lag 0; the
replicator copies exactly that (invariant 7)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from audit.contract.audit_time import header_value
from audit.contract.record import AUDIT_TIME_HEADER
from audit.contract.windows import window_start
from audit.io import jvm
from tests.audit.hops.test_counter import WINDOW_MINUTES, counted, counter_for
from tests.audit.hops.test_replicator import options_for, read_all, replicator
from tests.audit.hops.test_transactional_topics import PREFIX, last_status_by_partition
from tests.conftest import cache_dir

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[3]


def java_transactions(bootstrap: str, topic: str, partitions: int, transactions: int, per_transaction: int) -> int:
    """Apache Kafka's Java producer: alternate committed and aborted transactions; the committed count."""
    result = subprocess.run(
        [
            jvm.java_executable(),
            "-cp",
            jvm.classpath(cache_dir(), jvm.KAFKA_JARS),
            str(ROOT / "jvm" / "probe" / "TransactionalProduce.java"),
            bootstrap,
            topic,
            str(partitions),
            str(transactions),
            str(per_transaction),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return int(result.stdout.split("committed ")[-1])


def kcat_produce(bootstrap: str, topic: str, partitions: int, messages: int) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: `make setup` installs the Debian package"
    for partition in range(partitions):
        lines = "".join(f"k{i}:v{i}\n" for i in range(partition, messages, partitions))
        if lines:
            subprocess.run(
                [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", ":"],
                input=lines,
                text=True,
                check=True,
                timeout=60,
            )


def committed_windows(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> tuple[Counter, list]:
    """Ground truth: messages per window as a read_committed consumer reads them, and the messages."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"truth-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    messages, deadline = [], time.monotonic() + timeout_s
    while len(messages) < expected and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
    consumer.close()
    windows = Counter((topic, window_start(m.timestamp()[1], WINDOW_MINUTES)) for m in messages)
    return windows, messages


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_a_java_transactional_producer_is_counted_and_copied_exactly(
    local_clusters, topic_factory, unique_name, timestamps
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    prefix = unique_name("java")
    topic = topic_factory("dc1", partitions=4, name=f"{prefix}-t", config={"message.timestamp.type": timestamps})
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    committed = java_transactions(dc1, topic, partitions=4, transactions=7, per_transaction=30)
    truth, _messages = committed_windows(dc1, topic, committed)
    assert sum(truth.values()) == committed == 4 * 30

    stats = counter_for(dc1, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)
    assert counted(dc1, audit_topic) == dict(truth)
    assert stats.total_lag == 0

    options = options_for(unique_name)
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    assert mirror.run(until_caught_up=True, max_seconds=60).lag == 0
    copies = read_all(aggregate, f"dc1.{topic}", committed, timeout_s=20)
    assert len(copies) == committed
    if timestamps == "LogAppendTime":
        # The target broker stamps its own append time: the copy carries the source's in the audit-time
        # header, so every tier buckets the message in the window the origin cluster did.
        source_times = sorted(m.timestamp()[1] for m in _messages)
        copied_times = sorted(int(header_value(m.headers(), AUDIT_TIME_HEADER)) for m in copies)
        assert copied_times == source_times
    assert all(lag == 0 for _p, _e, lag in last_status_by_partition(dc1, options.audit_topic, "aggregate").values())


def test_kcat_into_64_partitions_is_counted_exactly_and_ends_at_lag_0(local_clusters, topic_factory, unique_name):
    dc1 = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("kcat")
    topic = topic_factory("dc1", partitions=64, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    kcat_produce(dc1, topic, partitions=64, messages=1000)
    truth, _messages = committed_windows(dc1, topic, 1000)
    assert sum(truth.values()) == 1000

    stats = counter_for(dc1, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)

    assert counted(dc1, audit_topic) == dict(truth)
    assert stats.total_lag == 0
    status = last_status_by_partition(dc1, audit_topic, "dc1")
    assert len(status) == 64 and all(lag == 0 for _p, _e, lag in status.values())


def test_kaudit_transactional_load_is_counted_as_a_read_committed_reader_sees_it(
    local_clusters, topic_factory, unique_name
):
    from producers.transactional import TransactionalLoad

    dc1 = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("txnload")
    topic = topic_factory("dc1", partitions=3, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    load = TransactionalLoad({"bootstrap.servers": dc1}, transactional_id=f"{prefix}-id")
    stats = load.run([topic], count=200, rate=None, duration_s=None, transaction_size=20, abort_every=4)
    load.close()
    # transactions 4 and 8 of 10 aborted: their 40 messages sit in the log but no read_committed reader gets them
    assert (stats.transactions, stats.committed, stats.aborted, stats.errors) == (10, 160, 40, 0)
    truth, _messages = committed_windows(dc1, topic, 160)
    assert sum(truth.values()) == 160

    counter = counter_for(dc1, audit_topic, prefix)
    assert counter.run(until_caught_up=True, max_seconds=60).total_lag == 0
    assert counted(dc1, audit_topic) == dict(truth)


def test_tombstones_on_a_compacted_topic_are_counted_and_copied_like_any_message(
    local_clusters, topic_factory, unique_name
):
    from audit.io.audit_log import counts_by_window, read_audit_topic
    from producers.audited import AuditedProducer
    from producers.loadgen import generate

    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    prefix = unique_name("tomb")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t", config={"cleanup.policy": "compact"})
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    producer = AuditedProducer(
        config={"bootstrap.servers": dc1}, cluster="dc1", audit_topic=audit_topic, window_minutes=WINDOW_MINUTES
    )
    stats = generate(producer, [topic], count=100, keys=10, tombstone_every=4, window_minutes=WINDOW_MINUTES)
    producer.close()
    assert stats.acked == 100

    records, _rejects = read_audit_topic({"bootstrap.servers": dc1}, audit_topic)
    produced = counts_by_window(records, "producer")
    assert sum(produced.values()) == 100
    assert counter_for(dc1, audit_topic, prefix).run(until_caught_up=True, max_seconds=60).total_lag == 0
    assert counted(dc1, audit_topic) == produced

    options = options_for(unique_name)
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    assert mirror.run(until_caught_up=True, max_seconds=60).lag == 0
    copies = read_all(aggregate, f"dc1.{topic}", 100, timeout_s=20)
    assert len(copies) == 100 and sum(1 for m in copies if m.value() is None) == 25
