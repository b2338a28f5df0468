"""The tiers on each topic's path (`paths_from`, pure): reference tier, order, and each tier's effective watermark
(the lowest of its own and of the tier right before it as it stood when the tier reported), one topic per case.
audit/contract/test_watermark_points.py proves the rule against a model of tiers copying one another."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.tier_paths import paths_from
from audit.contract.watermark_points import WatermarkPoint

TIERS = ("producer", "dc1", "dc2", "aggregate", "lake")


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


# Per case: the tiers that counted, {tier: watermark ms or None} that reported, and the rows expected
# as (tier, tier_order, reference_tier, tier_watermark_ms).
CASES = {
    "each tier bounded by those before it": (
        ["producer", "dc1", "aggregate", "lake"],
        {"dc1": 5000, "aggregate": 3000, "lake": 7000},
        [("dc1", 1, "producer", 5000), ("aggregate", 3, "producer", 3000), ("lake", 4, "producer", 3000)],
    ),
    "no producer: the origin cluster is the reference and still bounds the rest": (
        ["dc1", "aggregate"],
        {"dc1": 2000, "aggregate": 4000},
        [("aggregate", 3, "dc1", 2000)],
    ),
    "a tier that never reported has none, the next starts from its own": (
        ["producer", "dc1", "aggregate", "lake"],
        {"dc1": 5000, "lake": 7000},
        [("dc1", 1, "producer", 5000), ("aggregate", 3, "producer", None), ("lake", 4, "producer", 7000)],
    ),
    "a tier that only reported is on the path": (
        ["producer", "dc1"],
        {"dc1": 5000, "aggregate": 6000},
        [("dc1", 1, "producer", 5000), ("aggregate", 3, "producer", 5000)],
    ),
    "an unconfigured tier comes last": (
        ["producer", "dc1", "zoo"],
        {"dc1": 5000, "zoo": 1000},
        [("dc1", 1, "producer", 5000), ("zoo", 5, "producer", 1000)],
    ),
    "only the producer counted": (["producer"], {}, []),
}


def always(ms: int | None) -> list[WatermarkPoint]:
    """A tier's points when only its newest watermark matters: one point, reported before any other."""
    return [] if ms is None else [WatermarkPoint(0, 0, ms)]


def path_of(case: str) -> list[tuple]:
    tiers, marks, _ = CASES[case]
    rows = paths_from(
        [("dc1", case, tier) for tier in tiers],
        [("dc1", case, tier, always(ms)) for tier, ms in marks.items()],
        TIERS,
        "producer",
    )
    assert all(row[:2] == ("dc1", case) for row in rows)
    return [row[2:] for row in rows]


@pytest.mark.parametrize("case", list(CASES))
def test_the_path_of_a_topic(case):
    assert path_of(case) == CASES[case][2]


MOMENTS = st.one_of(st.none(), st.integers(0, 10**13))


@given(
    st.dictionaries(st.sampled_from([*TIERS, "zoo"]), MOMENTS, min_size=1),
    st.sets(st.sampled_from([*TIERS, "zoo"])),
)
def test_no_tier_is_final_beyond_its_own_watermark_nor_beyond_a_tier_before_it_on_the_same_run(marks, counted):
    rows = paths_from(
        [("dc1", "t", tier) for tier in counted],
        [("dc1", "t", tier, always(mark)) for tier, mark in marks.items()],
        TIERS,
        "producer",
    )
    for index, (_, _, tier, _, reference, effective) in enumerate(rows):
        own = marks.get(tier)
        assert (effective is None) == (own is None), "a tier has an effective watermark exactly when it has its own"
        assert tier not in ("producer", reference)
        if own is not None:
            assert effective <= own
            before = rows[index - 1] if index else None
            if before is not None and before[5] is not None and marks.get(before[2]) is not None:
                assert effective <= before[5], "the tier right before bounds it"
    assert [row[3] for row in rows] == sorted(row[3] for row in rows), "in path order"
