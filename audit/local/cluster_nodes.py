"""The JVMs of a local cluster and where each keeps its files.

A single-node cluster is one JVM, broker and controller in one (node 1), whose files are the cluster folder's
own. A multi-broker cluster is a controller (a JVM of its own, in `<folder>/controller`) and N brokers (node ids
1..N, in `<folder>/broker-<id>`), each a separate process, so one broker can be paused or killed alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from audit.io.local_state import ClusterState

COMBINED_NODE_ID = 1
# Apart from the brokers' 1..N, as in Kafka's own test clusters.
CONTROLLER_NODE_ID = 3000
COMBINED_ROLES = "broker,controller"
CONTROLLER_ROLE = "controller"
BROKER_ROLE = "broker"
# Topics created without a replication factor get min(brokers, 3) replicas.
MAX_DEFAULT_REPLICATION_FACTOR = 3


@dataclass(frozen=True)
class Node:
    """One JVM of a local cluster."""

    node_id: int
    roles: str
    folder: Path  # its server.properties, log4j2.properties, data/ and logs/
    port: int | None  # where clients connect; None for a controller alone

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def logs_dir(self) -> Path:
        return self.folder / "logs"

    @property
    def label(self) -> str:
        return {COMBINED_ROLES: "the broker", CONTROLLER_ROLE: "the controller"}.get(
            self.roles, f"broker {self.node_id}"
        )


@dataclass(frozen=True)
class ClusterStatus:
    """What `kaudit clusters status` prints for one cluster."""

    name: str
    bootstrap_servers: str
    pid: int | None  # the single node's, or a multi-broker cluster's controller's
    healthy: bool
    folder: str
    broker_pids: tuple[int | None, ...] = ()  # a multi-broker cluster's brokers 1..N (None: not running)


def cluster_nodes(folder: Path, state: ClusterState) -> list[Node]:
    """Every JVM of the cluster, the one that formats first (the controller) first."""
    if not state.broker_ports:
        return [Node(COMBINED_NODE_ID, COMBINED_ROLES, folder, state.port)]
    controller = Node(CONTROLLER_NODE_ID, CONTROLLER_ROLE, folder / "controller", None)
    brokers = [
        Node(node_id, BROKER_ROLE, folder / f"broker-{node_id}", port)
        for node_id, port in enumerate(state.broker_ports, start=1)
    ]
    return [controller, *brokers]


def node_pid(state: ClusterState, node: Node) -> int | None:
    """The pid recorded for `node` (alive or not)."""
    return state.broker_pids[node.node_id - 1] if node.roles == BROKER_ROLE else state.pid


def set_node_pid(state: ClusterState, node: Node, pid: int | None) -> None:
    if node.roles == BROKER_ROLE:
        state.broker_pids[node.node_id - 1] = pid
    else:
        state.pid = pid


def replication_properties(brokers: int) -> dict[str, str]:
    """How many copies a multi-broker cluster keeps: min(brokers, 3) of every topic, the internal ones too, and
    a min.insync.replicas one below that, so acks=all still succeeds with one broker down."""
    replicas = min(brokers, MAX_DEFAULT_REPLICATION_FACTOR)
    min_insync = str(max(1, replicas - 1))
    return {
        "default.replication.factor": str(replicas),
        "min.insync.replicas": min_insync,
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": min_insync,
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": min_insync,
    }
