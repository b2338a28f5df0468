"""The whole pipeline on real parts: audited producer -> dc1 -> counter, replicator -> aggregate ->
counter, lake job -> Delta, reconciliation. Faults are injected with the replicator's drop hook,
a second replicator group (every message copied twice), and kill -9 of the lake job."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from audit.books.run import reconcile
from audit.contract.naming import PrefixNaming
from audit.contract.tables import BRONZE, COMPLETENESS
from audit.contract.windows import window_start
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.faults import DropFault
from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
from audit.hops.replicator.hop import Replicator, ReplicatorOptions
from audit.io import delta_io
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lease import LakeLease
from audit.settings.topics import TopicSelection
from producers.audited import AuditedProducer
from tests.conftest import write_config
from tests.waiting import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MINUTE = 60_000
START = window_start(time.time_ns() // 1_000_000 - 180 * MINUTE)  # three windows, all long past their grace
PARTITIONS = 3


def produce(settings, topics: list[str], per_topic: int, *, tombstones: bool = False) -> None:
    """Audited messages over three windows; with `tombstones`, every value is null (deletes on a compacted topic)."""
    config = {"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}
    with AuditedProducer(
        config=config, cluster="dc1", audit_topic=settings.audit_topic, flush_interval_s=1.0, service="e2e"
    ) as producer:
        for i in range(per_topic):
            for topic in topics:
                producer.produce(
                    topic,
                    value=None if tombstones else b"v%d" % i,
                    key=b"k%d" % (i % 50),
                    timestamp=START + (i * 30 * MINUTE) // per_topic,
                    partition=i % PARTITIONS,
                    headers=[("seq", b"%d" % i)],
                )
            if i % 1000 == 0:
                producer.poll(0)


def count_cluster(settings, cluster: str, topics: list[str]) -> None:
    config = {"bootstrap.servers": settings.cluster(cluster).bootstrap_servers}
    options = CounterOptions(
        cluster=cluster,
        audit_topic=settings.audit_topic,
        flush_interval_s=1.0,
        group_id=f"counter-{settings.audit_topic}-{cluster}",
        topic_refresh_s=2.0,
    )
    ClusterCounter(config, options, lambda t: t in topics).run(until_caught_up=True, max_seconds=180)


def mirror(settings, topics: list[str], *, group: str, fault: DropFault | None = None) -> None:
    options = ReplicatorOptions(
        source="dc1",
        target="aggregate",
        audit_topic=settings.audit_topic,
        group_id=group,
        commit_interval_s=0.5,
        status_interval_s=1.0,
        topic_refresh_s=2.0,
    )
    Replicator(
        {"bootstrap.servers": settings.cluster("dc1").bootstrap_servers},
        {"bootstrap.servers": settings.cluster("aggregate").bootstrap_servers},
        options,
        PrefixNaming(frozenset({"dc1", "aggregate"})),
        lambda t: t in topics,
        fault=fault,
    ).run(until_caught_up=True, max_seconds=180)


def land(spark, settings, topics: list[str]) -> None:
    options = LakeOptions(
        cluster="aggregate", checkpoint=default_checkpoint(settings, "aggregate"), status_interval_s=2.0
    )
    LakeJob(spark, settings, options, lambda t: t in topics).run(until_caught_up=True)


def windows_of_topic(bootstrap: str, topic: str) -> Counter:
    """Ground truth: messages per audit window actually in `topic`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"truth-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen, idle_since = Counter(), time.monotonic()
    while time.monotonic() - idle_since < 3:
        batch = [m for m in consumer.consume(5000, timeout=0.5) if m.error() is None]
        if batch:
            idle_since = time.monotonic()
        for message in batch:
            seen[window_start(message.timestamp()[1])] += 1
    consumer.close()
    return seen


