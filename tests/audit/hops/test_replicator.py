"""The replicator: its watermark rule as a table; against real clusters: fidelity, the drop hook,
new topics, cycles, outages, watermarks in its status records."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from audit.contract.naming import IdentityNaming, PrefixNaming
from audit.contract.record import AUDIT_TIME_HEADER, PROVENANCE_HEADER, Kind, PartitionStatus
from audit.contract.watermarks import watermark_ms
from audit.hops.faults import DropFault
from audit.hops.replicator import status as replicator_status
from audit.hops.replicator import topics as replicator_topics
from audit.hops.replicator.hop import Replicator, ReplicatorOptions
from audit.hops.replicator.topics import create_target_topics
from audit.io.audit_log import read_audit_topic
from audit.io.clients import ensure_topics
from audit.io.logs import KeyValueFormatter
from audit.local.clusters import LocalClusters
from tests.conftest import cache_dir

kafka = pytest.mark.kafka

PREFIX = PrefixNaming(frozenset({"dc1", "aggregate"}))
NOW_MS = 1_800_000_000_000
BASE_TS_MS = 1_700_000_000_000  # timestamp of message i is BASE_TS_MS + i


def status(partition: int, lag: int, last_ms: int | None) -> PartitionStatus:
    return PartitionStatus(partition=partition, position=100, end_offset=100 + lag, lag=lag, last_audit_time_ms=last_ms)


@pytest.mark.parametrize(
    "partitions, expected, why",
    [
        ([], NOW_MS, "no partitions: nothing is behind"),
        ([status(0, 0, None)], NOW_MS, "caught up, nothing ever copied: everything so far is seen"),
        ([status(0, 0, 5)], NOW_MS, "caught up: now, not the last message's time"),
        ([status(0, 3, 5)], 5, "behind: the last acknowledged message's time"),
        ([status(0, 3, None)], None, "behind with no acknowledged message: unknown"),
        ([status(0, 3, 9), status(1, 2, 7), status(2, 0, 1)], 7, "the slowest partition decides"),
        ([status(0, 3, 9), status(1, 2, None)], None, "one unknown partition makes the watermark unknown"),
        ([status(0, 1, NOW_MS + 50)], NOW_MS, "a message from the future never moves it past now"),
    ],
)
def test_watermark_rule(partitions, expected, why):
    assert watermark_ms(partitions, NOW_MS) == expected, why


def produce(bootstrap: str, topic: str, count: int, *, partitions: int, tag: str = "") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=b"k%d" % (i % 977),
                    value=b"%s-%d-" % (tag.encode(), i) + bytes([i % 256]) * (i % 40),
                    headers=[("seq", b"%d" % i), ("tag", tag.encode())],
                    timestamp=1_700_000_000_000 + i,
                    partition=i % partitions,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    while time.monotonic() < deadline:
        batch = [m for m in consumer.consume(5000, timeout=0.5) if m.error() is None]
        messages.extend(batch)
        if len(messages) >= expected:
            quiet_until = quiet_until or time.monotonic() + 1.0  # read a little longer to catch extras
            if time.monotonic() >= quiet_until:
                break
    consumer.close()
    return messages


def replicator(source: str, target: str, options: ReplicatorOptions, naming, select, fault=None) -> Replicator:
    return Replicator(
        {"bootstrap.servers": source}, {"bootstrap.servers": target}, options, naming, select, fault=fault
    )


def options_for(unique_name, **overrides) -> ReplicatorOptions:
    return ReplicatorOptions(
        source="dc1",
        target="aggregate",
        audit_topic=unique_name("audit"),
        group_id=unique_name("mirror"),
        commit_interval_s=0.5,
        status_interval_s=1.0,
        topic_refresh_s=1.0,
        **overrides,
    )


@kafka
def test_copies_200k_messages_byte_identical_with_partitions_timestamps_and_headers(
    local_clusters, topic_factory, unique_name
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topics = [topic_factory("dc1", partitions=4) for _ in range(3)]
    for topic in topics:
        produce(dc1, topic, 66_667, partitions=4, tag=topic)
    options = options_for(unique_name)

    began = time.monotonic()
    stats = replicator(dc1, aggregate, options, PREFIX, lambda t: t in topics).run(
        until_caught_up=True, max_seconds=240
    )
    print(f"replicated {stats.copied:,} messages in {time.monotonic() - began:.1f} s")

    assert {topic: stats.copied_by_topic[topic] for topic in topics} == {topic: 66_667 for topic in topics}
    assert stats.errors == 0
    for topic in topics:
        source = read_all(dc1, topic, 66_667)
        copies = read_all(aggregate, f"dc1.{topic}", 66_667)
        assert len(copies) == len(source) == 66_667
        by_position = {(m.partition(), m.offset()): m for m in copies}
        for original in source:
            copy = by_position[(original.partition(), original.offset())]
            assert (copy.key(), copy.value(), copy.timestamp()) == (
                original.key(),
                original.value(),
                original.timestamp(),
            )
            assert copy.headers() == original.headers() + [(PROVENANCE_HEADER, b"dc1")]


@kafka
def test_a_target_topic_not_yet_in_the_metadata_is_not_read_until_it_is(
    local_clusters, topic_factory, unique_name, monkeypatch
):
    """A topic just created can be absent from a KRaft broker's metadata for a moment (as often as one
    creation in five on a busy cluster). Copying into it then would leave the partition to the default
    partitioner, whose key hash moves most messages: the replicator does not read the source topic until
    a refresh finds the target's partitions. Here the first refresh finds none."""
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=4)
    produce(dc1, topic, 200, partitions=4)
    refreshes = []

    def metadata_late_the_first_time(*args, **kwargs):
        visible = create_target_topics(*args, **kwargs)
        refreshes.append(visible)
        return {} if len(refreshes) == 1 else visible

    monkeypatch.setattr(replicator_topics, "create_target_topics", metadata_late_the_first_time)
    options = replace(options_for(unique_name), topic_refresh_s=3.0)
    stats = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic).run(until_caught_up=True, max_seconds=60)

    copies = read_all(aggregate, f"dc1.{topic}", 200, timeout_s=20)
    moved = [(m.partition(), m.value()) for m in copies if m.partition() != int(dict(m.headers())["seq"]) % 4]
    assert len(copies) == 200 and not moved, f"{len(moved)} copies on another partition than their source"
    assert stats.copied_by_topic[topic] == 200 and len(refreshes) >= 2


