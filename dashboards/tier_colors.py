"""One colour per tier on every chart of the UI: the producer grey, the configured tiers in data-flow order, then
any other tier (a consumer group, a tier no longer configured) by a stable hash of its name.

Plotly colours traces by their position in each figure, so without this a tier changes colour from one chart to
the next whenever the charts hold different tiers or order them differently."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from audit.contract.names import LAKE_TIER, PRODUCER_TIER

PRODUCER_COLOR = "#bbbbbb"
# None of the status colours (dashboards/figures.py STATUS_COLORS) nor the restated star's purple: a tier's line
# never reads as a verdict.
PALETTE = (
    "#1f77b4",  # blue
    "#8c564b",  # brown
    "#17becf",  # cyan
    "#393b79",  # indigo
    "#bcbd22",  # olive
    "#7b4173",  # plum
    "#637939",  # moss
    "#6b6ecf",  # periwinkle
)


@dataclass(frozen=True)
class TierColors:
    """`colors(tier)`: the tier's colour. `tiers` in data-flow order, as `Settings.tiers` holds them."""

    tiers: tuple[str, ...] = (PRODUCER_TIER, LAKE_TIER)

    @classmethod
    def of(cls, tiers: Sequence[str]) -> TierColors:
        return cls(tuple(tiers))

    def __call__(self, tier: str) -> str:
        if tier == PRODUCER_TIER:
            return PRODUCER_COLOR
        others = [name for name in self.tiers if name != PRODUCER_TIER]
        if tier in others:
            return PALETTE[others.index(tier) % len(PALETTE)]
        return PALETTE[zlib.crc32(str(tier).encode()) % len(PALETTE)]
