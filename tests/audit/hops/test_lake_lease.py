"""The lake job commits to bronze only under bronze's lease: once another lake job takes it over, the next
micro-batch writes nothing and emits no count, and the job stops with the error (real Kafka, Spark and Delta)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from audit.contract.errors import LakeError
from audit.contract.tables import BRONZE
from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
from audit.io.lake import lake_of
from audit.io.lease import LakeLease
from tests.audit.io.test_lease import ELSEWHERE, FakeClock

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def produce(settings, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0


def wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_lake_job_whose_lease_was_taken_lands_no_more_and_stops(spark, settings_factory, topic_factory):
    settings = settings_factory()
    topic, lake = topic_factory("dc1"), lake_of(settings)
    produce(settings, topic, 0, 50)
    # The job's clock stands still: by time alone it would stay valid; the lease as the store holds it stops it.
    lease = LakeLease(lake, BRONZE.name, purpose="lake --cluster dc1", ttl_s=60, clock=FakeClock()).acquire()
    # Status rounds (which check the lease too) far apart: the micro-batch's own check is the one that stops it.
    options = LakeOptions(
        cluster="dc1", checkpoint=default_checkpoint(settings, "dc1"), trigger_s=0.5, status_interval_s=600
    )
    job = LakeJob(spark, settings, options, lambda name: name == topic)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            job.run()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: job.stats.rows == 50, "the first 50 rows")
    landed = lake.version(BRONZE.name)

    taker_clock = FakeClock()  # the job stops renewing; a lake job on another host takes bronze over
    options_elsewhere = {"ttl_s": 60, "clock": taker_clock, "sleep": taker_clock.advance, "identity": ELSEWHERE}
    LakeLease(lake, BRONZE.name, purpose="lake --cluster aggregate", **options_elsewhere).acquire()
    produce(settings, topic, 50, 20)
    thread.join(timeout=120)

    assert outcome and isinstance(outcome[0], LakeError), outcome
    assert "'lake --cluster aggregate' on host another-host" in str(outcome[0])
    assert lake.version(BRONZE.name) == landed and job.stats.rows == 50, "nothing landed or counted after it"
    assert lake.delta_table(BRONZE.name).to_pyarrow_table().num_rows == 50
    lease.release()