@kafka
def test_a_source_topic_its_broker_does_not_describe_yet_is_created_at_a_later_refresh(
    local_clusters, topic_factory, unique_name
):
    """The consumer's metadata can name a topic before the broker asked for its configs knows it (another
    broker, or the same one a moment later): that topic waits for a later refresh, the others go on."""
    from confluent_kafka.admin import AdminClient

    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    known, unknown = topic_factory("dc1", partitions=2), unique_name("not-yet")
    names = {known: f"dc1.{known}", unknown: f"dc1.{unknown}"}

    ready = create_target_topics(
        AdminClient({"bootstrap.servers": dc1}),
        AdminClient({"bootstrap.servers": aggregate}),
        names,
        {known: 2, unknown: 3},
        target="aggregate",
        timeout_s=10,
    )

    assert ready == {known: 2}
    assert names[unknown] not in AdminClient({"bootstrap.servers": aggregate}).list_topics(timeout=10).topics


@kafka
def test_drop_hook_loses_exactly_n_messages(local_clusters, topic_factory, unique_name):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    lossy, intact = topic_factory("dc1", partitions=2), topic_factory("dc1", partitions=2)
    produce(dc1, lossy, 1000, partitions=2)
    produce(dc1, intact, 1000, partitions=2)
    fault = DropFault(f"^{lossy}$", count=37)

    stats = replicator(
        dc1, aggregate, options_for(unique_name), PREFIX, lambda t: t in (lossy, intact), fault=fault
    ).run(until_caught_up=True, max_seconds=120)

    assert stats.dropped == 37
    assert len(read_all(aggregate, f"dc1.{lossy}", 963)) == 963
    assert len(read_all(aggregate, f"dc1.{intact}", 1000)) == 1000


