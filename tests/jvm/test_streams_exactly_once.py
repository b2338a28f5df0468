"""A Kafka Streams application with processing.guarantee=exactly_once_v2 and the interceptor on its producer
(jvm/interceptor/streams: it copies a topic), killed (-9) inside a transaction and started again: the aborted
transaction's messages were acknowledged to the interceptor, which sees no abort, so every producer-tier record of
it says unknown; the cluster counter counts the output topic as a read_committed reader reads it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.contract.names import PRODUCER_TIER
from audit.io import jvm
from audit.io.interceptor_jar import INTERCEPTOR_JARS, interceptor_jar
from tests.audit.hops.test_counter import counter_for
from tests.conftest import cache_dir
from tests.jvm.test_java_interceptor import audit_records

pytestmark = pytest.mark.kafka

MESSAGES = 300
PARTITIONS = 2
PAUSE_MS = 20  # per record: 6 s of copying, transactions of about 50 records (commit.interval.ms=1000)


def copy_topic(bootstrap: str, app_id: str, source: str, target: str, audit_topic: str, state: Path):
    streams = sorted((Path(cache_dir()) / "jars" / INTERCEPTOR_JARS / "streams").glob("*.jar"))
    assert streams, "no Kafka Streams jars: run `make interceptor`"
    classpath = os.pathsep.join(
        [jvm.classpath(cache_dir(), jvm.KAFKA_JARS), str(interceptor_jar(cache_dir())), *map(str, streams)]
    )
    argv = [jvm.java_executable(), "-cp", classpath, "io.kaudit.streams.CopyTopic", bootstrap, app_id]
    argv += [source, target, audit_topic, str(state), str(PAUSE_MS)]
    log = state.parent / f"{app_id}-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        app = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "running" not in log.read_text():
        assert app.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    return app


def end_offsets(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_uncommitted"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def read(bootstrap: str, topic: str, isolation: str, until: int, idle_s: float = 3) -> int:
    """How many messages a reader with `isolation` reads, waiting for at least `until`, then for no more."""
    config = {"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": isolation}
    consumer = Consumer({**config, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, last, deadline = 0, time.monotonic(), time.monotonic() + 90
    try:
        while time.monotonic() < deadline and (count < until or time.monotonic() - last < idle_s):
            got = [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
            count += len(got)
            last = time.monotonic() if got else last
        return count
    finally:
        consumer.close()


def test_a_streams_app_killed_inside_a_transaction(local_clusters, topic_factory, unique_name, tmp_path):
    dc1 = local_clusters["dc1"].bootstrap_servers
    source = topic_factory("dc1", partitions=PARTITIONS)
    target = topic_factory("dc1", partitions=PARTITIONS)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    producer = Producer({"bootstrap.servers": dc1})
    for i in range(MESSAGES):
        producer.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0

    app_id, state = unique_name("copy"), tmp_path / "streams"
    first = copy_topic(dc1, app_id, source, target, audit_topic, state)
    deadline = time.monotonic() + 60
    while end_offsets(dc1, target) < MESSAGES // 4:
        assert time.monotonic() < deadline and first.poll() is None, "the copy made no progress"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)  # inside a transaction: one is open while it copies
    first.wait(timeout=10)

    second = copy_topic(dc1, app_id, source, target, audit_topic, state)
    try:
        assert read(dc1, target, "read_committed", MESSAGES) == MESSAGES
    finally:
        second.terminate()
        assert second.wait(timeout=60) == 128 + signal.SIGTERM  # the JVM's status after its shutdown hooks ran
    assert read(dc1, target, "read_uncommitted", MESSAGES + 1) > MESSAGES  # the killed transaction's, aborted

    ours = [r for r in audit_records(dc1, audit_topic) if r.tier == PRODUCER_TIER]
    assert {r.topic for r in ours} == {target} and all(r.unknown for r in ours)
    assert sum(r.count for r in ours) > 0
    counter = counter_for(dc1, audit_topic, target)
    assert counter.run(until_caught_up=True, max_seconds=60).total_lag == 0
    counted = [r for r in audit_records(dc1, audit_topic) if r.tier == "dc1" and r.topic == target]
    assert sum(r.count for r in counted) == MESSAGES
