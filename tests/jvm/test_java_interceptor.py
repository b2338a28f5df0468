"""The Java producer interceptor (jvm/interceptor) on Apache Kafka's own Java producer: its count records are the
Python contract's byte for byte, and count per partition exactly what the cluster holds and what the cluster
counter counts (ProducerPerformance), with the same content digests; a message counts in the window of its timestamp, one without a usable
timestamp in the window of now as no_timestamp, and the audit topic's own messages never (jvm/probe); a failed
send counts as send_failed only (tests/jvm/test_java_interceptor_faults.py: in its message's window); no digest without kaudit.digest=true, nor for a topic kaudit.digest.exclude matches; a missing kaudit.cluster stops the producer from starting, and so does a
kafka-clients outside the versions the interceptor was tested with (jvm/interceptor/pom.xml)."""

from __future__ import annotations

import os
import subprocess
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from audit.contract.digest import merge, message_hash
from audit.contract.names import PRODUCER_TIER
from audit.contract.record import AuditRecord, Kind, count_record, encode, now_ms, parse
from audit.contract.windows import window_start
from audit.io import jvm
from audit.io.clients import watermarks
from audit.io.interceptor_jar import INTERCEPTOR_CLASS, interceptor_jar, tools_jars
from tests.audit.hops.test_counter import BASE_MS, WINDOW_MINUTES, WINDOW_MS, counter_for
from tests.conftest import cache_dir
from tests.traffic import held_by_partition

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]

# Every character a JSON encoder may get wrong: quotes, backslash, beyond ASCII, beyond the BMP (a surrogate pair).
SERVICE = 'java "perf" \\ é ☃ 😀'
HOST = "host\twith\nline"  # control characters: allowed in a host, never in a service (the record id holds it)
OLD_CLIENTS = "old-clients"  # beside the interceptor's jar: a kafka-clients it was not tested with, and slf4j-api


