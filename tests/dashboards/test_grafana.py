"""The Grafana board (dashboards/grafana/kafka-audit.json): a valid dashboard whose every query names
metrics that the running services (counter, replicator, lake job) really export on --metrics-port."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from audit.io.clients import ensure_topics
from audit.local.processes import free_port
from audit.settings.topics import TopicSelection
from tests.conftest import write_config

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "dashboards" / "grafana" / "kafka-audit.json"
METRIC = re.compile(r"\bkaudit_[a-z0-9_]+\b")


def board() -> dict:
    return json.loads(BOARD.read_text())


def queries(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    return exprs + [v["query"] for v in dashboard["templating"]["list"]]


def test_the_board_is_a_dashboard_of_prometheus_panels_on_a_24_column_grid():
    dashboard = board()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"]), "panel ids are unique"
    assert len(panels) >= 12
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"] and all(METRIC.search(t["expr"]) for t in panel["targets"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for subject in ("lag", "per second", "last commit", "aborts", "stalled", "restarts"):
        assert subject in titles, subject


def exported_names(port: int) -> set[str]:
    """Metric names an endpoint declares (a counter's TYPE line drops `_total`; its samples keep it)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return set()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name, f"{name}_total"} if kind == "counter" else {name}
    return names


def test_every_metric_the_board_queries_is_exported_by_a_running_service(tmp_path, settings_factory, topic_factory):
    # One topic of its own: the services run beside other tests on the session clusters.
    topic = topic_factory("dc1")
    settings = settings_factory(topics=TopicSelection(include=(f"^(dc1\\.)?{topic}$",)))
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    config = write_config(settings, tmp_path / "kaudit.toml")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}, "PYSPARK_PYTHON": sys.executable}
    services = {
        "count": ["count", "--cluster", "dc1", "--max-seconds", "180"],
        "mirror": ["mirror", "--from", "dc1", "--to", "aggregate", "--max-seconds", "180"],
        "lake": ["lake", "--cluster", "aggregate", "--max-seconds", "180"],
    }
    ports, processes = {}, []
    try:
        for name, args in services.items():
            ports[name] = free_port()
            log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
            command = [sys.executable, "-m", "audit.cli", "--config", str(config), *args]
            processes.append(
                subprocess.Popen(
                    [*command, "--metrics-port", str(ports[name])], cwd=ROOT, env=env, stdout=log, stderr=log
                )
            )
        wanted = {name for query in queries(board()) for name in METRIC.findall(query)}
        exported: set[str] = set()
        deadline = time.monotonic() + 150
        while not wanted <= exported and time.monotonic() < deadline:
            time.sleep(1)
            exported = set().union(*(exported_names(port) for port in ports.values()))
        logs = {name: (tmp_path / f"{name}.log").read_text()[-1500:] for name in services}
        assert wanted - exported == set(), logs
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
