"""The content digest on real brokers: the audited producer (confluent-kafka and kcat with the plugin) and the
cluster counter (through the plugin and in its Python loop) report, per window and partition, the digest of
exactly what a plain read_committed consumer reads back, on uncompressed, lz4 and zstd topics, with null
keys, tombstones and empty values; aborted transactions stay out of it; a topic whose digest is off is
counted with no digest at all."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.contract.digest import digest_of, merge
from audit.contract.record import Kind
from audit.contract.windows import window_start
from audit.hops.counter.hop import ClusterCounter
from audit.io.audit_log import read_audit_topic
from audit.io.plugin import plugin_config
from producers.audited import AuditedProducer
from tests.audit.hops.test_counter import WINDOW_MINUTES, counter_for, counting_loop  # noqa: F401 (a fixture)
from tests.producers.test_plugin import kcat_settings
from tests.traffic import MIXED, produce_transactions

pytestmark = pytest.mark.kafka

Digests = dict[tuple[int, int], int]  # (window start, partition) -> digest


def messages(n: int) -> list[tuple[bytes | None, bytes | None]]:
    """Keys and values of every shape: null keys, tombstones, empty values and keys, some bytes of each."""
    shapes = []
    for i in range(n):
        key = None if i % 5 == 0 else b"" if i % 17 == 0 else b"k%d" % i
        value = None if i % 7 == 0 else b"" if i % 11 == 0 else bytes([i % 256]) * (i % 300) + b"v%d\xff" % i
        shapes.append((key, value))
    return shapes


def read_back(bootstrap: str, topic: str, partitions: int, shapes: set[str] | None = None) -> Digests:
    """The digest of what a plain read_committed consumer reads of `topic`, by window and partition; the
    shapes of keys and values it read into `shapes`."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "isolation.level": "read_committed"}
    )
    read: dict[tuple[int, int], list] = defaultdict(list)
    try:
        ends = {}
        for partition in range(partitions):
            _low, ends[partition] = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(partitions)])
        positions = dict.fromkeys(range(partitions), 0)
        while any(positions[p] < ends[p] for p in positions):
            for message in consumer.consume(1000, timeout=1.0):
                if message.error() is None:
                    when = window_start(message.timestamp()[1], WINDOW_MINUTES)
                    read[(when, message.partition())].append((message.key(), message.value()))
                    if shapes is not None:
                        shapes.update(shape_of(message.key(), message.value()))
            assigned = [TopicPartition(topic, partition) for partition in positions]
            positions = {tp.partition: tp.offset for tp in consumer.position(assigned)}
    finally:
        consumer.close()
    return {key: digest_of(shapes) for key, shapes in read.items()}


def shape_of(key: bytes | None, value: bytes | None) -> set[str]:
    return {
        f"{name} {'null' if part is None else 'empty' if part == b'' else 'bytes'}"
        for name, part in (("key", key), ("value", value))
    }


def reported(bootstrap: str, audit_topic: str, topic: str, tier: str) -> tuple[Digests | None, int]:
    """The digests the tier's count records of `topic` carry, merged by window and partition (None when a record
    carries none), and the number of records."""
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    mine = [r for r in records if r.kind == Kind.COUNT and r.topic == topic and r.tier == tier and r.count]
    if any(r.digest_by_partition is None for r in mine):
        assert all(r.digest_by_partition is None for r in mine), "a topic's records all carry a digest or none"
        return None, len(mine)
    digests: Digests = {}
    for record in mine:
        assert record.window_start_ms is not None and record.digest_by_partition is not None
        for partition, digest in record.digest_by_partition.items():
            key = (record.window_start_ms, partition)
            digests[key] = merge(digests.get(key, 0), digest)
    return digests, len(mine)