def books(spark, settings, logical_topic: str) -> dict[tuple[int, str], tuple]:
    frame = delta_io.read_table(spark, lake_of(settings), COMPLETENESS.name).where(f"logical_topic = '{logical_topic}'")
    return {
        (int(r.window_start.timestamp() * 1000), r.tier): (r.status, r.expected, r.observed, r.missing, r.duplicated)
        for r in frame.collect()
    }


def test_no_fault_is_exact_a_drop_is_exact_and_duplicates_show_as_over(spark, settings_factory, topic_factory):
    settings = settings_factory()
    intact, lossy = topic_factory("dc1", partitions=PARTITIONS), topic_factory("dc1", partitions=PARTITIONS)
    topics, replicas = [intact, lossy], [f"dc1.{intact}", f"dc1.{lossy}"]
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    produce(settings, topics, 3000)
    count_cluster(settings, "dc1", topics)
    mirror(settings, topics, group=f"mirror-{settings.audit_topic}", fault=DropFault(f"^{lossy}$", count=37))
    count_cluster(settings, "aggregate", replicas)
    land(spark, settings, replicas)
    reconcile(spark, settings)

    aggregate = settings.cluster("aggregate").bootstrap_servers
    source_windows = windows_of_topic(settings.cluster("dc1").bootstrap_servers, lossy)
    target_windows = windows_of_topic(aggregate, f"dc1.{lossy}")
    dropped = {
        w: source_windows[w] - target_windows[w] for w in source_windows if source_windows[w] != target_windows[w]
    }
    assert sum(dropped.values()) == 37

    exact = books(spark, settings, f"dc1.{intact}")
    assert len(source_windows) == 3 and len(exact) == 3 * 3, "three windows x (dc1, aggregate, lake)"
    assert all(
        status == "complete" and expected == observed == 1000 for status, expected, observed, *_ in exact.values()
    ), exact
    lost = books(spark, settings, f"dc1.{lossy}")
    for window in source_windows:
        assert lost[(window, "dc1")] == ("complete", 1000, 1000, 0, 0)
        for tier in ("aggregate", "lake"):
            missing = dropped.get(window, 0)
            assert lost[(window, tier)] == (("incomplete" if missing else "complete"), 1000, 1000 - missing, missing, 0)
    bronze = delta_io.read_table(spark, lake_of(settings), BRONZE.name)
    assert bronze.count() == bronze.select("topic", "partition", "offset").distinct().count() == 6000 - 37

    # A second replicator group copies the intact topic (and the audit topic) again: at-least-once duplicates.
    mirror(settings, [intact], group=f"again-{settings.audit_topic}")
    count_cluster(settings, "aggregate", replicas)
    land(spark, settings, replicas)
    reconcile(spark, settings)

    doubled = books(spark, settings, f"dc1.{intact}")
    for window in source_windows:
        assert doubled[(window, "dc1")] == ("complete", 1000, 1000, 0, 0), "audit records replicated twice count once"
        for tier in ("aggregate", "lake"):
            assert doubled[(window, tier)] == ("over", 1000, 2000, 0, 1000)
    assert books(spark, settings, f"dc1.{lossy}") == lost, "the other topic's books are untouched"


