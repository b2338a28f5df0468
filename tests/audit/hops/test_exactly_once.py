"""Exactly-once replication on real brokers (`kaudit mirror --exactly-once`), the replicator run as a
`kaudit` process: kill -9 of the replicator at random moments, kill -9 and restart of either broker,
and a rebalance between two instances, all while a producer writes. Every source message carries a
unique sequence; a read_committed reader of the target must see each one exactly once, and the target's
counter (`kaudit count`) must count per window exactly what the source's counter counts. The same kill -9
run in at-least-once mode must show duplicates, in both checks: the checks can fail."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from audit.contract.errors import KafkaClientError
from audit.hops.replicator.exactly_once import read_positions
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import ensure_topics
from audit.io.offsets import committed_offsets
from audit.local.clusters import LocalClusters
from audit.settings import ClusterSettings, Settings
from audit.settings.topics import TopicSelection
from tests.conftest import cache_dir, write_config
from tests.traffic import SteadyProducer

pytestmark = pytest.mark.kafka

PARTITIONS = 3
DOWN_S = 8.0
GROUP = "kaudit-mirror-src-dst"  # the replicators' group (the default for src -> dst)


def source_traffic(clusters: LocalClusters, topic: str) -> SteadyProducer:
    return SteadyProducer(clusters["src"].bootstrap_servers, topic, partitions=PARTITIONS, rate=400)


def read_all(bootstrap: str, topic: str, *, committed: bool) -> Counter:
    """Every value of `topic`, counted, read to the end (read_committed or not)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    values: Counter = Counter()
    pending = set(partitions)
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=1):
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
                continue
            values[message.value()] += 1
    consumer.close()
    assert not pending, f"{topic}: partitions {pending} not read to the end"
    return values


def compare(source: Counter, target: Counter) -> tuple[int, int]:
    """(lost, duplicates) of the target against the source."""
    assert max(source.values(), default=1) == 1, "the source itself holds duplicates"
    lost = sum(1 for value in source if value not in target)
    duplicates = sum(count - 1 for count in target.values() if count > 1)
    return lost, duplicates


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    pair = LocalClusters(["src", "dst"], state_dir=tmp_path_factory.mktemp("eos-clusters"), cache_dir=cache_dir())
    pair.up()
    try:
        ensure_topics({"bootstrap.servers": pair["src"].bootstrap_servers}, {"_audit": 1})
        yield pair
    finally:
        pair.down()


@pytest.fixture
def topic(clusters, unique_name):
    name = unique_name("eos")
    ensure_topics({"bootstrap.servers": clusters["src"].bootstrap_servers}, {name: PARTITIONS})
    return name


