"""Declared flows: where data must go, so that a tier that never received a topic is expected to.

Without them a topic's path holds only the tiers that counted it or reported on it (tier_paths.py): a replicator
that never started, or whose topic regex misses a topic, leaves no trace, and the topic looks complete. A flow
(`[[flows]]` in the configuration) says that the topics of its source tier whose names there match one of its
regexes must reach its target tier. The rule:
- A topic counted at a flow's source is expected at its target from its first window; so is it at the targets
  of the flows leaving that target (dc1 -> aggregate -> lake): a hop that never started leaves every tier after
  it waiting. The producer tier counts a topic at the cluster it was written to (its origin).
- A topic the producer tier counted is expected at its origin cluster too when a flow carrying it leaves that
  cluster: a counter that never started (or never reported) at a flow's source lags, it is never complete.
- An expected tier that has not counted the topic is on its path with no watermark: its windows are lagging,
  never complete and never a loss, until it counts and reports.
- A tier that counted a topic although no declared flow leads there (and it is not where the topic was written)
  is undeclared: it is judged as before, and reported once so the declaration can be added.
- With no flow declared nothing is expected: paths are what was observed.
A flow's regexes are searched (re.search) in the topic's name on the source cluster (`dc1.orders` on the
aggregate under prefix naming, `orders` on dc1).
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from audit.contract.names import LAKE_TIER, PRODUCER_TIER
from audit.contract.naming import NamingPolicy

Pair = tuple[str, str, str]  # (origin_cluster, topic, tier)
# `tier_status.reporters` of the placeholder row the books keep for an expected tier nothing has reached.
PLACEHOLDER_REPORTERS = ""


@dataclass(frozen=True)
class Flow:
    """Topics of `source` matching one of `patterns` (by their name on `source`) must reach `target`."""

    source: str
    target: str
    patterns: tuple[re.Pattern[str], ...]

    def carries(self, topic_on_source: str) -> bool:
        return any(pattern.search(topic_on_source) for pattern in self.patterns)


def name_on(policy: NamingPolicy, origin: str, topic: str, cluster: str) -> str:
    """The name the topic written as `topic` on `origin` has on `cluster` (one hop: how the replicators name it)."""
    return topic if cluster == origin else policy.target_topic(origin, topic)


def expected_tiers(counted: Iterable[Pair], flows: Iterable[Flow], policy: NamingPolicy) -> set[Pair]:
    """The (origin_cluster, topic, tier) that declared flows expect and `counted` does not hold yet."""
    counted = set(counted)
    leaving: dict[str, list[Flow]] = defaultdict(list)
    for flow in flows:
        leaving[flow.source].append(flow)
    if not leaving:
        return set()
    expected = uncounted_sources(counted, leaving, policy)
    reached = deque(at_clusters(counted))
    while reached:
        origin, topic, tier = reached.popleft()
        for flow in leaving.get(tier, ()):
            pair = (origin, topic, flow.target)
            if pair in counted or pair in expected or not flow.carries(name_on(policy, origin, topic, tier)):
                continue
            expected.add(pair)
            reached.append(pair)
    return expected


def uncounted_sources(counted: set[Pair], leaving: Mapping[str, list[Flow]], policy: NamingPolicy) -> set[Pair]:
    """The origin cluster of each topic the producer tier counted, where a flow (of `leaving`, by source) carrying
    the topic leaves that cluster and its counter counted nothing of it."""
    return {
        (origin, topic, origin)
        for origin, topic, tier in counted
        if tier == PRODUCER_TIER
        and (origin, topic, origin) not in counted
        and any(flow.carries(name_on(policy, origin, topic, origin)) for flow in leaving.get(origin, ()))
    }


def at_clusters(counted: set[Pair]) -> set[Pair]:
    """`counted`, the producer tier's pairs standing for the origin cluster they were written to."""
    return {(origin, topic, origin if tier == PRODUCER_TIER else tier) for origin, topic, tier in counted}


def undeclared_tiers(counted: Iterable[Pair], flows: Iterable[Flow], policy: NamingPolicy) -> set[Pair]:
    """The (origin_cluster, topic, tier) of `counted` that no declared flow leads to: not the producer, not the
    cluster the topic was written to, and not a flow's target for that topic. Empty when no flow is declared."""
    flows = tuple(flows)
    if not flows:
        return set()
    counted = set(counted)
    leading = at_clusters(counted) | expected_tiers(counted, flows, policy)
    targets = {
        (origin, topic, flow.target)
        for origin, topic, tier in leading
        for flow in flows
        if flow.source == tier and flow.carries(name_on(policy, origin, topic, tier))
    }
    return {pair for pair in counted if pair[2] != PRODUCER_TIER and pair[2] != pair[0] and pair not in targets}


def silent_cause(tier: str, logical_topic: str) -> str:
    """Why an expected tier has no watermark: what the alerts and the UI say of it. At the topic's origin cluster
    (the first part of its logical name: cluster names hold no dot) it is that cluster's counter."""
    if logical_topic.split(".", 1)[0] == tier:
        return (
            f"the counter of {tier} never reported {logical_topic}: is kaudit count --cluster {tier} running, "
            "does its topic selection include it?"
        )
    hop = "the lake job" if tier == LAKE_TIER else "the replicator"
    return f"nothing of {logical_topic} has reached {tier}: is {hop} running, does its topic regex include it?"


def is_placeholder(reporters: str | None) -> bool:
    """Whether a `tier_status` row is the placeholder of an expected tier nothing has reached: no reporter."""
    return reporters == PLACEHOLDER_REPORTERS
