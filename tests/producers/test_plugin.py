"""The librdkafka plugin on real brokers: kcat and confluent-kafka, each audited by configuration alone,
produce traffic whose producer tier balances exactly, per partition, with what the cluster holds and with
the cluster counter; a failed delivery is counted nowhere but in send_failed; the plugin refuses a
librdkafka outside its tested versions and a producer without kaudit.cluster."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from audit.contract.record import Kind
from audit.io.audit_log import read_audit_topic
from audit.io.plugin import plugin_config, totals
from native.build import plugin_command
from tests import traffic
from tests.audit.hops.test_counter import counter_for

pytestmark = pytest.mark.kafka


def producer_counts(bootstrap: str, audit_topic: str) -> tuple[Counter, Counter, list]:
    """(delivered by partition, send_failed by topic, the records) of the producer tier in `audit_topic`."""
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    delivered, failed = Counter(), Counter()
    producer_records = [r for r in records if r.kind == Kind.COUNT and r.tier == "producer"]
    for record in producer_records:
        for partition, count in (record.by_partition or {}).items():
            delivered[(record.topic, partition)] += count
        failed[record.topic] += record.send_failed
    return delivered, failed, producer_records


def held_by_partition(bootstrap: str, topic: str, partitions: int) -> Counter:
    """What each partition holds, keyed (topic, partition) as the audit records' counts are."""
    return Counter({(topic, p): held for p, held in traffic.held_by_partition(bootstrap, topic, partitions).items()})


def counter_by_partition(bootstrap: str, topic: str) -> Counter:
    """What the cluster counter counts of `topic`, per partition, into an audit topic of its own."""
    audit_topic = f"_audit_counter_{topic}".replace("-", "_")
    counter = counter_for(bootstrap, audit_topic, topic)
    try:
        counter.run(until_caught_up=True)
    finally:
        counter.close()
    records, _rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    counted = Counter()
    for record in records:
        if record.kind == Kind.COUNT and record.topic == topic:
            for partition, count in (record.by_partition or {}).items():
                counted[(topic, partition)] += count
    return counted


def kcat(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("kcat")
    assert binary, "kcat is missing: `make setup` installs the Debian package"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def kcat_settings(config: dict[str, str]) -> list[str]:
    return [arg for key, value in config.items() for arg in ("-X", f"{key}={value}")]


def test_kcat_is_audited_by_configuration(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=3)
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    config = plugin_config(cluster="dc1", audit_topic=audit_topic, service="kcat", flush_interval_ms=500)
    lines = "".join(f"k{i}:value {i}\n" for i in range(3000))
    result = subprocess.run(
        [shutil.which("kcat") or "kcat", "-P", "-b", bootstrap, "-t", topic, "-K", ":", *kcat_settings(config)],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    delivered, failed, records = producer_counts(bootstrap, audit_topic)
    held = held_by_partition(bootstrap, topic, 3)
    assert sum(held.values()) == 3000 and all(held.values())
    assert delivered == held
    assert sum(failed.values()) == 0
    assert {r.service for r in records} == {"kcat"} and {r.cluster for r in records} == {"dc1"}
    assert counter_by_partition(bootstrap, topic) == held


def test_confluent_kafka_is_audited_and_failures_count_nowhere(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=4)
    small = topic_factory("dc1", partitions=1, config={"max.message.bytes": "1000"})
    audit_topic = topic_factory("dc1", name=unique_name("_audit").replace("-", "_"))
    instance_id = unique_name("app")
    config = {
        "bootstrap.servers": bootstrap,
        **plugin_config(cluster="dc1", audit_topic=audit_topic, instance_id=instance_id, flush_interval_ms=200),
    }
    errors = []
    producer = Producer(config)
    for i in range(5000):
        producer.produce(topic, key=b"%d" % i, value=b"v" * (i % 50))
        producer.poll(0)
    for _ in range(3):
        producer.produce(small, value=b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert len(errors) == 3 and all(err is not None for err in errors), "the application still sees its errors"
    assert totals(instance_id) == (5000, 3)
    del producer  # destroying the client emits its last counts
    delivered, failed, _records = producer_counts(bootstrap, audit_topic)
    held = held_by_partition(bootstrap, topic, 4)
    assert delivered == held and sum(held.values()) == 5000
    assert failed == Counter({small: 3})
    assert held_by_partition(bootstrap, small, 1)[(small, 0)] == 0
    assert counter_by_partition(bootstrap, topic) == held


def test_bad_settings_are_refused_and_a_missing_cluster_name_is_logged(local_clusters, topic_factory):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    config = {"bootstrap.servers": bootstrap, **plugin_config(cluster="dc1")}
    with pytest.raises(KafkaException, match="kaudit.window.minutes.*a number of minutes that divides a day"):
        Producer({**config, "kaudit.window.minutes": "7"})
    with pytest.raises(KafkaException, match="kaudit.colour: no such setting of the kaudit plugin"):
        Producer({**config, "kaudit.colour": "blue"})
    # librdkafka lets no plugin refuse a client once made: without a cluster name the client runs unaudited,
    # and says so in its log (and the plugin's).
    topic = topic_factory("dc1")
    result = subprocess.run(
        [shutil.which("kcat") or "kcat", "-P", "-b", bootstrap, "-t", topic, *kcat_settings(plugin_config())],
        input="one\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "kaudit.cluster is not set" in result.stderr


def test_a_plugin_built_for_other_librdkafka_versions_refuses_to_load(tmp_path: Path, local_clusters):
    other = tmp_path / "kaudit_plugin_2_99.so"
    # Built as if tested only from 2.99 on: this process's librdkafka and kcat's are both older.
    subprocess.run(
        plugin_command(other, ("KAUDIT_RDKAFKA_LOWEST=0x02630000", "KAUDIT_RDKAFKA_BEYOND=0x02640000")), check=True
    )
    config = {
        "bootstrap.servers": local_clusters["dc1"].bootstrap_servers,
        "plugin.library.paths": str(other),
        "kaudit.cluster": "dc1",
    }
    with pytest.raises(KafkaException, match=r"outside the versions this plugin is tested with \(2\.99\.0"):
        Producer(config)
    result = kcat("-P", "-b", config["bootstrap.servers"], "-t", "never", *kcat_settings(config))
    assert result.returncode != 0 and "outside the versions this plugin is tested with" in result.stderr
