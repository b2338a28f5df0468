"""The `kaudit` command line: help for newcomers, errors that name the problem, real clusters."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from audit.contract.errors import KafkaClientError
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.io.plugin import plugin_path
from audit.local.processes import free_port


def kaudit(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "audit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["clusters"],
        ["config"],
        ["produce"],
        ["producer-config"],
        ["count"],
        ["mirror"],
        ["alert"],
        ["ui"],
        ["demo"],
    ],
)
def test_every_command_explains_itself(command):
    result = kaudit(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: kaudit" in result.stdout and len(result.stdout.splitlines()) > 5


def test_producer_config_gives_the_plugin_first_and_the_configured_audit_settings():
    result = kaudit("producer-config", "--cluster", "dc2", "--format", "kcat", "--service", "billing")
    assert result.returncode == 0, result.stderr
    args = result.stdout.split()
    assert args[:2] == ["-X", f"plugin.library.paths={plugin_path()}"]
    assert {"kaudit.cluster=dc2", "kaudit.audit.topic=_audit", "kaudit.service=billing"} <= set(args[1::2])


def session_config(tmp_path, state_dir, local_clusters) -> str:
    path = tmp_path / "kaudit.toml"
    path.write_text(
        f'state_dir = "{state_dir}"\n' + "".join(f'[[clusters]]\nname = "{name}"\n' for name in local_clusters.clusters)
    )
    return str(path)


@pytest.mark.kafka
def test_clusters_status_lists_name_address_pid_and_health(tmp_path, state_dir, local_clusters):
    result = kaudit("--config", session_config(tmp_path, state_dir, local_clusters), "clusters", "status")
    assert result.returncode == 0, result.stderr
    for cluster in local_clusters:
        line = next(line for line in result.stdout.splitlines() if line.startswith(cluster.name))
        assert cluster.bootstrap_servers in line and str(cluster.pid) in line and "healthy" in line


def test_config_show_masks_secrets_and_bad_keys_are_named(tmp_path):
    shown = kaudit("config", "show", env={"KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD": "hunter2"})
    assert shown.returncode == 0 and "hunter2" not in shown.stdout + shown.stderr and "****" in shown.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("windw_minutes = 5\n")
    result = kaudit("--config", str(bad), "config", "show")
    assert result.returncode == 2
    assert "windw_minutes: unknown key (did you mean 'window_minutes'?)" in result.stderr


def test_a_counter_without_a_broker_fails_fast_naming_the_address():
    address = f"127.0.0.1:{free_port()}"
    options = CounterOptions(cluster="dc1", client_timeout_s=3)
    began = time.monotonic()
    with pytest.raises(KafkaClientError, match=f"no transaction coordinator at {address}"):
        ClusterCounter({"bootstrap.servers": address, "log_level": 0}, options, lambda topic: True).run(max_seconds=30)
    assert time.monotonic() - began < 15


@pytest.mark.kafka
def test_counter_exports_prometheus_metrics(local_clusters, topic_factory, unique_name):
    from prometheus_client import start_http_server

    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("metrics")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce(topic, value=b"x", partition=i % 2)
    producer.flush(10)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1")
    try:
        options = CounterOptions(cluster="dc1", audit_topic=audit_topic, flush_interval_s=0.3, group_id=f"g-{prefix}")
        counter = ClusterCounter({"bootstrap.servers": bootstrap}, options, lambda name: name.startswith(prefix))
        runner = threading.Thread(target=counter.run, kwargs={"max_seconds": 60})
        runner.start()
        deadline = time.monotonic() + 60
        while not (counter.stats.counted == 100 and counter.stats.flushes >= 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        counter.stop()
        runner.join(60)
    finally:
        server.shutdown()
    assert f'kaudit_counter_messages_total{{cluster="dc1",topic="{topic}"}} 100.0' in body
    assert f'kaudit_counter_lag_messages{{cluster="dc1",partition="0",topic="{topic}"}} 0.0' in body
    assert "kaudit_counter_last_flush_timestamp_seconds" in body and "kaudit_counter_transaction_aborts_total" in body


@pytest.mark.parametrize(
    "args, names",
    [
        (
            ["mirror", "--from", "dc1", "--to", "aggregate", "--drop-topics", "x", "--drop-count", "-5"],
            "count -5 is negative",
        ),
        (
            ["mirror", "--from", "dc1", "--to", "aggregate", "--drop-topics", "(", "--drop-count", "1"],
            "not a valid regex",
        ),
        (["count", "--cluster", "nowhere"], "nowhere"),
        (["producer-config", "--cluster", "nowhere"], "nowhere"),
    ],
)
def test_a_bad_flag_is_one_error_line_with_exit_2_never_a_traceback(args, names):
    result = kaudit(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("kaudit: error: ") and names in result.stderr, (
        result.stderr
    )


def test_an_unexpected_failure_names_its_type_and_place_not_a_traceback(monkeypatch, capsys):
    from audit.cli import config
    from audit.cli.main import main

    def broken(args, settings):
        raise OSError("disk full")

    monkeypatch.setattr(config, "run", broken)
    assert main(["config", "show"]) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert stderr.startswith("kaudit: error: OSError: disk full (in test_cli.py:") and "--log-level DEBUG" in stderr
