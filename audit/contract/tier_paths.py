"""The tiers on each topic's path: their order, the topic's reference tier and each tier's effective watermark.

Pure (no Spark): the tiers that counted a topic and the watermarks its tiers reported are a few rows per
topic, held by the driver, so the rule is computed there (a Spark query took 1-2 s of every run).
- A topic's path holds every tier that counted it or reported on it, but the producer: its counts are final
  once flushed. The path runs in the configured `tiers` order, unconfigured tiers last by name.
- The reference tier is `reference_tier` when that tier is on the path (or counted), else the origin cluster.
- A tier's effective watermark is the lowest of its own and of the tiers right before it: the lake cannot be
  final for data the aggregate has not received yet. A tier without a watermark has none, and the tiers
  after it start again from their own.
- The reference tier itself is not judged (the others are judged against it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from audit.contract.names import PRODUCER_TIER
from audit.contract.windows import to_ms

PATH_COLUMNS = ("origin_cluster", "topic", "tier", "tier_order", "reference_tier", "tier_watermark_ms")
PATH_DDL = (
    "origin_cluster STRING, topic STRING, tier STRING, tier_order INT, reference_tier STRING, tier_watermark_ms BIGINT"
)


def paths_from(
    counted: Iterable[tuple[str, str, str]],
    reported: Iterable[tuple[str, str, str, datetime | None]],
    tiers: tuple[str, ...],
    reference_tier: str,
) -> list[tuple]:
    """`PATH_COLUMNS` rows from the (origin_cluster, topic, tier) that counted and the (origin_cluster, topic,
    tier, watermark) that reported."""
    watermarks: dict[tuple[str, str], dict[str, datetime | None]] = defaultdict(dict)
    for origin, topic, tier in counted:
        watermarks[(origin, topic)].setdefault(tier, None)
    for origin, topic, tier, watermark in reported:
        watermarks[(origin, topic)][tier] = watermark
    order = {tier: index for index, tier in enumerate(tiers)}  # unconfigured tiers: len(tiers)
    return [
        row
        for (origin, topic), by_tier in watermarks.items()
        for row in _path(origin, topic, by_tier, order, reference_tier)
    ]


def _path(origin: str, topic: str, by_tier: dict, order: dict[str, int], reference_tier: str) -> list[tuple]:
    reference = reference_tier if reference_tier in by_tier else origin
    along = sorted((order.get(tier, len(order)), tier) for tier in by_tier if tier != PRODUCER_TIER)
    rows, lowest = [], None
    for tier_order, tier in along:
        watermark = by_tier[tier]
        lowest = None if watermark is None else watermark if lowest is None else min(lowest, watermark)
        if tier != reference:
            rows.append((origin, topic, tier, tier_order, reference, None if lowest is None else to_ms(lowest)))
    return rows
