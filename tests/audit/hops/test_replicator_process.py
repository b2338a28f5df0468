"""`kaudit mirror` as a process, as an operator runs it: kill -9 at random moments, SIGTERM mid-stream.

Every source message carries a `seq` header unique across the test, so the target can be checked
message by message: nothing lost, and every duplicate accounted for.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.contract.record import Kind
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.io.audit_log import read_audit_topic
from audit.io.clients import watermarks
from tests.waiting import wait_for

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SIGTERM_EXIT_BOUND_S = 30.0


def write_config(path: Path, local_clusters, *, audit_topic: str, prefix: str) -> Path:
    path.write_text(
        f'state_dir = "{path.parent}"\naudit_topic = "{audit_topic}"\n'
        f'[topics]\ninclude = ["^{prefix}$"]\n'
        + "".join(
            f'[[clusters]]\nname = "{name}"\nbootstrap_servers = "{local_clusters[name].bootstrap_servers}"\n'
            f"local = false\n"
            for name in ("dc1", "aggregate")
        )
    )
    return path


def replicator_command(config: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "audit.cli",
        "--config",
        str(config),
        "mirror",
        "--from",
        "dc1",
        "--to",
        "aggregate",
        "--topic-refresh-s",
        "1",
        "--status-interval-s",
        "1",
    ]


def produce_sequenced(
    bootstrap: str,
    topic: str,
    first: int,
    count: int,
    *,
    pause_every: int = 0,
    pause_s: float = 0.0,
    until: threading.Event | None = None,
) -> int:
    """Messages `first` .. `first + count - 1`, each with its number in the `seq` header; paced if asked.
    With `until`, it writes one block of `pause_every` more once it sees that event set at a pause, then stops.
    Returns how many it wrote."""
    failures = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "on_delivery": lambda err, _msg: err and failures.append(err),
        }
    )
    last_block = False
    for seq in range(first, first + count):
        while True:
            try:
                producer.produce(
                    topic,
                    value=b"v%d" % seq,
                    key=b"%d" % (seq % 101),
                    headers=[("seq", b"%d" % seq)],
                    partition=seq % PARTITIONS,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if pause_every and (seq - first + 1) % pause_every == 0:
            producer.flush(30)
            if last_block:
                count = seq - first + 1
                break
            last_block = until is not None and until.is_set()
            time.sleep(pause_s)
    assert producer.flush(60) == 0
    assert failures == [], failures[:3]
    return count


def seqs_at(bootstrap: str, topic: str) -> Counter:
    """How often each `seq` is in `topic`, read to its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    ends = {p: watermarks(consumer, topic, p)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: Counter = Counter()
    positions = {p: 0 for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while any(positions[p] < ends[p] for p in ends):
        assert time.monotonic() < deadline, f"reading {topic}: at {positions}, ends {ends}"
        for message in consumer.consume(5000, timeout=0.5):
            if message.error() is None:
                seen[int(dict(message.headers())["seq"])] += 1
                positions[message.partition()] = message.offset() + 1
    consumer.close()
    return seen


def target_end(bootstrap: str, topic: str) -> int:
    """Messages in `topic` so far (0 while it does not exist)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watch"})
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return 0
        return sum(watermarks(consumer, topic, p)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    consumer.close()
    return {tp.partition: tp.offset for tp in offsets}


def counted_at_target(local_clusters, topic: str, audit_topic: str) -> int:
    """What a real audit counter on the aggregate cluster counts in `topic`."""
    aggregate = {"bootstrap.servers": local_clusters["aggregate"].bootstrap_servers}
    counter = ClusterCounter(
        aggregate,
        CounterOptions(
            cluster="aggregate",
            audit_topic=audit_topic,
            group_id=f"g-{audit_topic}",
            flush_interval_s=0.5,
            topic_refresh_s=1.0,
        ),
        lambda t: t == topic,
    )
    counter.run(until_caught_up=True, max_seconds=120)
    records, rejects = read_audit_topic(aggregate, audit_topic)
    assert rejects == []
    return sum(r.count for r in records if r.kind == Kind.COUNT and r.topic == topic)


def test_kill_minus_nine_loses_nothing_and_every_duplicate_is_counted_downstream(
    local_clusters, topic_factory, unique_name, tmp_path
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=PARTITIONS)
    config = write_config(tmp_path / "kaudit.toml", local_clusters, audit_topic=unique_name("audit"), prefix=topic)
    rounds, per_round = 10, 5000  # paced over about a minute, so that the kills come while it writes
    producing = threading.Thread(
        target=lambda: [
            produce_sequenced(dc1, topic, r * per_round, per_round, pause_every=500, pause_s=0.5) for r in range(rounds)
        ]
    )
    producing.start()
    command = replicator_command(config)
    rng = random.Random(11)
    kills = 0
    while kills < 5 or producing.is_alive():
        before = target_end(aggregate, f"dc1.{topic}")
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
        wait_for(
            lambda before=before: target_end(aggregate, f"dc1.{topic}") > before,
            "the replicator to copy",
            timeout_s=60,
            every_s=0.2,
        )
        time.sleep(rng.uniform(0.0, 3.0))  # kill at a random moment while it copies
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        kills += 1
    producing.join()
    final = subprocess.run(command + ["--until-caught-up"], capture_output=True, text=True, timeout=240)
    assert final.returncode == 0, final.stderr[-3000:]

    source_count = rounds * per_round
    seen = seqs_at(aggregate, f"dc1.{topic}")
    target_count = sum(seen.values())
    duplicates = sum(copies - 1 for copies in seen.values())
    print(f"kill -9 x {kills}: source {source_count:,}, target {target_count:,}, duplicates {duplicates:,}")
    assert kills >= 5
    assert set(seen) == set(range(source_count)), f"lost: {sorted(set(range(source_count)) - set(seen))[:10]}"
    assert duplicates == target_count - source_count
    audit_at_target = topic_factory("aggregate", name=unique_name("audit-agg"))
    assert counted_at_target(local_clusters, f"dc1.{topic}", audit_at_target) == target_count, (
        "duplicates are counted, not hidden"
    )


def test_sigterm_mid_stream_exits_cleanly_and_a_restart_copies_the_rest_without_duplicates(
    local_clusters, topic_factory, unique_name, tmp_path
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=PARTITIONS)
    config = write_config(tmp_path / "kaudit.toml", local_clusters, audit_topic=unique_name("audit"), prefix=topic)
    # The producer writes until the replicator has exited, then one block more (at most 200,000 messages in
    # all): the signal comes mid-stream however long the replicator takes to start on this machine, and
    # some messages are certainly left for the restart.
    exited, produced = threading.Event(), []
    producing = threading.Thread(
        target=lambda: produced.append(
            produce_sequenced(dc1, topic, 0, 200_000, pause_every=1000, pause_s=0.3, until=exited)
        )
    )
    producing.start()
    command = replicator_command(config)
    log_path = tmp_path / "mirror.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        wait_for(lambda: target_end(aggregate, f"dc1.{topic}") > 0, "the replicator to copy", timeout_s=60, every_s=0.2)
        time.sleep(1.0)
        assert producing.is_alive(), "the producer writes until the replicator has exited"
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(SIGTERM_EXIT_BOUND_S + 10)
    exited.set()
    took_s = time.monotonic() - signalled
    assert process.returncode == 0, log_path.read_text()[-3000:]
    assert took_s < SIGTERM_EXIT_BOUND_S
    producing.join()
    (total,) = produced
    at_stop = seqs_at(aggregate, f"dc1.{topic}")
    per_partition = Counter(seq % PARTITIONS for seq in at_stop)
    assert 0 < len(at_stop) < total, f"stopped mid-stream; log:\n{log_path.read_text()[-3000:]}"
    assert max(at_stop.values()) == 1
    assert committed(dc1, "kaudit-mirror-dc1-aggregate", topic) == {p: per_partition[p] for p in range(PARTITIONS)}, (
        "everything delivered is committed, nothing more"
    )

    final = subprocess.run(command + ["--until-caught-up"], capture_output=True, text=True, timeout=240)
    assert final.returncode == 0, final.stderr[-3000:]
    seen = seqs_at(aggregate, f"dc1.{topic}")
    print(
        f"SIGTERM mid-stream: exited 0 in {took_s:.1f} s with {len(at_stop):,} of {total:,} copied; restart copied the rest"
    )
    assert set(seen) == set(range(total))
    assert sum(seen.values()) == total, "zero duplicates after a clean stop"
