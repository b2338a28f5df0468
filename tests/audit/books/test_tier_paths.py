"""The tiers on each topic's path (`paths_from`): reference tier, order, and each tier's effective watermark
(the lowest of its own and those of the tiers right before it), one topic per case."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.books.judge import paths_from

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


@pytest.fixture(scope="module")
def paths(spark):
    """`paths_from` over every case at once (one Spark job), by case name."""
    counted = [("dc1", name, tier) for name, (tiers, _, _) in CASES.items() for tier in tiers]
    reported = [
        ("dc1", name, tier, None if ms is None else at(ms))
        for name, (_, marks, _) in CASES.items()
        for tier, ms in marks.items()
    ]
    rows = paths_from(
        spark.createDataFrame(counted, "origin_cluster STRING, topic STRING, tier STRING"),
        spark.createDataFrame(reported, "origin_cluster STRING, topic STRING, tier STRING, watermark TIMESTAMP"),
        TIERS,
        "producer",
    ).collect()
    found: dict[str, list] = {name: [] for name in CASES}
    for row in rows:
        assert row.origin_cluster == "dc1"
        found[row.topic].append((row.tier, row.tier_order, row.reference_tier, row.tier_watermark_ms))
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_the_path_of_a_topic(paths, case):
    assert sorted(paths[case], key=lambda row: row[1]) == CASES[case][2]
