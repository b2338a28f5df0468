"""Topic naming across clusters: what a replicated topic is called, and where it came from.

Policy apart from mechanism, as in MirrorMaker 2's ReplicationPolicy: the copy loop asks the
policy for a target name and never builds one itself; the reconciliation asks it for the origin of
a topic it sees on a cluster, for our replicator and for MirrorMaker 2's default naming alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from audit.contract.errors import ConfigError
from audit.contract.names import DEFAULT_AUDIT_TOPIC

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SEPARATOR = "."


@dataclass(frozen=True)
class Origin:
    """Where a topic seen on some cluster was first written."""

    cluster: str
    topic: str


class NamingPolicy(Protocol):
    @property
    def name(self) -> str: ...

    def target_topic(self, source_cluster: str, topic: str) -> str:
        """The name `topic` of `source_cluster` gets on the target cluster."""

    def origin(self, cluster: str, topic: str) -> Origin:
        """The cluster and name `topic`, as seen on `cluster`, was first written to."""


@dataclass(frozen=True)
class IdentityNaming:
    """Same name everywhere. Cycles between two clusters are then stopped only by the provenance
    header, and the origin cluster of a topic cannot be read from its name."""

    name: str = "identity"

    def target_topic(self, source_cluster: str, topic: str) -> str:
        return topic

    def origin(self, cluster: str, topic: str) -> Origin:
        return Origin(cluster, topic)


@dataclass(frozen=True)
class PrefixNaming:
    """`<source cluster><separator><topic>`, MirrorMaker 2's default (`dc1.orders`).

    `clusters` are the names a prefix may carry; a topic whose first segment is not one of them is
    local to the cluster it is on. Multi-hop names (`dc1.agg.orders`) resolve to the first hop.
    """

    clusters: frozenset[str]
    separator: str = DEFAULT_SEPARATOR
    name: str = "prefix"

    def target_topic(self, source_cluster: str, topic: str) -> str:
        return f"{source_cluster}{self.separator}{topic}"

    def origin(self, cluster: str, topic: str) -> Origin:
        head, sep, rest = topic.partition(self.separator)
        if sep and head in self.clusters and rest:
            return self.origin(head, rest)
        return Origin(cluster, topic)


def naming_policy(kind: str, clusters: Iterable[str], separator: str = DEFAULT_SEPARATOR) -> NamingPolicy:
    """The policy a configuration names: `identity` or `prefix`."""
    if kind == "identity":
        return IdentityNaming()
    if kind == "prefix":
        return PrefixNaming(frozenset(clusters), separator)
    raise ConfigError(f"naming: {kind!r} is not a naming policy (identity or prefix)")


# -- the audit topic: the one rule of what is the audit topic and what is data ---------------------------


def is_audit_topic(policy: NamingPolicy, cluster: str, topic: str, audit_topic: str = DEFAULT_AUDIT_TOPIC) -> bool:
    """Whether `topic`, as seen on `cluster`, is the audit topic: the cluster's own or a replicated copy of
    another's (`dc1._audit` on the aggregate under prefix naming). Never a data topic."""
    return is_audit_origin(policy.origin(cluster, topic).topic, audit_topic)


def is_audit_origin(origin_topic: str, audit_topic: str = DEFAULT_AUDIT_TOPIC) -> bool:
    """Whether a topic named by its origin (the books' `topic` column, `_audit` for the aggregate's `dc1._audit`)
    is the audit topic. The replicator copies the audit topic and reports on it like any topic it copies: the
    books, the alerts and the UI take rows about data topics only (`data_topic_rows`)."""
    return origin_topic == audit_topic


def data_topic_rows(rows: pd.DataFrame, audit_topic: str = DEFAULT_AUDIT_TOPIC) -> pd.DataFrame:
    """`rows` (with the books' origin `topic` column) without those about the audit topic or a copy of it."""
    if rows.empty or "topic" not in rows.columns:
        return rows
    return rows[rows["topic"] != audit_topic]
