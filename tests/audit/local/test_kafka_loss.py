"""The loss Kafka itself makes, found exactly (invariant 3 at a cluster tier).

On a 3-broker cluster, an `acks=1` producer's messages that the partition leader acknowledged before its followers
copied them are gone once the leader dies and a follower leads. The producer tier counted them (the brokers said
yes); the cluster's counter never reads them; the books report exactly that many missing at the cluster tier, in
that partition and window, and the loss email names the topic, tier and partition.
"""

from __future__ import annotations

import email
import os
import signal
import time
from datetime import UTC, datetime
from email import policy
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from audit.alerts.run import AlertJob, run_alerts
from audit.books.run import reconcile
from audit.contract.windows import window_start
from audit.io import plugin
from audit.local.clusters import LocalCluster
from audit.local.mailbox import SavingHandler
from audit.local.processes import free_port
from audit.settings import AlertSettings, ClusterSettings, Settings, SmtpSettings
from tests.audit.local.test_pipeline_e2e import books, count_cluster
from tests.conftest import cache_dir
from tests.waiting import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MINUTE = 60_000
WINDOW = window_start(time.time_ns() // 1_000_000 - 60 * MINUTE)  # final: long past its end and grace
KEPT = 40  # per partition, copied by every replica before the fault
LOST = 25  # acknowledged by the leader alone
LEADER, FOLLOWERS = 1, (2, 3)
# A paused follower may have a fetch waiting at the leader (replica.fetch.wait.max.ms, 500 ms by default): the
# leader would answer it with the next messages into the paused follower's socket, which it reads on resuming.
FETCHES_EXPIRED_S = 2.0


@pytest.fixture
def trio(tmp_path):
    """A controller and three brokers of their own; a paused broker is resumed before the cluster stops."""
    cluster = LocalCluster("trio", state_dir=tmp_path / "clusters", cache_dir=cache_dir(), brokers=3)
    try:
        cluster.start()
        yield cluster
    finally:
        resume(cluster, FOLLOWERS)
        cluster.stop()


@pytest.fixture
def mailbox(tmp_path):
    """`kaudit mailbox`'s SMTP server on loopback: (port, folder of the saved emails)."""
    folder, port = tmp_path / "mail", free_port()
    controller = Controller(SavingHandler(folder), hostname="127.0.0.1", port=port)
    controller.start()
    yield port, folder
    controller.stop()


def pause(cluster: LocalCluster, brokers) -> None:
    for node_id in brokers:
        os.kill(cluster.broker_pid(node_id), signal.SIGSTOP)


def resume(cluster: LocalCluster, brokers) -> None:
    for node_id in brokers:
        pid = cluster.broker_pid(node_id)
        if pid:
            os.kill(pid, signal.SIGCONT)


def create_topics(bootstrap: str, topic: str, audit_topic: str) -> None:
    """`topic`: partition 0 led by LEADER, partition 1 by a follower, three replicas each, acks=1 accepted with
    one in sync and an out-of-sync replica allowed to lead. The audit topic lives on the followers alone, so the
    leader's death takes none of its records."""
    lossy = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=2, replica_assignment=[[LEADER, *FOLLOWERS], [*FOLLOWERS, LEADER]], config=lossy
            ),
            NewTopic(audit_topic, num_partitions=1, replica_assignment=[list(FOLLOWERS)]),
        ]
    )
    for future in futures.values():
        future.result(30)