@kafka
def test_a_topic_created_while_running_is_replicated_within_the_refresh_interval(
    local_clusters, topic_factory, unique_name, caplog
):
    # Under load the copies can miss the wait below, and a count alone does not say why: a failure shows the
    # hops' info lines (topics created and mirrored), with their fields and times.
    caplog.set_level(logging.INFO, logger="audit.hops")
    caplog.handler.setFormatter(KeyValueFormatter())
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    prefix = unique_name("late")
    mirror = replicator(dc1, aggregate, options_for(unique_name), PREFIX, lambda t: t.startswith(prefix))
    runner = threading.Thread(target=mirror.run, kwargs={"max_seconds": 60})
    started = time.monotonic()
    runner.start()
    try:
        time.sleep(2)
        topic = topic_factory("dc1", partitions=3, name=f"{prefix}-new", config={"retention.ms": "86400000"})
        produce(dc1, topic, 300, partitions=3)
        began = time.monotonic()
        copies = read_all(aggregate, f"dc1.{topic}", 300, timeout_s=30)
        assert len(copies) == 300, (
            f"{len(copies)} of 300 copied; the 300 were produced by {began - started:.1f} s after the replicator "
            f"started, which is {'still running' if runner.is_alive() else 'no longer running'}:\n{caplog.text}"
        )
        assert time.monotonic() - began < 15
    finally:
        mirror.stop()
        runner.join(60)
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": aggregate})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, f"dc1.{topic}")])
    configs = next(iter(described.values())).result()
    assert configs["retention.ms"].value == "86400000", "the source's topic configs are copied"