def producer_performance(
    bootstrap: str, topic: str, records: int, size: int, **props: str
) -> subprocess.CompletedProcess:
    """Kafka's ProducerPerformance with the interceptor on its class path and `props` as producer configs."""
    classpath = os.pathsep.join(
        [
            jvm.classpath(cache_dir(), jvm.KAFKA_JARS),
            *map(str, tools_jars(cache_dir())),
            str(interceptor_jar(cache_dir())),
        ]
    )
    config = {"bootstrap.servers": bootstrap, "acks": "all", "interceptor.classes": INTERCEPTOR_CLASS, **props}
    argv = [jvm.java_executable(), "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic]
    argv += ["--num-records", str(records), "--record-size", str(size), "--throughput", "-1", "--producer-props"]
    argv += [f"{key}={value}" for key, value in config.items()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def raw_messages(bootstrap: str, topic: str, timeout_s: float = 30) -> list[bytes]:
    """Every committed message of partition 0 of `topic`, as its bytes. Read up to the end offset by position, not
    by number: the counter's transaction markers take offsets too."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        low, high = watermarks(consumer, topic, 0)
        consumer.assign([TopicPartition(topic, 0, low)])
        values: list[bytes] = []
        if high == low:
            return values
        deadline = time.monotonic() + timeout_s
        while consumer.position([TopicPartition(topic, 0)])[0].offset < high:
            assert time.monotonic() < deadline, f"{topic}: not read to offset {high} in {timeout_s} s"
            values += [m.value() for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        return values
    finally:
        consumer.close()


def audit_records(bootstrap: str, audit_topic: str) -> list[AuditRecord]:
    """The audit topic's records, each checked to be exactly what the Python contract writes for it."""
    records = []
    for raw in raw_messages(bootstrap, audit_topic):
        record, reason = parse(raw)
        assert record is not None, (reason, raw)
        assert encode(record) == raw  # sorted keys, separators, escapes, time formats: byte for byte
        records.append(record)
    return records


def by_window_and_partition(records: list[AuditRecord], tier: str, topic: str) -> Counter:
    counts: Counter = Counter()
    for record in records:
        if record.tier == tier and record.topic == topic:
            for partition, n in (record.by_partition or {}).items():
                counts[(record.window_start_ms, partition)] += n
    return counts


def digests_by_window_and_partition(records: list[AuditRecord], tier: str, topic: str) -> dict:
    """(window, partition) -> the merged content digest of the tier's records; every record must carry one."""
    digests: dict = {}
    for record in records:
        if record.tier == tier and record.topic == topic and record.kind == Kind.COUNT:
            assert record.digest_by_partition is not None, record
            for partition, value in record.digest_by_partition.items():
                key = (record.window_start_ms, partition)
                digests[key] = merge(digests.get(key, 0), value)
    return digests


def clients_range(jar: Path) -> dict[str, str]:
    """The range of kafka-clients versions the build wrote into the interceptor's jar: {"lowest": .., "beyond": ..}."""
    with zipfile.ZipFile(jar) as archive:
        text = archive.read("io/kaudit/kaudit-interceptor.properties").decode()
    pairs = (line.split("=", 1) for line in text.splitlines() if line.startswith("tested.clients."))
    return {key.removeprefix("tested.clients."): value.strip() for key, value in pairs}


def test_a_java_producer_is_counted_per_partition_as_the_cluster_and_the_counter_count_it(
    local_clusters, topic_factory, unique_name
):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=3)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    done = producer_performance(
        dc1,
        topic,
        20_000,
        100,
        **{
            "kaudit.cluster": "dc1",
            "kaudit.audit.topic": audit_topic,
            "kaudit.service": SERVICE,
            "kaudit.host": HOST,
            "kaudit.digest": "true",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]

    records = audit_records(dc1, audit_topic)
    ours = [r for r in records if r.tier == PRODUCER_TIER]
    assert ours and all(r.topic == topic and r.cluster == "dc1" for r in ours)
    assert {(r.service, r.host) for r in ours} == {(SERVICE, HOST)}
    assert all(r.instance_id.startswith(SERVICE + "-") and r.record_id.startswith(r.instance_id + ":") for r in ours)
    assert sum(r.count for r in ours) == 20_000 and sum(r.bytes for r in ours) == 20_000 * 100
    assert sum(r.send_failed + r.no_timestamp for r in ours) == 0
    assert not any(r.unknown for r in ours)  # no transactional.id, nothing dropped: it vouches for every count
    produced = by_window_and_partition(ours, PRODUCER_TIER, topic)
    held = held_by_partition(dc1, topic, 3)
    per_partition = Counter()
    for (_window, partition), n in produced.items():
        per_partition[partition] += n
    assert dict(per_partition) == held and len(held) == 3 and sum(held.values()) == 20_000

    counter = counter_for(dc1, audit_topic, topic)
    assert counter.run(until_caught_up=True, max_seconds=60).total_lag == 0
    counted = audit_records(dc1, audit_topic)
    assert by_window_and_partition(counted, "dc1", topic) == produced
    # the content digest taken at send time equals the counter's, from the bytes the cluster holds
    sent = digests_by_window_and_partition(counted, PRODUCER_TIER, topic)
    assert sent == digests_by_window_and_partition(counted, "dc1", topic) and set(sent) == set(produced)


def test_a_failed_send_counts_as_send_failed_and_nowhere_else(local_clusters, topic_factory, unique_name):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=3)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    # 2,000-byte records over a 1,000-byte max.request.size: every send fails, the callback gets the exception.
    done = producer_performance(
        dc1, topic, 7, 2000, **{"kaudit.cluster": "dc1", "kaudit.audit.topic": audit_topic, "max.request.size": "1000"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RecordTooLargeException" in done.stdout + done.stderr

    records = audit_records(dc1, audit_topic)
    assert records and all(r.tier == PRODUCER_TIER and r.topic == topic for r in records)
    assert sum(r.send_failed for r in records) == 7
    assert sum(r.count + r.bytes + r.no_timestamp for r in records) == 0
    assert all(r.by_partition is None for r in records)
    assert held_by_partition(dc1, topic, 3) == {0: 0, 1: 0, 2: 0}


def test_a_producer_without_kaudit_cluster_or_with_a_bad_setting_does_not_start(local_clusters, topic_factory):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    done = producer_performance(dc1, topic, 1, 10)
    assert done.returncode != 0
    assert 'Missing required configuration "kaudit.cluster"' in done.stdout + done.stderr
    done = producer_performance(dc1, topic, 1, 10, **{"kaudit.cluster": "dc1", "kaudit.digest": "yes"})
    assert done.returncode != 0
    assert "Invalid value yes for configuration kaudit.digest: true or false" in done.stdout + done.stderr
    done = producer_performance(dc1, topic, 1, 10, **{"kaudit.cluster": "dc1", "kaudit.digest.exclude": "("})
    assert done.returncode != 0
    assert (
        "Invalid value ( for configuration kaudit.digest.exclude: not a regular expression" in done.stdout + done.stderr
    )
    done = producer_performance(dc1, topic, 1, 10, **{"kaudit.cluster": "dc1", "kaudit.tally.max.entries": "0"})
    assert done.returncode != 0
    assert "Invalid value 0 for configuration kaudit.tally.max.entries: not between 1 and 1000000" in (
        done.stdout + done.stderr
    )
    assert held_by_partition(dc1, topic, 1) == {0: 0}


def test_a_producer_on_an_untested_kafka_clients_does_not_start(local_clusters, topic_factory, unique_name):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    folder = interceptor_jar(cache_dir()).parent / OLD_CLIENTS
    jars = sorted(folder.glob("*.jar"))
    clients = [jar for jar in jars if jar.name.startswith("kafka-clients-")]
    assert len(clients) == 1, f"no kafka-clients in {folder}: run `make interceptor`"
    version = clients[0].name.removeprefix("kafka-clients-").removesuffix(".jar")
    done = subprocess.run(
        [
            jvm.java_executable(),
            "-cp",
            os.pathsep.join([*map(str, jars), str(interceptor_jar(cache_dir()))]),
            str(ROOT / "jvm" / "probe" / "InterceptedProduce.java"),
            dc1,
            topic,
            unique_name("_audit"),
            "unused",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "sent" not in done.stdout
    refusal = (
        f"ConfigException: io.kaudit.KafkaAuditInterceptor refuses to load: the running kafka-clients is {version},"
    )
    assert refusal in done.stderr, done.stderr[-3000:]
    tested = clients_range(interceptor_jar(cache_dir()))
    assert f"tested with kafka-clients {tested['lowest']} and later, before {tested['beyond']}." in done.stderr
    assert held_by_partition(dc1, topic, 1) == {0: 0}


def test_a_message_counts_in_the_window_of_its_timestamp_and_without_one_in_the_window_of_now(
    local_clusters, topic_factory, unique_name
):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    # The host application writes to the audit topic itself: the interceptor must not count that message.
    foreign = encode(
        count_record(record_id="other:1", tier=PRODUCER_TIER, cluster="other", topic=topic, window_start_ms=0, count=0)
    )
    timestamps = [BASE_MS - 1, BASE_MS, BASE_MS + WINDOW_MS - 1, 0]  # 0: no usable timestamp
    began = now_ms()
    done = subprocess.run(
        [
            jvm.java_executable(),
            "-cp",
            os.pathsep.join([jvm.classpath(cache_dir(), jvm.KAFKA_JARS), str(interceptor_jar(cache_dir()))]),
            str(ROOT / "jvm" / "probe" / "InterceptedProduce.java"),
            dc1,
            topic,
            audit_topic,
            foreign.decode(),
            *map(str, timestamps),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ended = now_ms()

    ours = [r for r in audit_records(dc1, audit_topic) if r.cluster == "dc1"]
    assert {r.topic for r in ours} == {topic}  # the audit topic's own message is not counted
    windows = {r.window_start_ms: (r.count, r.no_timestamp, r.bytes, dict(r.by_partition or {})) for r in ours}
    # The message without a usable timestamp counts in the window of the moment it was acknowledged.
    now_window = next(start for start, (_n, no_timestamp, _b, _p) in windows.items() if no_timestamp)
    assert now_window in (window_start(began, WINDOW_MINUTES), window_start(ended, WINDOW_MINUTES))
    assert windows == {
        BASE_MS - WINDOW_MS: (1, 0, 3, {0: 1}),
        BASE_MS: (2, 0, 6, {0: 2}),
        now_window: (1, 1, 3, {0: 1}),
    }
    one = message_hash(b"k", b"vv")  # a keyed message's hash, from the bytes its serializer made at send time
    assert {r.window_start_ms: dict(r.digest_by_partition) for r in ours} == {
        BASE_MS - WINDOW_MS: {0: one},
        BASE_MS: {0: merge(one, one)},
        now_window: {0: one},
    }


def test_without_kaudit_digest_or_in_a_topic_it_excludes_no_digest_is_sent(local_clusters, topic_factory, unique_name):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    props = {"kaudit.cluster": "dc1", "kaudit.audit.topic": audit_topic}
    excluded = {**props, "kaudit.digest": "true", "kaudit.digest.exclude": f"^{topic}$"}
    for config in (props, excluded):  # off by default; on, but not for the topics it excludes
        done = producer_performance(dc1, topic, 500, 50, **config)
        assert done.returncode == 0, done.stderr[-3000:]
    ours = [r for r in audit_records(dc1, audit_topic) if r.tier == PRODUCER_TIER]
    assert sum(r.count for r in ours) == 1000 and all(r.digest_by_partition is None for r in ours)
