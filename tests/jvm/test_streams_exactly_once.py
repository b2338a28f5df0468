"""A Kafka Streams application with processing.guarantee=exactly_once_v2 and the interceptor on its producer
(jvm/interceptor/streams: it copies a topic), killed (-9) inside a transaction and started again: the aborted
transaction's messages were acknowledged to the interceptor, which sees no abort, so every producer-tier record of
it says unknown; the cluster counter counts the output topic as a read_committed reader reads it; and the books,
from those records alone, judge the output's windows against dc1 (the origin cluster), never against the unknown
producer, and the alerts send no email: an aborted transaction is never a loss (DESIGN invariant 7)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.alerts.run import AlertJob, run_alerts
from audit.books.run import reconcile
from audit.contract.names import PRODUCER_TIER
from audit.contract.tables import COMPLETENESS, TIER_COUNTS
from audit.contract.windows import window_start
from audit.io import jvm
from audit.io.interceptor_jar import INTERCEPTOR_JARS, interceptor_jar
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.settings import AlertSettings, ClusterSettings, SmtpSettings
from tests.audit.alerts.test_alerts import smtp_server, subj  # noqa: F401 (a fixture)
from tests.audit.hops.test_counter import counter_for
from tests.conftest import cache_dir
from tests.jvm.test_java_interceptor import audit_records

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MESSAGES = 300
PARTITIONS = 2
PAUSE_MS = 20  # per record: 6 s of copying, transactions of about 50 records (commit.interval.ms=1000)
MINUTE = 60_000
# Three windows long past their grace, each message's in turn: every window is written by both instances. Kafka
# Streams gives each output message its input's timestamp, so the output's windows are these.
START = window_start(time.time_ns() // 1_000_000 - 90 * MINUTE)


def timestamp(i: int) -> int:
    return START + (i % 3) * 10 * MINUTE + i


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


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> int:
    """The partitions' end offsets summed; read_committed: their last stable offsets (an open transaction's first)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": isolation})
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


def test_a_streams_app_killed_inside_a_transaction(
    local_clusters,
    topic_factory,
    unique_name,
    settings_factory,
    spark,
    tmp_path,
    smtp_server,  # noqa: F811 (the fixture)
):
    _server, inbox, port = smtp_server
    dc1 = local_clusters["dc1"].bootstrap_servers
    settings = settings_factory(
        clusters=(ClusterSettings(name="dc1", bootstrap_servers=dc1, local=False),),
        smtp=SmtpSettings(host="127.0.0.1", port=port, retries=2, backoff_s=0.01, timeout_s=5),
        alerts=AlertSettings(default_recipients=("audit@example.com",)),
    )
    source = topic_factory("dc1", partitions=PARTITIONS)
    target = topic_factory("dc1", partitions=PARTITIONS)
    audit_topic = topic_factory("dc1", name=settings.audit_topic)
    producer = Producer({"bootstrap.servers": dc1})
    committed: Counter = Counter()
    for i in range(MESSAGES):
        producer.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode(), timestamp=timestamp(i))
        committed[window_start(timestamp(i))] += 1
    assert producer.flush(30) == 0

    app_id, state = unique_name("copy"), tmp_path / "streams"
    first = copy_topic(dc1, app_id, source, target, audit_topic, state)
    deadline = time.monotonic() + 60
    # Killed once an open transaction has messages in the log (its end past the last stable offset, read after it):
    # killed just after a commit, before the next transaction's first batch, the log would hold nothing to abort.
    while (end := end_offsets(dc1, target)) < MESSAGES // 4 or end <= end_offsets(dc1, target, "read_committed"):
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

    reconcile(spark, settings)
    lake = lake_of(settings)
    verdict = ["reference_tier", "expected", "observed", "missing", "duplicated", "status", "final"]
    judged = read_frame(lake, COMPLETENESS.name).query("topic == @target")
    books = {
        (int(r.window_start.timestamp() * 1000), r.tier): tuple(getattr(r, c) for c in verdict)
        for r in judged.itertuples(index=False)
    }
    assert sorted(committed.values()) == [MESSAGES // 3] * 3
    # dc1 is its own reference: its row says unknown (what the producer sent is not known), never incomplete.
    assert books == {(w, "dc1"): ("dc1", n, n, 0, 0, "unknown", True) for w, n in committed.items()}
    rows = read_frame(lake, TIER_COUNTS.name).query("topic == @target")
    tiers = {
        (int(r.window_start.timestamp() * 1000), r.tier): (r.count if r.tier == "dc1" else None, r.aborted, r.unknown)
        for r in rows.itertuples(index=False)
    }
    assert tiers == {
        **{(w, PRODUCER_TIER): (None, 0, True) for w in committed},
        **{(w, "dc1"): (n, 0, False) for w, n in committed.items()},
    }, "the producer tier unknown in every window: its acks include the aborted transaction's"

    report = run_alerts(AlertJob.of(settings), now=datetime.now(UTC))
    assert report.exit_code == 0 and report.new == 0, report.summary()
    assert [subj(m) for m in inbox.messages] == [], "no LOSS (nor any) email for an aborted transaction"