def counted_by_counter(bootstrap: str, prefix: str, topic: str, *, digest_exclude: tuple[str, ...] = ()):
    audit_topic = f"_audit_counter_{topic}".replace("-", "_")
    counter = counter_for(bootstrap, audit_topic, prefix)
    counter = ClusterCounter(
        counter.config,
        dataclasses.replace(counter.options, digest_exclude=digest_exclude),
        counter.select_topic,
    )
    try:
        counter.run(until_caught_up=True, max_seconds=60)
    finally:
        counter.close()
    return reported(bootstrap, audit_topic, topic, "dc1")


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.usefixtures("counting_loop")
def test_the_producer_and_the_counter_digest_what_a_consumer_reads(local_clusters, topic_factory, unique_name, codec):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("dg")
    topic = topic_factory(
        "dc1",
        partitions=3,
        name=f"{prefix}-t",
        config={"compression.type": "uncompressed" if codec == "none" else codec},
    )
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    with AuditedProducer(
        config={"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5},
        cluster="dc1",
        audit_topic=audit_topic,
    ) as producer:
        for key, value in messages(3000):
            producer.produce(topic, key=key, value=value)
            producer.poll(0)
    shapes: set[str] = set()
    expected = read_back(bootstrap, topic, 3, shapes)
    assert shapes == {f"{name} {shape}" for name in ("key", "value") for shape in ("null", "empty", "bytes")}
    assert len({partition for _window, partition in expected}) == 3
    assert reported(bootstrap, audit_topic, topic, "producer")[0] == expected
    assert counted_by_counter(bootstrap, prefix, topic)[0] == expected


@pytest.mark.parametrize("nulls", [False, True], ids=["empty", "null"])
def test_kcat_digests_what_a_consumer_reads(local_clusters, topic_factory, unique_name, nulls):
    """kcat sends an empty key or value as empty, or with -Z as null."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2, config={"compression.type": "lz4"})
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    config = plugin_config(cluster="dc1", audit_topic=audit_topic, service="kcat", flush_interval_ms=500)
    lines = "".join(f"{'' if i % 4 == 0 else f'k{i}'}:{'' if i % 6 == 0 else f'value {i}'}\n" for i in range(2000))
    result = subprocess.run(
        [shutil.which("kcat") or "kcat", "-P", "-b", bootstrap, "-t", topic, "-K", ":", *(["-Z"] if nulls else [])]
        + kcat_settings(config),
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    shapes: set[str] = set()
    expected = read_back(bootstrap, topic, 2, shapes)
    assert shapes == {f"{name} {'null' if nulls else 'empty'}" for name in ("key", "value")} | {
        "key bytes",
        "value bytes",
    }
    assert reported(bootstrap, audit_topic, topic, "producer")[0] == expected


@pytest.mark.usefixtures("counting_loop")
def test_the_counter_digests_only_committed_messages(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("dgtxn")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    produce_transactions(bootstrap, topic, partitions=2, batches=MIXED)
    expected = read_back(bootstrap, topic, 2)
    assert counted_by_counter(bootstrap, prefix, topic)[0] == expected


@pytest.mark.usefixtures("counting_loop")
def test_a_topic_whose_digest_is_off_is_counted_without_one(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("dgoff")
    off = topic_factory("dc1", partitions=2, name=f"{prefix}-big-1")
    on = topic_factory("dc1", partitions=2, name=f"{prefix}-small")
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    exclude = ("-big-[0-9]$", "^never$")
    with AuditedProducer(
        config={"bootstrap.servers": bootstrap}, cluster="dc1", audit_topic=audit_topic, digest_exclude=exclude
    ) as producer:
        for key, value in messages(500):
            producer.produce(off, key=key, value=value)
            producer.produce(on, key=key, value=value)
    assert reported(bootstrap, audit_topic, on, "producer")[0] == read_back(bootstrap, on, 2)
    digests, records = reported(bootstrap, audit_topic, off, "producer")
    assert digests is None and records
    digests, records = counted_by_counter(bootstrap, prefix, off, digest_exclude=exclude)
    assert digests is None and records


def test_a_producer_with_a_bad_digest_exclude_is_refused(local_clusters):
    config = plugin_config(cluster="dc1")
    with pytest.raises(Exception, match="kaudit.digest.exclude"):
        Producer({"bootstrap.servers": local_clusters["dc1"].bootstrap_servers, **config, "kaudit.digest.exclude": "("})
