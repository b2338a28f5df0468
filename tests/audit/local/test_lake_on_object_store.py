"""The pipeline with its lake on a real S3-compatible store (SeaweedFS on loopback, SigV4), and the books'
writers on it: the same books as on a local disk, one writer at a time, nothing lost to a kill -9."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit.alerts.run import AlertJob, run_alerts
from audit.books.run import reconcile
from audit.contract.tables import TABLES
from audit.hops.faults import DropFault
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.io.lease import LakeLease
from audit.io.spark import spark_session
from audit.local.processes import free_port
from audit.settings import Settings
from audit.settings.alerts import AlertSettings, SmtpSettings
from audit.settings.storage import StorageSettings
from tests.audit.alerts.test_alerts import Inbox, Server
from tests.audit.local.test_pipeline_e2e import PARTITIONS, count_cluster, land, mirror, produce
from tests.conftest import cache_dir, write_config
from tests.waiting import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.object_store]

DROPPED = 17
# What a run writes that differs between two runs over the same input: when it ran.
MOMENTS = ("updated_at", "ingested_at", "created_at", "sent_at", "emitted_at", "first_seen_at", "last_status_at")


def on_store(settings: Settings, store, root: str) -> Settings:
    storage = StorageSettings(
        endpoint=store.endpoint, access_key_id=store.access_key_id, secret_access_key=store.secret_access_key
    )
    return settings.replace(lake_path=root, storage=storage)


def store_env(store) -> dict[str, str]:
    """The AWS conventions only: a `kaudit` process given these and an s3a:// lake_path needs no [storage]."""
    return {
        **os.environ,
        "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": store.access_key_id,
        "AWS_SECRET_ACCESS_KEY": store.secret_access_key,
        "AWS_REGION": store.region,
    }


def comparable(lake, name: str):
    """Table `name`'s rows without the moments a run wrote them, in a stable order."""
    frame = read_frame(lake, name)
    frame = frame.drop(columns=[c for c in MOMENTS if c in frame.columns]).astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def same_rows(a, b, name: str) -> None:
    """Tables `name` of lakes `a` and `b` hold the same rows; else the columns that differ are named."""
    left, right = comparable(a, name), comparable(b, name)
    differ = [c for c in left.columns if len(left) != len(right) or not left[c].equals(right[c])]
    assert not differ, f"{name}: {len(left)} against {len(right)} rows; {differ} differ"


def traffic(settings: Settings, topic_factory, *, lossy: bool = True) -> list[str]:
    """Audited traffic on dc1, counted there, replicated to the aggregate (one topic losing DROPPED) and
    counted there: the replicas' names."""
    topics = [topic_factory("dc1", partitions=PARTITIONS) for _ in range(2)]
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    produce(settings, topics, 600)
    count_cluster(settings, "dc1", topics)
    fault = DropFault(f"^{topics[1]}$", count=DROPPED) if lossy else None
    mirror(settings, topics, group=f"mirror-{settings.audit_topic}", fault=fault)
    replicas = [f"dc1.{topic}" for topic in topics]
    count_cluster(settings, "aggregate", replicas)
    return replicas


@pytest.mark.slow(minutes=3)
def test_the_lake_on_an_object_store_keeps_a_local_disks_books_with_one_writer_at_a_time(
    spark, settings_factory, topic_factory, object_store, s3_lake, tmp_path
):
    """One pipeline's audit topics, reconciled into lakes on the store: the same books as on a local disk, and
    the books' writers there take turns (reconcile and alert beside a continuous reconcile; a kill -9)."""
    local = settings_factory()
    clean = on_store(local, object_store, s3_lake())
    replicas = traffic(local, topic_factory)
    session = spark_session(app_name="kaudit-test", cache_dir=cache_dir(), conf=lake_of(clean).spark_conf())
    land(session, clean, replicas)  # one lake job: its counts go to the audit topic every lake's books read
    for settings in (clean, local):
        reconcile(session, settings)
    same_books_as_a_local_disk(clean, local, replicas)
    alerts_sent_once(clean)
    writers_take_turns(local, object_store, s3_lake, tmp_path, clean)
    kill_mid_run_then_complete(session, local, object_store, s3_lake(), tmp_path, clean)


def same_books_as_a_local_disk(remote: Settings, local: Settings, replicas: list[str]) -> None:
    assert lake_of(remote).root.startswith("s3a://") and lake_of(remote).version("completeness") is not None
    for name in ("completeness", "tier_counts", "audit_records", "tier_status"):
        same_rows(lake_of(remote), lake_of(local), name)
    books = read_frame(lake_of(remote), "completeness")
    short = books[(books["missing"] > 0)]
    assert set(short["tier"]) == {"aggregate", "lake"} and set(short["logical_topic"]) == {replicas[1]}
    assert short.groupby("tier")["missing"].sum().to_dict() == {"aggregate": DROPPED, "lake": DROPPED}
    bronze = read_frame(lake_of(remote), "bronze", columns=["topic", "partition", "offset"])
    assert len(bronze) == len(bronze.drop_duplicates()) == 2 * 600 - DROPPED


