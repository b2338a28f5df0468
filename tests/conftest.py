"""Session-wide real infrastructure: local Kafka clusters started once, torn down at the end.

Every name a test creates (topics, groups) is unique, so tests never depend on each other's data
or on a fixed port.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from audit.local_cluster import LocalClusters
from audit.clients import ensure_topics

SESSION_CLUSTERS = ("dc1", "aggregate")


def cache_dir() -> Path:
    return Path(os.environ.get("KAUDIT_CACHE_DIR", "~/.cache/kafka-audit")).expanduser()


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kaudit-state")


@pytest.fixture(scope="session")
def local_clusters(state_dir):
    """Two real single-node KRaft clusters, `dc1` and `aggregate`, on free loopback ports."""
    clusters = LocalClusters(SESSION_CLUSTERS, state_dir=state_dir, cache_dir=cache_dir())
    try:
        clusters.up()
        yield clusters
    finally:
        clusters.down()


@pytest.fixture
def unique_name(request):
    """A factory of names no other test uses: `<prefix>-<test>-<random>`."""

    def make(prefix: str = "t") -> str:
        test = request.node.name.split("[")[0].replace("_", "-")[:40]
        return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_factory(local_clusters, unique_name):
    """Create a fresh topic on a session cluster: `topic_factory("dc1", partitions=3)` -> name."""

    def make(cluster: str, *, partitions: int = 1, config: dict | None = None, name: str | None = None) -> str:
        topic = name or unique_name("topic")
        bootstrap = local_clusters[cluster].bootstrap_servers
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: partitions}, topic_configs={topic: config or {}})
        return topic

    return make
