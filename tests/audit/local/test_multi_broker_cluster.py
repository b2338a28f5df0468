"""Multi-broker local clusters: a controller and N brokers, each a process of its own, so one broker can be
paused or killed alone (the loss that makes: test_kafka_loss.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from audit.contract.errors import ClusterError, ConfigError
from audit.io.clients import ensure_topics
from audit.io.local_state import ClusterState, recorded_bootstrap_servers
from audit.local.broker_config import multi_node_properties
from audit.local.cluster_nodes import CONTROLLER_NODE_ID, cluster_nodes, replication_properties
from audit.local.clusters import LocalCluster
from audit.local.processes import marked_pids, pid_alive
from tests.conftest import cache_dir


def _meta(data_dir) -> dict[str, str]:
    lines = (data_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.mark.kafka
def test_three_brokers_run_alone_replicate_three_times_and_one_restarts_alone(tmp_path):
    cluster = LocalCluster("trio", state_dir=tmp_path, cache_dir=cache_dir(), brokers=3)
    try:
        cluster.start()
        status = cluster.status()
        assert status.healthy and pid_alive(status.pid) and all(status.broker_pids)
        assert len({status.pid, *status.broker_pids}) == 4
        recorded = json.loads(cluster.state_file.read_text())
        assert (recorded["pid"], tuple(recorded["broker_pids"])) == (status.pid, status.broker_pids)
        assert recorded_bootstrap_servers(tmp_path, "trio") == cluster.bootstrap_servers
        assert len(cluster.bootstrap_servers.split(",")) == 3

        metas = {node.node_id: _meta(node.data_dir) for node in cluster.nodes()}
        assert sorted(metas) == [1, 2, 3, CONTROLLER_NODE_ID]
        assert {meta["node.id"] for meta in metas.values()} == {str(node_id) for node_id in metas}
        assert len({meta["cluster.id"] for meta in metas.values()}) == 1
        assert len({meta["directory.id"] for meta in metas.values()}) == 4

        ensure_topics({"bootstrap.servers": cluster.bootstrap_servers}, {"replicated": 3})
        metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics("replicated", timeout=10)
        assert all(len(p.replicas) == 3 for p in metadata.topics["replicated"].partitions.values())

        others = (status.pid, cluster.broker_pid(1), cluster.broker_pid(3))
        cluster.kill_broker(2)
        assert cluster.broker_pid(2) is None and not cluster.is_running()
        assert all(pid_alive(pid) for pid in others)
        cluster.start()
        assert cluster.broker_pid(2) and (status.pid, cluster.broker_pid(1), cluster.broker_pid(3)) == others
    finally:
        cluster.stop()
    assert marked_pids(str(tmp_path)) == []
    assert json.loads(cluster.state_file.read_text())["broker_pids"] == [None, None, None]


def test_a_cluster_keeps_the_broker_count_it_was_formatted_with(tmp_path):
    LocalCluster("pair", state_dir=tmp_path, cache_dir=cache_dir(), brokers=2)._state()
    with pytest.raises(ClusterError, match="formatted for 2 broker"):
        LocalCluster("pair", state_dir=tmp_path, cache_dir=cache_dir(), brokers=3)._state()
    assert len(LocalCluster("pair", state_dir=tmp_path, cache_dir=cache_dir()).nodes()) == 3
    with pytest.raises(ConfigError, match="at least 1"):
        LocalCluster("none", state_dir=tmp_path, cache_dir=cache_dir(), brokers=0)


def test_the_default_is_one_node_that_is_broker_and_controller(tmp_path):
    cluster = LocalCluster("solo", state_dir=tmp_path, cache_dir=cache_dir())
    [node] = cluster.nodes()
    props = cluster.server_properties(cluster._state())
    assert node.folder == cluster.folder and node.data_dir == cluster.folder / "data"
    assert (props["process.roles"], props["node.id"], props["offsets.topic.replication.factor"]) == (
        "broker,controller",
        "1",
        "1",
    )
    assert "default.replication.factor" not in props


@pytest.mark.parametrize("brokers, replicas, min_insync", [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")])
def test_replication_follows_the_broker_count_up_to_three(brokers, replicas, min_insync):
    props = replication_properties(brokers)
    assert props["default.replication.factor"] == props["offsets.topic.replication.factor"] == replicas
    assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == min_insync


def test_the_controller_listens_for_controllers_only_and_each_broker_on_its_own_port(tmp_path):
    state = ClusterState(name="x", cluster_id="id", port=1001, controller_port=1000, broker_ports=[1001, 1002])
    controller, first, second = cluster_nodes(tmp_path, state)
    props = {node.node_id: multi_node_properties("127.0.0.1", node, 1000, 2) for node in (controller, first, second)}
    assert props[CONTROLLER_NODE_ID]["listeners"] == "CONTROLLER://127.0.0.1:1000"
    assert "inter.broker.listener.name" not in props[CONTROLLER_NODE_ID]
    assert props[2]["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1002" and props[2]["process.roles"] == "broker"
    assert {p["controller.quorum.voters"] for p in props.values()} == {f"{CONTROLLER_NODE_ID}@127.0.0.1:1000"}
    assert len({p["log.dirs"] for p in props.values()}) == 3


def test_clusters_up_refuses_a_broker_count_below_one(tmp_path):
    config = tmp_path / "kaudit.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n[[clusters]]\nname = "solo"\n')
    result = subprocess.run(
        [sys.executable, "-m", "audit.cli", "--config", str(config), "clusters", "up", "--brokers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "not a number of brokers" in result.stderr
