"""Where an embedded local cluster records its address: `<state_dir>/clusters/<name>/cluster.json`.

Kept in the I/O layer so every client can find an embedded cluster's address without importing the
harness that starts it (audit/local/clusters.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from audit.contract.errors import ClusterError

LOCAL_HOST = "127.0.0.1"


@dataclass
class ClusterState:
    """The part of a cluster that must survive restarts, kept in `cluster.json`."""

    name: str
    cluster_id: str
    port: int
    controller_port: int
    pid: int | None = None  # the JVM of a single-node cluster; the controller's of a multi-broker one
    formatted: bool = False
    extra_properties: dict[str, str] = field(default_factory=dict)
    # A multi-broker cluster's brokers, node ids 1..N: their client ports and pids. Empty for a single node.
    broker_ports: list[int] = field(default_factory=list)
    broker_pids: list[int | None] = field(default_factory=list)

    @property
    def client_ports(self) -> list[int]:
        """The ports clients connect to: every broker's."""
        return self.broker_ports or [self.port]


def cluster_folder(state_dir: Path | str, name: str) -> Path:
    return Path(state_dir).expanduser().resolve() / "clusters" / name


def state_file(folder: Path) -> Path:
    return folder / "cluster.json"


def load_state(path: Path) -> ClusterState | None:
    """The recorded state, None for a cluster never started; an unreadable file is an error naming it."""
    try:
        return ClusterState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"{path.parent.name}: {path} is unreadable ({exc}); remove the folder") from exc


def recorded_bootstrap_servers(state_dir: Path | str, name: str, host: str = LOCAL_HOST) -> str:
    """The addresses an embedded cluster's brokers were given on its first start; an error if it never started."""
    path = state_file(cluster_folder(state_dir, name))
    state = load_state(path)
    if state is None:
        raise ClusterError(f"{name}: never started (no {path})")
    return ",".join(f"{host}:{port}" for port in state.client_ports)