# Five micro-batches of 4,000 (`--max-offsets-per-trigger`): the kill lands in the second to the fifth. A
# micro-batch costs seconds of Delta commits and counting whatever its size: ten cost the suite minutes more
# under load and proved nothing more.
KILLED_LAKE_MESSAGES = 8_000


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow(minutes=2)
def test_lake_job_killed_at_random_moments_lands_every_row_and_count_once(
    spark, settings_factory, topic_factory, tmp_path
):
    topic = topic_factory("aggregate", partitions=PARTITIONS)
    # Its own topic only: `kaudit lake` reads the session's aggregate cluster, which holds every test's topics.
    settings = settings_factory(topics=TopicSelection(include=(f"^{topic}$",)))
    ensure_topics({"bootstrap.servers": settings.cluster("aggregate").bootstrap_servers}, {settings.audit_topic: 1})
    aggregate = {"bootstrap.servers": settings.cluster("aggregate").bootstrap_servers}
    with AuditedProducer(
        config=aggregate, cluster="aggregate", audit_topic=settings.audit_topic, service="e2e"
    ) as producer:
        for i in range(KILLED_LAKE_MESSAGES):
            producer.produce(topic, value=b"x" * 50, timestamp=START + i * 120, partition=i % PARTITIONS)
    config = write_config(settings, tmp_path / "kaudit.toml")
    command = [
        sys.executable,
        "-m",
        "audit.cli",
        "--config",
        str(config),
        "lake",
        "--cluster",
        "aggregate",
        "--max-offsets-per-trigger",
        "2000",
        "--until-caught-up",
    ]
    rng = random.Random(7)
    kills = 0
    # One kill here (the soak kills the lake job again at random moments under load, and checks bronze
    # against the hub the same way): each run costs a Spark start.
    # A session of its own, so the kill takes the job whole, its Spark JVM too, as an OOM kill or a lost host does:
    # an orphaned JVM would still be writing the checkpoint's offsets when the restart begins.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # Mid-stream: after its first micro-batch landed (of four), at a random moment of the next ones. A fixed
    # delay from the start can miss the stream: with a fast JVM start it has finished.
    commits = Path(default_checkpoint(settings, "aggregate")) / "commits"
    wait_for(lambda: commits.is_dir() and any(commits.iterdir()), "the lake job's first micro-batch", 300, 0.2)
    time.sleep(rng.uniform(0.0, 2.0))
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        kills += 1
    process.wait(30)
    wait_for(lambda: not group_alive(process.pid), "the killed lake job's Spark JVM to be gone", 30, 0.2)
    assert kills >= 1
    # The restart runs as `kaudit lake` does (its lease, checkpoint, options and topics), in this worker's Spark:
    # taking the killed job's lease at once and resuming its checkpoint and bronze are the same in any process,
    # and a second JVM would cost a Spark start.
    options = LakeOptions(
        cluster="aggregate", checkpoint=default_checkpoint(settings, "aggregate"), max_offsets_per_trigger=2000
    )
    with LakeLease(lake_of(settings), BRONZE.name, purpose="lake --cluster aggregate"):
        LakeJob(spark, settings, options, settings.topics.matches).run(until_caught_up=True)

    bronze = delta_io.read_table(spark, lake_of(settings), BRONZE.name).where(f"topic = '{topic}'")
    assert bronze.count() == bronze.select("partition", "offset").distinct().count() == KILLED_LAKE_MESSAGES
    records, rejects = read_audit_topic(aggregate, settings.audit_topic)
    lake = {w: n for (t, w), n in counts_by_window(records, "lake").items() if t == topic}
    producer_counts = {w: n for (t, w), n in counts_by_window(records, "producer").items() if t == topic}
    assert not rejects and lake == producer_counts and sum(lake.values()) == KILLED_LAKE_MESSAGES


def test_tombstones_are_counted_at_every_tier_like_any_message(spark, settings_factory, topic_factory):
    """Null values (deletes on a compacted topic) count as messages of 0 value bytes in every tier; a window
    of tombstones only does not crash the lake job (the sum of null sizes is null)."""
    settings = settings_factory()
    topic = topic_factory("dc1", partitions=PARTITIONS, config={"cleanup.policy": "compact"})
    replica = f"dc1.{topic}"
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    produce(settings, [topic], 300, tombstones=True)
    count_cluster(settings, "dc1", [topic])
    mirror(settings, [topic], group=f"mirror-{settings.audit_topic}")
    count_cluster(settings, "aggregate", [replica])
    land(spark, settings, [replica])
    reconcile(spark, settings)

    judged = books(spark, settings, replica)
    assert len(judged) == 3 * 3, judged
    assert all(row == ("complete", 100, 100, 0, 0) for row in judged.values()), judged
    bronze = delta_io.read_table(spark, lake_of(settings), BRONZE.name).where(f"topic = '{replica}'")
    assert bronze.count() == bronze.where("value IS NULL").count() == 300
