"""What counts as a name, a topic and a tier, and the audit topic's default name: one definition each.

\\Z, not $, in every pattern: `$` also matches before a trailing newline, which would let "orders\\n"
pass as a topic.
"""

from __future__ import annotations

import re

DEFAULT_AUDIT_TOPIC = "_audit"
PRODUCER_TIER = "producer"
LAKE_TIER = "lake"
RESERVED_TIERS = (PRODUCER_TIER, LAKE_TIER)

# A name inside an audit record (tier, cluster): dots allowed, as in `aggregate.eu`.
NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# A configured cluster's name: no dot, since the prefix naming policy joins `<cluster>.<topic>` with one.
CLUSTER_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
TOPIC_PATTERN = re.compile(r"\A[A-Za-z0-9._-]{1,249}\Z")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def is_topic_name(name: str) -> bool:
    """A legal Kafka topic name: 1 to 249 letters, digits, '.', '_', '-', and not '.' or '..'."""
    return bool(TOPIC_PATTERN.match(name)) and name not in (".", "..")
