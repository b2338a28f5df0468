"""Where the loss is: the partitions of a window that a tier is short in, and by how many messages each.

Read from `tier_counts.by_partition` (the counters, the lake job and the audited producer report counts per
partition by default; the replicator keeps partition numbers), comparing the tier with the window's
reference tier as completeness does. Used by the loss emails' likely cause and the UI's topic page.
"""

from __future__ import annotations

import pandas as pd

from audit.contract.completeness import partition_differences, partition_map

# More than this many partitions short: the worst are named, the rest summed.
NAMED_PARTITIONS = 10


def partition_losses(tier_counts: pd.DataFrame, row) -> dict[int, int] | None:
    """Messages missing per partition at `row.tier` against `row.reference_tier` in `row`'s window (only the
    partitions short); None when either tier's count for the window has no partition counts."""
    if tier_counts.empty or "by_partition" not in tier_counts:
        return None
    window = tier_counts[
        (tier_counts["origin_cluster"] == row.origin_cluster)
        & (tier_counts["topic"] == row.topic)
        & (tier_counts["window_start"] == row.window_start)
    ]
    expected = _partitions(window, row.reference_tier)
    observed = _partitions(window, row.tier)
    if expected is None or observed is None:
        return None
    return {p: -d for p, d in partition_differences(expected, observed).items() if d < 0}


def _partitions(window: pd.DataFrame, tier: str):
    counts = window.loc[window["tier"] == tier, "by_partition"]
    return None if counts.empty else partition_map(counts.iloc[0])


def describe(losses: dict[int, int] | None) -> str:
    """`40 in partition 2, 5 in partition 0`, the most missing first; '' when no partition is short."""
    if not losses:
        return ""
    worst = sorted(losses.items(), key=lambda item: (-item[1], item[0]))
    named = [f"{n:,} in partition {p}" for p, n in worst[:NAMED_PARTITIONS]]
    rest = worst[NAMED_PARTITIONS:]
    if rest:
        named.append(f"{sum(n for _p, n in rest):,} in {len(rest)} other partitions")
    return ", ".join(named)