@kafka
def test_active_active_with_identity_naming_never_loops(local_clusters, topic_factory, unique_name):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = unique_name("both")
    topic_factory("dc1", partitions=2, name=topic)
    topic_factory("aggregate", partitions=2, name=topic)
    produce(dc1, topic, 500, partitions=2, tag="dc1")
    produce(aggregate, topic, 500, partitions=2, tag="aggregate")
    audit = unique_name("audit")
    forward = Replicator(
        {"bootstrap.servers": dc1},
        {"bootstrap.servers": aggregate},
        ReplicatorOptions(
            source="dc1",
            target="aggregate",
            audit_topic=audit,
            group_id=unique_name("fw"),
            commit_interval_s=0.5,
            topic_refresh_s=1.0,
        ),
        IdentityNaming(),
        lambda t: t == topic,
    )
    backward = Replicator(
        {"bootstrap.servers": aggregate},
        {"bootstrap.servers": dc1},
        ReplicatorOptions(
            source="aggregate",
            target="dc1",
            audit_topic=audit,
            group_id=unique_name("bw"),
            commit_interval_s=0.5,
            topic_refresh_s=1.0,
        ),
        IdentityNaming(),
        lambda t: t == topic,
    )
    runners = [threading.Thread(target=r.run, kwargs={"max_seconds": 25}) for r in (forward, backward)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(60)

    for bootstrap in (dc1, aggregate):
        messages = read_all(bootstrap, topic, 1000, timeout_s=30)
        tags = defaultdict(int)
        for message in messages:
            tags[dict(message.headers())["tag"]] += 1
        assert dict(tags) == {b"dc1": 500, b"aggregate": 500}, "each message once per cluster, no echoes"
    assert forward.stats.skipped >= 500 and backward.stats.skipped >= 500  # the copies came round and were refused


@kafka
def test_target_down_30_s_loses_nothing_and_is_reported_as_a_stall(tmp_path, unique_name):
    clusters = LocalClusters(["src", "dst"], state_dir=tmp_path, cache_dir=cache_dir())
    clusters.up()
    try:
        source, target = clusters["src"].bootstrap_servers, clusters["dst"].bootstrap_servers
        ensure_topics({"bootstrap.servers": source}, {"orders": 3, "_audit": 1})
        options = ReplicatorOptions(
            source="src",
            target="dst",
            commit_interval_s=0.5,
            status_interval_s=1.0,
            topic_refresh_s=60.0,
            stall_after_s=5.0,
        )
        mirror = Replicator(
            {"bootstrap.servers": source},
            {"bootstrap.servers": target},
            options,
            PrefixNaming(frozenset({"src", "dst"})),
            lambda t: t == "orders",
        )
        runner = threading.Thread(target=mirror.run, kwargs={"max_seconds": 150})
        runner.start()
        produce(source, "orders", 5000, partitions=3, tag="before")
        time.sleep(3)
        clusters["dst"].stop()
        produce(source, "orders", 5000, partitions=3, tag="during")
        time.sleep(30)
        stalled_while_down = mirror.stats.stalled
        clusters["dst"].start()
        deadline = time.monotonic() + 90
        while (mirror.stats.copied < 10_000 or mirror.stats.stalled) and time.monotonic() < deadline:
            time.sleep(0.5)
        mirror.stop()
        runner.join(60)

        assert stalled_while_down and mirror.stats.stall_episodes >= 1
        assert not mirror.stats.stalled, "recovery is reported"
        copies = read_all(target, "src.orders", 10_000)
        seen = {(dict(m.headers())["tag"], dict(m.headers())["seq"]) for m in copies}
        assert len(seen) == 10_000, "nothing lost"
        records, _ = read_audit_topic({"bootstrap.servers": source}, "_audit")
        statuses = [r for r in records if r.kind == Kind.STATUS and r.tier == "dst"]
        assert any(r.stalled for r in statuses) and not statuses[-1].stalled

        # Stopped (as by SIGTERM) while the target is down: it exits within a bound and commits
        # nothing the target did not acknowledge; a later run copies the rest.
        stopping = Replicator(
            {"bootstrap.servers": source},
            {"bootstrap.servers": target},
            replace(options, client_timeout_s=5.0),
            PrefixNaming(frozenset({"src", "dst"})),
            lambda t: t == "orders",
        )
        runner = threading.Thread(target=stopping.run, kwargs={"max_seconds": 150})
        runner.start()
        time.sleep(3)
        clusters["dst"].stop()
        produce(source, "orders", 3000, partitions=3, tag="stopping")
        time.sleep(3)
        asked = time.monotonic()
        stopping.stop()
        runner.join(60)
        took_s = time.monotonic() - asked
        print(f"stopped in {took_s:.1f} s with the target down")
        # One wait for acknowledgements (client_timeout_s), not one per closing step.
        assert not runner.is_alive() and took_s < 2 * 5.0, f"stop took {took_s:.1f} s with the target down"
        clusters["dst"].start()
        watcher = Consumer({"bootstrap.servers": source, "group.id": options.group})
        committed = watcher.committed([TopicPartition("orders", p) for p in range(3)], timeout=10)
        watcher.close()
        assert sum(tp.offset for tp in committed) == 10_000, "nothing past what the target acknowledged"
        Replicator(
            {"bootstrap.servers": source},
            {"bootstrap.servers": target},
            options,
            PrefixNaming(frozenset({"src", "dst"})),
            lambda t: t == "orders",
        ).run(until_caught_up=True, max_seconds=120)
        copies = read_all(target, "src.orders", 13_000)
        assert len({(dict(m.headers())["tag"], dict(m.headers())["seq"]) for m in copies}) == 13_000
    finally:
        clusters.down()


def statuses_of(bootstrap: str, audit_topic: str, topic: str) -> list:
    records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, audit_topic)
    assert rejects == []
    return [r for r in records if r.kind == Kind.STATUS and r.tier == "aggregate" and r.topic == topic]


@kafka
def test_status_watermark_trails_the_uncopied_messages_and_is_now_once_caught_up(
    local_clusters, topic_factory, unique_name
):
    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    produce(dc1, topic, 1000, partitions=1)  # everything in partition 0; partition 1 stays empty (lag 0)
    options = options_for(unique_name, batch_size=100)
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    mirror.open()
    try:
        mirror.refresh_topics()
        while mirror.stats.copied == 0:  # copy exactly one batch: offsets 0..99 of partition 0
            mirror.copy_batch(mirror._consumer.consume(options.batch_size, timeout=1))
            mirror._producer.flush(30)
        copied = mirror.stats.copied
        mirror.emit_status(mirror.check_stall())
        mirror._status_producer.flush(30)
        lagging = statuses_of(dc1, options.audit_topic, topic)[-1]

        while mirror.stats.copied < 1000:
            mirror.copy_batch(mirror._consumer.consume(options.batch_size, timeout=1))
            mirror._producer.flush(30)
        mirror.emit_status(mirror.check_stall())
        mirror._status_producer.flush(30)
        caught_up = statuses_of(dc1, options.audit_topic, topic)[-1]
    finally:
        mirror.close()

    first_uncopied_ms = BASE_TS_MS + copied
    assert 0 < copied < 1000 and sum(p.lag for p in lagging.partitions) == 1000 - copied
    assert lagging.watermark_ms == first_uncopied_ms - 1, (
        "the last acknowledged message's time, before every un-copied one"
    )
    assert {p.partition: p.last_audit_time_ms for p in lagging.partitions} == {0: first_uncopied_ms - 1, 1: None}
    assert all(p.lag == 0 for p in caught_up.partitions)
    assert caught_up.partitions[0].last_audit_time_ms == BASE_TS_MS + 999
    assert abs(caught_up.watermark_ms - time.time() * 1000) < 10_000, "caught up: the watermark is now"
    assert caught_up.watermark_ms == caught_up.emitted_at_ms


