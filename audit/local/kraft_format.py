"""Formatting a local cluster's KRaft storage once per kind of cluster.

Kafka's StorageTool, a JVM of its own, formats the first cluster of a kind (the Kafka jars and the broker
settings, which decide the bootstrap metadata and its feature levels); its bootstrap checkpoint is kept
under `<cache_dir>/kraft-formats/`, and later clusters of that kind copy it and write their own
meta.properties, with their own cluster and directory ids. The brokers of a multi-broker cluster copy its
controller's format the same way, each with its own node id.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
# Settings that differ between clusters of one kind and that a format does not write.
PER_CLUSTER_PROPERTIES = ("listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs")


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding, as Kafka's Uuid.

    Like Kafka's own, it never starts with '-', which a command line would read as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def meta_properties(cluster_id: str, node_id: int = 1) -> str:
    """A formatted log directory's meta.properties, as StorageTool writes it for `node_id` (a fresh directory id)."""
    return f"cluster.id={cluster_id}\ndirectory.id={new_cluster_id()}\nnode.id={node_id}\nversion=1\n"


def template_folder(cache_dir: Path, classpath: str, properties: Mapping[str, str]) -> Path:
    """Where a format of this kind of cluster is kept: named by the Kafka jars (`classpath`) and the broker
    settings but those that differ between clusters of one kind."""
    kind = {key: value for key, value in properties.items() if key not in PER_CLUSTER_PROPERTIES}
    key = hashlib.sha256(json.dumps([classpath, kind], sort_keys=True).encode())
    return cache_dir / "kraft-formats" / key.hexdigest()[:16]


def format_from_template(template: Path, data_dir: Path, cluster_id: str, node_id: int = 1) -> bool:
    """Format `data_dir` for node `node_id` by copying the kept format in `template` (or a formatted data
    directory of the same cluster); False when there is none yet."""
    if not (template / BOOTSTRAP_CHECKPOINT).is_file():
        return False
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template / BOOTSTRAP_CHECKPOINT, data_dir / BOOTSTRAP_CHECKPOINT)
    (data_dir / "meta.properties").write_text(meta_properties(cluster_id, node_id))
    return True


def keep_template(checkpoint: Path, template: Path) -> None:
    """Keep a format's bootstrap checkpoint as `template`; a concurrent keeper's copy is as good."""
    template.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{template.name}.", suffix=".partial", dir=template.parent))
    shutil.copyfile(checkpoint, partial / BOOTSTRAP_CHECKPOINT)
    try:
        partial.rename(template)
    except OSError:  # kept by another process in the meantime
        shutil.rmtree(partial, ignore_errors=True)