def alerts_sent_once(remote: Settings) -> None:
    inbox = Inbox()
    server = Server(inbox, free_port())
    server.start()
    try:
        mailing = remote.replace(
            smtp=SmtpSettings(port=server.port, retries=1, timeout_s=5),
            alerts=AlertSettings(default_recipients=("audit@example.com",)),
        )
        first, again = run_alerts(AlertJob.of(mailing)), run_alerts(AlertJob.of(mailing))
    finally:
        server.stop()
    assert first.sent >= 1 and again.sent == 0, (first.summary(), again.summary())
    subjects = [str(message["subject"]) for message in inbox.messages]
    assert sum("LOSS" in subject for subject in subjects) == 1, subjects
    assert set(read_frame(lake_of(remote), "alerts")["state"]) <= {"sent", "resolved"}


def kaudit(config: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "audit.cli", "--config", str(config), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen, timeout_s: float = 240) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout_s)
    return process.returncode, out, err


def config_for(settings: Settings, path: Path, smtp_port: int) -> Path:
    write_config(settings, path)
    with path.open("a") as handle:
        handle.write(f'[smtp]\nport = {smtp_port}\nretries = 1\n[alerts]\ndefault_recipients = ["a@example.com"]\n')
    return path


def writers_take_turns(local: Settings, store, s3_lake, tmp_path: Path, clean: Settings) -> None:
    """Beside `kaudit reconcile --continuous` on a new lake, once it has written the books and sent the loss's email,
    `kaudit reconcile` and `kaudit alert` refuse naming the holder; stopped, it leaves a clean run's books and the
    loss emailed once.

    Two writers racing for a free lease on this store, one winning, is test_lease.py's (four processes); here
    the refusals go through the CLI, before a second Spark would start."""
    env = store_env(store)
    inbox = Inbox()
    server = Server(inbox, free_port())
    server.start()
    try:
        shared = on_store(local, store, s3_lake())
        config = config_for(shared, tmp_path / "shared.toml", server.port)
        continuous = kaudit(config, env, "reconcile", "--continuous", "--interval-s", "1")
        lease = LakeLease(lake_of(shared), purpose="test")
        wait_for(lambda: (lease.holder() or {}).get("purpose") == "reconcile --continuous", "the lease", 120)
        wait_for(lambda: any("LOSS" in str(m["subject"]) for m in inbox.messages), "the loss's email", 240)
        refused = [
            finished(process) for process in [kaudit(config, env, command) for command in ("reconcile", "alert")]
        ]
        for code, _out, err in refused:
            assert code == 2 and "another writer holds the lake" in err, err
            assert "'reconcile --continuous' on host" in err, err
        continuous.send_signal(signal.SIGTERM)
        assert finished(continuous)[0] == 0
        for name in ("completeness", "tier_counts", "audit_records"):
            same_rows(lake_of(shared), lake_of(clean), name)
        assert [str(m["subject"]) for m in inbox.messages].count(_loss_subject(inbox)) == 1
    finally:
        server.stop()


def _loss_subject(inbox: Inbox) -> str:
    [subject] = {str(m["subject"]) for m in inbox.messages if "LOSS" in str(m["subject"])}
    return subject


def kill_mid_run_then_complete(session, local: Settings, store, root: str, tmp_path: Path, clean: Settings) -> None:
    """kill -9 of a reconcile at a random moment of its run, commits included: every table stays readable, the
    next reconcile takes the dead writer's lease at once and the books equal a clean run's. The next one runs as
    `kaudit reconcile` does, under the lease, in this worker's Spark: the same in any process, without a JVM more."""
    killed = on_store(local, store, root)
    config = config_for(killed, tmp_path / "killed.toml", free_port())
    env = store_env(store)
    victim = kaudit(config, env, "reconcile")
    lease = LakeLease(lake_of(killed), purpose="test")
    wait_for(lambda: lease.holder() is not None, "the victim's lease", 60)
    time.sleep(random.uniform(8, 25))  # JVM start, then reading, checking and committing the tables
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    for name in TABLES:
        read_frame(lake_of(killed), name)  # readable: a commit is whole or absent
    began = time.monotonic()
    with LakeLease(lake_of(killed), "books", purpose="reconcile"):
        reconcile(session, killed)
    assert time.monotonic() - began < 120
    for name in ("completeness", "tier_counts", "audit_records"):
        same_rows(lake_of(killed), lake_of(clean), name)