def test_pause_fault_stalls_then_recovers_without_loss(local_clusters, topic_factory, unique_name):
    from audit.hops.faults import PauseFault

    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    produce(dc1, topic, 2000, partitions=2)
    mirror = replicator(dc1, aggregate, options_for(unique_name, stall_after_s=2.0), PREFIX, lambda t: t == topic)
    mirror.pause = PauseFault(after_s=0.0, for_s=8.0)
    runner = threading.Thread(target=mirror.run, kwargs={"max_seconds": 60})
    runner.start()
    try:
        deadline = time.monotonic() + 8
        while not mirror.stats.stalled and time.monotonic() < deadline:
            time.sleep(0.2)
        assert mirror.stats.stalled and mirror.stats.copied_by_topic[topic] == 0, "paused: lag, no progress, a stall"
        deadline = time.monotonic() + 40
        while (mirror.stats.copied_by_topic[topic] < 2000 or mirror.stats.stalled) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert mirror.stats.copied_by_topic[topic] == 2000 and not mirror.stats.stalled
    finally:
        mirror.stop()
        runner.join(60)
    assert len(read_all(aggregate, f"dc1.{topic}", 2000)) == 2000


@pytest.mark.parametrize(
    "headers, path, kind, expected, why",
    [
        ([], [], 1, [(PROVENANCE_HEADER, b"dc1")], "CreateTime: the provenance path only"),
        (
            [("a", b"1"), (PROVENANCE_HEADER, b"dc0")],
            ["dc0"],
            1,
            [("a", b"1"), (PROVENANCE_HEADER, b"dc0,dc1")],
            "the path grows; other headers stay",
        ),
        ([], [], 2, [(PROVENANCE_HEADER, b"dc1"), (AUDIT_TIME_HEADER, b"1700000000000")], "LogAppendTime: the time"),
        (
            [(AUDIT_TIME_HEADER, b"5")],
            [],
            2,
            [(AUDIT_TIME_HEADER, b"5"), (PROVENANCE_HEADER, b"dc1")],
            "an audited producer's time is kept, never replaced",
        ),
    ],
)
def test_copy_headers(headers, path, kind, expected, why):
    from audit.hops.replicator.state import copy_headers

    assert copy_headers(headers, path, "dc1", kind, 1_700_000_000_000) == expected, why


def test_a_catch_up_names_the_lag_and_where_this_instance_stands_on_each_partition(caplog, unique_name):
    """The `catching up` line of a run until caught up (no broker: the replicator is built, never opened)."""
    from audit.hops.replicator.state import PartitionFlow

    mirror = replicator("127.0.0.1:1", "127.0.0.1:1", options_for(unique_name), PREFIX, lambda t: True)
    mirror.flows[("orders", 0)] = PartitionFlow(committed=10, acked=12, next_offset=15)
    caplog.set_level(logging.INFO, logger=replicator_status.__name__)
    caplog.handler.setFormatter(KeyValueFormatter())

    mirror._log_behind({("orders", 0): 7, ("orders", 1): 3})

    [line] = [caplog.handler.format(r) for r in caplog.records if r.getMessage() == "catching up"]
    assert "partitions_behind=2" in line and "lag=10" in line, line
    assert "orders[0]:7:committed=10,acked=12,next=15,in-flight=0" in line, line
    assert "orders[1]:3:not-assigned-here" in line, f"a partition another instance copies: {line}"
