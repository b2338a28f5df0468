"""During a fault, not only after it (invariant 8): a broker killed with kill -9 and back 8 s later
while a service runs. Each long-running service commits again within 30 s of its broker's return,
and stops within 15 s of SIGTERM right after. The services run as `kaudit` processes, as in production."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from audit.io.clients import ensure_topics
from audit.local.clusters import LocalClusters
from audit.settings import ClusterSettings, Settings
from tests.conftest import cache_dir, write_config
from tests.traffic import SteadyProducer
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

RECOVERY_S = 30.0
STOP_S = 15.0
DOWN_S = 8.0
TOPIC, PARTITIONS = "orders", 3


class CommittedProbe:
    """Reads a group's committed offsets on TOPIC (summed) without joining the group; None while the
    broker does not answer."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def __call__(self) -> int | None:
        try:
            offsets = self.consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=2)
        except KafkaException:
            return None
        return sum(max(tp.offset, 0) for tp in offsets)

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def clusters(tmp_path):
    pair = LocalClusters(["src", "dst"], state_dir=tmp_path / "clusters", cache_dir=cache_dir())
    pair.up()
    try:
        ensure_topics({"bootstrap.servers": pair["src"].bootstrap_servers}, {TOPIC: PARTITIONS, "_audit": 1})
        yield pair
    finally:
        pair.down()


def start_service(tmp_path: Path, clusters: LocalClusters, *args: str) -> subprocess.Popen:
    settings = Settings(
        clusters=tuple(
            ClusterSettings(name=name, bootstrap_servers=clusters[name].bootstrap_servers, local=False)
            for name in ("src", "dst")
        ),
        audit_topic="_audit",
        state_dir=tmp_path / "state",
        cache_dir=cache_dir(),
        flush_interval_s=1.0,
    )
    config = write_config(settings, tmp_path / "kaudit.toml")
    log = open(tmp_path / f"{args[0]}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "audit.cli", "--config", str(config), *args], stdout=log, stderr=log)


def recovers_and_stops(process: subprocess.Popen, clusters: LocalClusters, crashed: str, group: str, log: Path):
    """Kill `crashed`'s broker mid-work, bring it back after DOWN_S; (seconds to the next commit, seconds to exit)."""
    committed = CommittedProbe(clusters["src"].bootstrap_servers, group)
    try:
        assert wait_until(lambda: (committed() or 0) > 0, 60) is not None, log.read_text()[-3000:]
        before = committed()
        clusters[crashed].kill()
        time.sleep(DOWN_S)
        clusters[crashed].start()
        recovery_s = wait_until(lambda: (committed() or 0) > before, 120)
    finally:
        committed.close()
    assert process.poll() is None, f"the service died: {log.read_text()[-3000:]}"
    process.send_signal(signal.SIGTERM)
    began = time.monotonic()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
    stop_s = time.monotonic() - began
    print(
        f"{log.stem}, {crashed} broker down {DOWN_S:g} s: next commit {recovery_s} s after its return, "
        f"exit {stop_s:.1f} s after SIGTERM"
    )
    return recovery_s, stop_s


@pytest.mark.parametrize("crashed", ["src"])
def test_the_counter_commits_again_within_30_s_of_its_broker_and_stops_within_15_s(tmp_path, clusters, crashed):
    with SteadyProducer(
        clusters["src"].bootstrap_servers, TOPIC, partitions=PARTITIONS, rate=100, prefix=b"m", flush_s=0
    ):
        process = start_service(tmp_path, clusters, "count", "--cluster", "src")
        recovery_s, stop_s = recovers_and_stops(
            process, clusters, crashed, "kaudit-counter-src", tmp_path / "count.log"
        )
    assert recovery_s is not None and recovery_s <= RECOVERY_S, f"no commit {recovery_s} s after the broker's return"
    assert stop_s <= STOP_S, f"SIGTERM took {stop_s:.1f} s"


@pytest.mark.parametrize("crashed", ["src", "dst"])
def test_the_replicator_commits_again_within_30_s_of_either_broker_and_stops_within_15_s(tmp_path, clusters, crashed):
    with SteadyProducer(
        clusters["src"].bootstrap_servers, TOPIC, partitions=PARTITIONS, rate=100, prefix=b"m", flush_s=0
    ):
        process = start_service(tmp_path, clusters, "mirror", "--from", "src", "--to", "dst")
        recovery_s, stop_s = recovers_and_stops(
            process, clusters, crashed, "kaudit-mirror-src-dst", tmp_path / "mirror.log"
        )
    assert recovery_s is not None and recovery_s <= RECOVERY_S, f"no commit {recovery_s} s after the broker's return"
    assert stop_s <= STOP_S, f"SIGTERM took {stop_s:.1f} s"


@pytest.mark.spark
def test_the_lake_job_lands_again_within_30_s_of_its_broker_and_stops_within_15_s(tmp_path, clusters, spark):
    from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint

    settings = Settings(
        clusters=(ClusterSettings(name="src", bootstrap_servers=clusters["src"].bootstrap_servers, local=False),),
        audit_topic="_audit",
        state_dir=tmp_path / "state",
        cache_dir=cache_dir(),
        lake_path=str(tmp_path / "lake"),
    )
    options = LakeOptions(
        cluster="src",
        checkpoint=default_checkpoint(settings, "src"),
        trigger_s=1.0,
        status_interval_s=1.0,
        client_timeout_s=5.0,
        restart_after_s=2.0,
    )
    job = LakeJob(spark, settings, options, lambda topic: topic == TOPIC)
    stop, failures = threading.Event(), []

    def run() -> None:
        try:
            job.run(stop=stop)
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            failures.append(exc)

    with SteadyProducer(
        clusters["src"].bootstrap_servers, TOPIC, partitions=PARTITIONS, rate=100, prefix=b"m", flush_s=0
    ):
        runner = threading.Thread(target=run)
        runner.start()
        assert wait_until(lambda: job.stats.rows > 0 or failures, 120) is not None and not failures, failures
        clusters["src"].kill()
        time.sleep(DOWN_S)
        clusters["src"].start()
        before = job.stats.rows
        recovery_s = wait_until(lambda: job.stats.rows > before or not runner.is_alive(), 120)
        stop.set()
        began = time.monotonic()
        runner.join(60)
        stop_s = time.monotonic() - began
    print(
        f"lake, src broker down {DOWN_S:g} s: rows again {recovery_s} s after its return, "
        f"{job.stats.restarts} stream restart(s), stopped {stop_s:.1f} s after the request"
    )
    assert not failures, failures
    assert recovery_s is not None and recovery_s <= RECOVERY_S and job.stats.rows > before
    assert stop_s <= STOP_S