class ReplicatorRun:
    """`kaudit mirror --from src --to dst` processes of one test, each with its own log."""

    def __init__(self, tmp_path: Path, clusters: LocalClusters, topic: str, mode: str) -> None:
        settings = Settings(
            clusters=tuple(
                ClusterSettings(name=name, bootstrap_servers=clusters[name].bootstrap_servers, local=False)
                for name in ("src", "dst")
            ),
            audit_topic="_audit",
            state_dir=tmp_path / "state",
            cache_dir=cache_dir(),
            # the topic at the source, and its copy (src.<topic>) at the target
            topics=TopicSelection(include=(f"(^|\\.){topic}$",)),
        )
        self.config = write_config(settings, tmp_path / "kaudit.toml")
        self.tmp_path, self.mode, self.runs, self.clusters, self.topic = tmp_path, mode, 0, clusters, topic

    def start(self, *args: str, instance: str = "0") -> subprocess.Popen:
        self.runs += 1
        log = open(self.tmp_path / f"mirror-{self.runs}.log", "w")  # noqa: SIM115 - closed with the process
        command = [sys.executable, "-m", "audit.cli", "--config", str(self.config), "mirror", "--from", "src"]
        command += ["--to", "dst", self.mode, "--instance", instance, "--topic-refresh-s", "2", *args]
        return subprocess.Popen(command, stdout=log, stderr=log)

    def catch_up(self, timeout_s: float = 180.0) -> None:
        process = self.start("--until-caught-up")
        try:
            assert process.wait(timeout_s) == 0, self.logs()
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            pytest.fail(f"not caught up in {timeout_s:.0f} s\n{self.logs()}")

    def counted(self, cluster: str) -> dict[int, int]:
        """Messages of the topic (or its copy) per window that `kaudit count --until-caught-up` counts on `cluster`."""
        log = self.tmp_path / f"count-{cluster}.log"
        with open(log, "w") as out:
            command = [sys.executable, "-m", "audit.cli", "--config", str(self.config), "count", "--cluster", cluster]
            done = subprocess.run([*command, "--until-caught-up"], stdout=out, stderr=out, timeout=180)
        assert done.returncode == 0, log.read_text()[-3000:]
        records, _rejects = read_audit_topic({"bootstrap.servers": self.clusters[cluster].bootstrap_servers}, "_audit")
        counts = {  # this test's topic: the clusters and their audit topics serve every test of the module
            w: n for (topic, w), n in counts_by_window(records, cluster).items() if topic.endswith(self.topic)
        }
        assert counts, log.read_text()[-3000:]
        return counts

    def assert_counted_alike(self) -> None:
        at_target, at_source = self.counted("dst"), self.counted("src")
        assert at_target == at_source, f"target {sorted(at_target.items())} != source {sorted(at_source.items())}"

    def logs(self) -> str:
        """The tail of each run's log, a longer one of the latest run."""
        paths = sorted(self.tmp_path.glob("mirror-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        return "\n".join(f"--- {p.name}\n{p.read_text()[-(8000 if p == paths[-1] else 2000) :]}" for p in paths)


def committed_by_the_mirror(clusters: LocalClusters, topic: str) -> int:
    """Source offsets of `topic` the replicators' group has committed, summed (in exactly-once mode:
    committed with the copies' transactions); asked again while a fresh cluster loads its coordinator."""
    watcher = Consumer({"bootstrap.servers": clusters["src"].bootstrap_servers, "group.id": GROUP})
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in committed_offsets(watcher, partitions, timeout_s=60))
    finally:
        watcher.close()


def copied_by_the_mirror(clusters: LocalClusters, topic: str) -> int:
    """How far the replicators have copied `topic`, in source offsets summed: the group's committed offsets,
    or the positions stored with the copies on the target (exactly once) when those are ahead: a run
    killed between its transaction and its group commit leaves them ahead, and its successor's first
    group commit then moves the group's offsets without copying anything."""
    stored = read_positions({"bootstrap.servers": clusters["dst"].bootstrap_servers}, GROUP, timeout_s=60)
    return max(committed_by_the_mirror(clusters, topic), sum(o for (t, _), o in stored.items() if t == topic))


def wait_for_a_commit(mirror: ReplicatorRun, process: subprocess.Popen, since: int, timeout_s: float = 90.0) -> None:
    """Until the running replicator has committed past `since`. A restarted one first waits out its
    killed predecessor's session (10 s) in the group, a fresh cluster's transaction coordinator may take
    seconds to load: a kill at a fixed delay after the start could hit a process that never copied."""
    deadline = time.monotonic() + timeout_s
    while committed_by_the_mirror(mirror.clusters, mirror.topic) <= since:
        assert process.poll() is None, mirror.logs()
        assert time.monotonic() < deadline, f"no commit in {timeout_s:.0f} s\n{mirror.logs()}"
        time.sleep(0.5)


def kill9_run(tmp_path, clusters, topic, mode: str, kills: int = 3) -> tuple[int, int, int, ReplicatorRun]:
    mirror = ReplicatorRun(tmp_path, clusters, topic, mode)
    rng = random.Random()
    with source_traffic(clusters, topic):
        for _ in range(kills):
            since = copied_by_the_mirror(clusters, topic)
            process = mirror.start()
            wait_for_a_commit(mirror, process, since)
            time.sleep(rng.uniform(0.5, 4.0))  # the kill lands somewhere in the copying that follows
            assert process.poll() is None, mirror.logs()
            process.send_signal(signal.SIGKILL)
            process.wait(10)
    before = sum(read_all(clusters["dst"].bootstrap_servers, f"src.{topic}", committed=True).values())
    assert before > 0, mirror.logs()  # the killed runs did copy: the kills hit work in flight
    mirror.catch_up()
    source = read_all(clusters["src"].bootstrap_servers, topic, committed=False)
    target = read_all(clusters["dst"].bootstrap_servers, f"src.{topic}", committed=True)
    lost, duplicates = compare(source, target)
    print(
        f"{mode}, replicator kill -9 x{kills}: {len(source)} source messages ({before} copied before the last run), "
        f"{lost} lost, {duplicates} duplicates"
    )
    return len(source), lost, duplicates, mirror


@pytest.mark.slow
def test_kill_9_of_the_replicator_3_times_leaves_no_loss_and_no_duplicates(tmp_path, clusters, topic):
    sent, lost, duplicates, mirror = kill9_run(tmp_path, clusters, topic, "--exactly-once")
    assert sent > 5000
    assert (lost, duplicates) == (0, 0)
    mirror.assert_counted_alike()


def test_the_same_kills_at_least_once_duplicate(tmp_path, clusters, topic):
    """The checks above can fail: at least once, a kill -9 repeats what was copied since the last commit."""
    sent, lost, duplicates, mirror = kill9_run(tmp_path, clusters, topic, "--no-exactly-once", kills=2)
    assert lost == 0
    assert duplicates > 0
    at_target, at_source = mirror.counted("dst"), mirror.counted("src")
    assert sum(at_target.values()) == sum(at_source.values()) + duplicates


@pytest.mark.parametrize("crashed", ["src", "dst"])
def test_a_broker_killed_and_back_leaves_no_loss_and_no_duplicates(tmp_path, clusters, topic, crashed):
    mirror = ReplicatorRun(tmp_path, clusters, topic, "--exactly-once")
    with source_traffic(clusters, topic):
        process = mirror.start()
        time.sleep(8)
        clusters[crashed].kill()
        time.sleep(DOWN_S)
        clusters[crashed].start()
        time.sleep(15)
    assert process.poll() is None, mirror.logs()
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    mirror.catch_up()
    source = read_all(clusters["src"].bootstrap_servers, topic, committed=False)
    target = read_all(clusters["dst"].bootstrap_servers, f"src.{topic}", committed=True)
    lost, duplicates = compare(source, target)
    print(f"{crashed} broker kill -9, back after {DOWN_S:g} s: {len(source)} messages, {lost} lost, {duplicates} dup")
    assert (lost, duplicates) == (0, 0)
    mirror.assert_counted_alike()


def test_a_rebalance_between_two_instances_leaves_no_loss_and_no_duplicates(tmp_path, clusters, topic):
    mirror = ReplicatorRun(tmp_path, clusters, topic, "--exactly-once")
    with source_traffic(clusters, topic):
        first = mirror.start(instance="a")
        time.sleep(8)
        second = mirror.start(instance="b")  # rebalance: the partitions are shared
        time.sleep(12)
        first.send_signal(signal.SIGKILL)  # rebalance: b takes a's partitions after the session timeout
        first.wait(10)
        time.sleep(15)
        first = mirror.start(instance="a")  # a again, fencing its killed predecessor: shared again
        time.sleep(10)
    for process in (first, second):
        assert process.poll() is None, mirror.logs()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    mirror.catch_up()
    source = read_all(clusters["src"].bootstrap_servers, topic, committed=False)
    target = read_all(clusters["dst"].bootstrap_servers, f"src.{topic}", committed=True)
    lost, duplicates = compare(source, target)
    print(f"rebalances between two instances: {len(source)} messages, {lost} lost, {duplicates} duplicates")
    assert (lost, duplicates) == (0, 0)
    mirror.assert_counted_alike()


def test_status_records_lag_and_retention_gaps_work_in_exactly_once_mode(clusters, topic, unique_name):
    """In-process: a first run copies and reports lag 0; retention deletes offsets while it is down; the
    next run copies the rest once, counts exactly the deleted offsets and reports them as a gap."""
    from audit.contract.naming import PrefixNaming
    from audit.hops.replicator.exactly_once import ExactlyOnceReplicator
    from tests.audit.hops.test_replicator import options_for, produce
    from tests.audit.hops.test_retention_gaps import delete_before, reported_gaps

    src, dst = clusters["src"].bootstrap_servers, clusters["dst"].bootstrap_servers
    options = options_for(unique_name)
    naming = PrefixNaming(frozenset({"dc1", "aggregate"}))

    def run():
        mirror = ExactlyOnceReplicator(
            {"bootstrap.servers": src}, {"bootstrap.servers": dst}, options, naming, lambda t: t == topic
        )
        return mirror, mirror.run(until_caught_up=True, max_seconds=60)

    produce(src, topic, 100, partitions=1)
    first, stats = run()
    assert stats.copied_by_topic[topic] == 100 and stats.lag == 0 and not stats.stalled
    assert first.transactions_committed >= 1 and first.aborts == 0
    produce(src, topic, 50, partitions=1, tag="b")  # offsets 100..149 while it is down
    delete_before(src, topic, 130)
    _, stats = run()
    assert stats.copied_by_topic[topic] == 20
    assert stats.retention_skipped == 30 and stats.lag == 0
    assert reported_gaps(src, options.audit_topic, "aggregate") == {(0, 100, 130)}
    target = read_all(dst, f"dc1.{topic}", committed=True)
    assert sum(target.values()) == len(target) == 120


class FailingOnce:
    """A transactional producer whose first commit fails with `make_error()` instead of committing (the rest goes
    to the real one): the transaction stays open on the broker, for the next producer's init to abort."""

    def __init__(self, producer, make_error) -> None:
        self._producer, self._make_error, self.failed = producer, make_error, False

    def commit_transaction(self, *args):
        if not self.failed:
            self.failed = True
            raise KafkaException(self._make_error(self._producer))
        return self._producer.commit_transaction(*args)

    def __getattr__(self, name: str):
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


def exactly_once_replicator(clusters, topic: str, unique_name, wrap_first):
    """An in-process exactly-once replicator of `topic` whose first producer is `wrap_first(real producer)`;
    returns it and the list of the real producers it made."""
    import dataclasses

    from audit.contract.naming import PrefixNaming
    from audit.hops.replicator.exactly_once import ExactlyOnceReplicator
    from tests.audit.hops.test_replicator import options_for

    options = dataclasses.replace(options_for(unique_name), client_timeout_s=5.0)
    mirror = ExactlyOnceReplicator(
        {"bootstrap.servers": clusters["src"].bootstrap_servers},
        {"bootstrap.servers": clusters["dst"].bootstrap_servers},
        options,
        PrefixNaming(frozenset({"dc1", "aggregate"})),
        lambda t: t == topic,
    )
    made: list = []

    def new_producer(real=mirror._new_producer):
        made.append(real())
        return wrap_first(made[-1]) if len(made) == 1 else made[-1]

    mirror._new_producer = new_producer
    return mirror, made


def test_a_fatal_transaction_error_costs_a_new_producer_not_the_replicator(clusters, topic, unique_name):
    """librdkafka may leave a transactional producer in a fatal state a new one cures (INVALID_TXN_STATE when
    an EndTxn overtakes its AddPartitionsToTxn, #4849). The replicator does not stop there: a new producer
    with the same transactional id takes over, its init aborting the open transaction."""
    from tests.audit.hops.test_replicator import produce

    invalid_state = KafkaError(KafkaError.INVALID_TXN_STATE, "injected: EndTxn before AddPartitionsToTxn", fatal=True)
    mirror, made = exactly_once_replicator(
        clusters, topic, unique_name, lambda producer: FailingOnce(producer, lambda _producer: invalid_state)
    )
    produce(clusters["src"].bootstrap_servers, topic, 300, partitions=PARTITIONS)
    stats = mirror.run(until_caught_up=True, max_seconds=90)

    assert len(made) == 2, "the producer in a fatal state was replaced"
    assert mirror.aborts >= 1 and stats.lag == 0
    target = read_all(clusters["dst"].bootstrap_servers, f"dc1.{topic}", committed=True)
    assert sum(target.values()) == len(target) == 300, "each message exactly once"


def test_a_replicator_fenced_by_another_producer_with_its_id_stops_and_does_not_fence_it_back(
    clusters, topic, unique_name
):
    """Another process took this instance's transactional id (a second instance of the same name, or the
    restarted one while this one was cut off): the broker fences this one. A new producer would fence the other
    back, and the two would take turns: the replicator stops with the broker's error instead."""
    from confluent_kafka import Producer

    from tests.audit.hops.test_replicator import produce

    rival: list = []

    def fenced(producer) -> KafkaError:
        other = Producer(
            {"bootstrap.servers": clusters["dst"].bootstrap_servers, "transactional.id": mirror.transactional_id}
        )
        other.init_transactions(30)  # a real fence: the broker bumps the id's epoch
        rival.append(other)
        try:
            producer.commit_transaction(10)
        except KafkaException as exc:
            return exc.args[0]
        raise AssertionError("the fenced producer committed")

    mirror, made = exactly_once_replicator(clusters, topic, unique_name, lambda producer: FailingOnce(producer, fenced))
    produce(clusters["src"].bootstrap_servers, topic, 300, partitions=PARTITIONS)
    with pytest.raises(KafkaClientError, match="taken over by another instance.*give each instance its own --instance"):
        mirror.run(until_caught_up=True, max_seconds=90)

    assert rival, "the rival producer fenced the replicator's"
    assert len(made) == 1, "no new producer fenced the rival back"
    assert read_all(clusters["dst"].bootstrap_servers, f"dc1.{topic}", committed=True) == Counter()


@pytest.mark.parametrize("stuck_call", ["begin_transaction", "commit_transaction"])
def test_a_transactional_call_that_never_returns_costs_a_new_producer_not_the_replicator(
    clusters, topic, unique_name, stuck_call
):
    """librdkafka may never return from a transactional call after a broker restart (#5511). Past
    the client timeout the replicator leaves that producer to its thread and starts a new one, whose init
    aborts what the stuck one left open: everything is copied, exactly once."""
    import threading

    from tests.audit.hops.test_counter import HangingOnce
    from tests.audit.hops.test_replicator import produce

    src, dst = clusters["src"].bootstrap_servers, clusters["dst"].bootstrap_servers
    released = threading.Event()
    mirror, made = exactly_once_replicator(
        clusters, topic, unique_name, lambda producer: HangingOnce(producer, stuck_call, released)
    )
    produce(src, topic, 300, partitions=PARTITIONS)
    try:
        stats = mirror.run(until_caught_up=True, max_seconds=90)
    finally:
        released.set()

    assert len(made) == 2, "the stuck producer was replaced"
    assert mirror.aborts >= 1 and stats.lag == 0
    target = read_all(dst, f"dc1.{topic}", committed=True)
    assert sum(target.values()) == len(target) == 300, "each message exactly once"
