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
    pid: int | None = None
    formatted: bool = False
    extra_properties: dict[str, str] = field(default_factory=dict)


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
    """The address an embedded cluster was given on its first start; an error if it never started."""
    path = state_file(cluster_folder(state_dir, name))
    state = load_state(path)
    if state is None:
        raise ClusterError(f"{name}: never started (no {path})")
    return f"{host}:{state.port}"
