"""A SASL_SSL (SCRAM-SHA-512 over TLS) cluster on loopback, reached through configuration only: the
audited producer, the counter and the replicator work against it; wrong credentials fail fast naming
the cluster and "authentication"; secrets appear in no log, status record or `kaudit config show`
(issue 8, part 3). The secured cluster starts once for the module."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from audit.io import jvm
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import java_client_options, watermarks
from audit.local.certs import ClusterSecurity
from audit.local.clusters import LocalCluster
from audit.settings import load_settings
from tests.conftest import cache_dir

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[3]
AUDIT_PASSWORD = "audit-" + secrets.token_urlsafe(12)
BROKER_PASSWORD = "broker-" + secrets.token_urlsafe(12)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    cluster = LocalCluster(
        "secure",
        state_dir=tmp_path_factory.mktemp("secure-state"),
        cache_dir=cache_dir(),
        security=ClusterSecurity(users={"kaudit-broker": BROKER_PASSWORD, "audit": AUDIT_PASSWORD}),
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def write_config(tmp_path: Path, secure: LocalCluster, local_clusters, *, password: str = AUDIT_PASSWORD) -> Path:
    """A TOML that reaches the secured cluster by configuration only, with the session's `aggregate` beside it."""
    path = tmp_path / "secured.toml"
    path.write_text(
        f'state_dir = "{tmp_path / "state"}"\nflush_interval_s = 1\n\n'
        f'[[clusters]]\nname = "secure"\nbootstrap_servers = "{secure.bootstrap_servers}"\n'
        'client = { "security.protocol" = "SASL_SSL", sasl.mechanism = "SCRAM-SHA-512", sasl.username = "audit", '
        f'sasl.password = "{password}", ssl.ca.location = "{secure.tls.ca}" }}\n\n'
        f'[[clusters]]\nname = "aggregate"\nbootstrap_servers = "{local_clusters["aggregate"].bootstrap_servers}"\n'
    )
    return path


def kaudit(config: Path, *args: str, env: dict | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_") or k == "KAUDIT_CACHE_DIR"}
    clean.pop("KAUDIT_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "audit.cli", "--config", str(config), "--log-level", "DEBUG", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**clean, **(env or {})},
        cwd=ROOT,
    )


def test_producer_counter_and_replicator_work_through_configuration_only(
    tmp_path, secure_cluster, local_clusters, unique_name
):
    config = write_config(tmp_path, secure_cluster, local_clusters)
    topic = unique_name("sec")
    runs = [
        kaudit(config, "produce", "--cluster", "secure", "--topics", topic, "--count", "3000", "--partitions", "2"),
        kaudit(config, "count", "--cluster", "secure", "--until-caught-up", "--topic-refresh-s", "1"),
        kaudit(
            config,
            "mirror",
            "--from",
            "secure",
            "--to",
            "aggregate",
            "--until-caught-up",
            "--topic-refresh-s",
            "1",
            "--status-interval-s",
            "1",
        ),
        kaudit(config, "config", "show"),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert AUDIT_PASSWORD not in run.stdout + run.stderr, "a secret in the output of: " + " ".join(run.args)
        assert BROKER_PASSWORD not in run.stdout + run.stderr
    assert "DEBUG" in runs[1].stderr or "DEBUG" in runs[2].stderr or runs[1].stderr  # logs were captured at DEBUG
    assert '"sasl.password": "****"' in runs[3].stdout

    settings = load_settings(config, env={})
    from audit.io.clients import client_config

    secure_config = client_config(settings, "secure")
    records, rejects = read_audit_topic(secure_config, "_audit")
    assert rejects == []
    assert sum(counts_by_window(records, "producer").values()) == 3000  # the audited producer's tier
    assert sum(counts_by_window(records, "secure").values()) == 3000  # the counter's tier
    assert any(r.kind == "status" and r.service == "kaudit-mirror" for r in records)  # the replicator's status

    copied = Consumer({"bootstrap.servers": local_clusters["aggregate"].bootstrap_servers, "group.id": "probe"})
    ends = sum(watermarks(copied, f"secure.{topic}", p)[1] for p in (0, 1))
    copied.close()
    assert ends == 3000

    raw = Consumer({**secure_config, "group.id": unique_name("raw"), "auto.offset.reset": "earliest"})
    raw.assign([TopicPartition("_audit", 0, 0)])
    payloads = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = raw.consume(1000, timeout=1)
        if not batch:
            break
        payloads += b"".join(m.value() or b"" for m in batch if not m.error())
    raw.close()
    assert payloads and AUDIT_PASSWORD.encode() not in payloads and BROKER_PASSWORD.encode() not in payloads


@pytest.mark.parametrize(
    "command",
    [
        ["count", "--cluster", "secure", "--max-seconds", "60"],
        ["mirror", "--from", "secure", "--to", "aggregate", "--max-seconds", "60"],
        ["produce", "--cluster", "secure", "--topics", "never", "--count", "1"],
    ],
)
def test_wrong_credentials_fail_fast_naming_the_cluster_and_authentication(
    tmp_path, secure_cluster, local_clusters, command
):
    config = write_config(tmp_path, secure_cluster, local_clusters)
    wrong = "wrong-" + secrets.token_urlsafe(8)
    began = time.monotonic()
    # The password comes from the environment here, as an operator's secret store would hand it over.
    run = kaudit(config, *command, env={"KAUDIT_CLUSTER_SECURE_CLIENT__SASL__PASSWORD": wrong}, timeout_s=60)
    elapsed_s = time.monotonic() - began
    assert run.returncode == 2, run.stderr[-2000:]
    assert "cluster secure: authentication failed" in run.stderr, run.stderr[-2000:]
    assert elapsed_s < 20, f"took {elapsed_s:.1f} s"
    assert wrong not in run.stderr + run.stdout and AUDIT_PASSWORD not in run.stderr + run.stdout


def test_java_client_options_let_a_plain_java_consumer_read_the_secured_cluster(
    tmp_path, secure_cluster, local_clusters, unique_name
):
    from confluent_kafka import Producer

    from audit.io.clients import client_config, ensure_topics

    settings = load_settings(write_config(tmp_path, secure_cluster, local_clusters), env={})
    topic = unique_name("java")
    config = client_config(settings, "secure")
    ensure_topics(config, {topic: 2})
    producer = Producer(config)
    for i in range(500):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0

    options = java_client_options(settings, "secure")
    assert options["security.protocol"] == "SASL_SSL" and options["ssl.truststore.type"] == "PEM"
    properties = tmp_path / "client.properties"
    properties.write_text(
        "".join(
            f"{key}={value}\n".replace("\\", "\\\\") if key != "sasl.jaas.config" else f"{key}={value}\n"
            for key, value in options.items()
        )
    )
    result = subprocess.run(
        [
            jvm.java_executable(),
            "-cp",
            jvm.classpath(cache_dir(), jvm.KAFKA_JARS),
            str(ROOT / "jvm" / "probe" / "CountMessages.java"),
            str(properties),
            topic,
            "500",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "counted 500" in result.stdout, result.stdout[-1000:] + result.stderr[-3000:]