def produce(producer: Producer, topic: str, partition: int, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        producer.produce(topic, value=b"m%d" % i, key=b"k%d" % i, partition=partition, timestamp=WINDOW + 1000 + i)
    assert producer.flush(30) == 0


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    """The offset up to which every replica in sync holds the partition: what readers can read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def saved_email_texts(folder: Path) -> list[tuple[str, str]]:
    """(subject, plain text) of every email the mailbox saved."""
    messages = [
        email.message_from_bytes(path.read_bytes(), policy=policy.default) for path in sorted(folder.glob("*.eml"))
    ]
    return [(" ".join(str(m["Subject"]).split()), m.get_body(("plain",)).get_content()) for m in messages]


def settings_for(tmp_path: Path, bootstrap: str, smtp_port: int, audit_topic: str) -> Settings:
    return Settings(
        clusters=(ClusterSettings(name="dc1", bootstrap_servers=bootstrap, local=False),),
        audit_topic=audit_topic,
        state_dir=tmp_path / "state",
        cache_dir=cache_dir(),
        lake_path=str(tmp_path / "lake"),
        smtp=SmtpSettings(host="127.0.0.1", port=smtp_port, retries=2, backoff_s=0.01, timeout_s=5),
        alerts=AlertSettings(default_recipients=("audit@example.com",)),
    )


def lose_what_only_the_leader_has(cluster: LocalCluster, producer: Producer, instance_id: str, topic: str) -> None:
    """Followers paused, LOST messages acknowledged by the leader alone and counted by the plugin, the leader
    killed, the followers resumed: one of them leads partition 0 without those messages."""
    bootstrap = cluster.bootstrap_servers
    pause(cluster, FOLLOWERS)
    time.sleep(FETCHES_EXPIRED_S)
    produce(producer, topic, 0, LOST, start=KEPT)
    assert plugin.totals(instance_id) == (2 * KEPT + LOST, 0)
    # The counts go to the audit topic, whose replicas are the paused followers: they land once those resume.
    plugin.flush(instance_id, 1.0)
    cluster.kill_broker(LEADER)
    resume(cluster, FOLLOWERS)
    wait_for(lambda: leader_of(bootstrap, topic, 0) in FOLLOWERS, "a follower to lead partition 0", timeout_s=60)
    assert plugin.flush(instance_id, 60) == 0
    assert high_watermark(bootstrap, topic, 0) == KEPT


def test_messages_only_a_dead_leader_had_are_reported_missing_exactly(trio, spark, mailbox, tmp_path, unique_name):
    smtp_port, mail_folder = mailbox
    bootstrap = trio.bootstrap_servers
    settings = settings_for(tmp_path, bootstrap, smtp_port, unique_name("_audit").replace("-", "_"))
    topic = unique_name("orders")
    create_topics(bootstrap, topic, settings.audit_topic)
    instance_id = unique_name("app")
    config = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5}
    producer = Producer(
        plugin.with_plugin(config, cluster="dc1", audit_topic=settings.audit_topic, instance_id=instance_id)
    )
    for partition in (0, 1):
        produce(producer, topic, partition, KEPT)
    copied = lambda: all(high_watermark(bootstrap, topic, p) == KEPT for p in (0, 1))  # noqa: E731
    wait_for(copied, "every replica to copy the first messages")
    # The counter's group and transactions make the internal topics now, while three brokers can hold them.
    count_cluster(settings, "dc1", [topic])

    lose_what_only_the_leader_has(trio, producer, instance_id, topic)
    del producer
    count_cluster(settings, "dc1", [topic])
    reconcile(spark, settings)

    verdicts = books(spark, settings, f"dc1.{topic}")
    assert verdicts[(WINDOW, "dc1")] == ("incomplete", 2 * KEPT + LOST, 2 * KEPT, LOST, 0)
    report = run_alerts(AlertJob.of(settings), now=datetime.now(UTC))
    assert report.exit_code == 0
    [(subject, text)] = saved_email_texts(mail_folder)
    window = datetime.fromtimestamp(WINDOW / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert subject.startswith(f"[kaudit] LOSS dc1.{topic} at dc1: ") and window in subject
    assert f"topic: dc1.{topic} | tier: dc1 | window: {window}" in text and f"missing: {LOST}" in text
    assert "lost between producer -> dc1 (the dc1 brokers or its counter)" in text
    assert f"dc1 misses {LOST} in partition 0" in text and "partition 1" not in text
