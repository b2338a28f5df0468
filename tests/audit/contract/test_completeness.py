"""The completeness rules as a table of cases, plus properties that hold for any counts."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.completeness import classify, partition_gaps, threshold_for

D = {0: -4_242_424_242_424_242_424, 1: 17}  # the digests of a window's two partitions
WINDOW_END = 1_700_000_600_000
GRACE = 300_000
DUE = WINDOW_END + GRACE


def row(
    expected,
    observed,
    *,
    watermark=DUE + 1,
    now=DUE + 10_000,
    threshold=None,
    exp_parts=None,
    obs_parts=None,
    exp_digests=None,
    obs_digests=None,
) -> dict:
    frame = pd.DataFrame(
        [
            {
                "expected": expected,
                "observed": observed,
                "expected_by_partition": exp_parts,
                "observed_by_partition": obs_parts,
                "expected_digest_by_partition": exp_digests,
                "observed_digest_by_partition": obs_digests,
                "window_end_ms": WINDOW_END,
                "tier_watermark_ms": watermark,
                "threshold_pct": threshold,
            }
        ]
    )
    return classify(frame, now_ms=now, grace_ms=GRACE).iloc[0].to_dict()


CASES = [
    # (why, expected, observed, keyword arguments, status, missing, duplicated)
    ("equal counts are complete", 100, 100, {}, "complete", 0, 0),
    ("equal counts are complete even before the tier is final", 100, 100, {"watermark": 0}, "complete", 0, 0),
    ("a final tier short of messages is incomplete", 100, 97, {}, "incomplete", 3, 0),
    ("a final tier over is over, never complete", 100, 104, {}, "over", 0, 4),
    ("a tier behind its window is lagging, not losing", 100, 60, {"watermark": DUE - 1}, "lagging", 40, 0),
    ("a tier with no watermark at all is lagging", 100, 60, {"watermark": float("nan")}, "lagging", 40, 0),
    ("a window still open is pending", 100, 60, {"watermark": DUE - 1, "now": DUE - 1}, "pending", 40, 0),
    ("the watermark exactly at window end + grace is final", 100, 99, {"watermark": DUE}, "incomplete", 1, 0),
    ("above a lowered threshold a small loss is complete", 1000, 999, {"threshold": 99.0}, "complete", 1, 0),
    ("below a lowered threshold it is incomplete", 1000, 980, {"threshold": 99.0}, "incomplete", 20, 0),
    ("nothing expected but something seen is over", 0, 5, {}, "over", 0, 5),
    (
        "a loss in one partition is not hidden by duplicates in another",
        20,
        20,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 7, 1: 13}},
        "incomplete",
        3,
        3,
    ),
    (
        "duplicates alone, per partition",
        20,
        22,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 12, 1: 10}},
        "over",
        0,
        2,
    ),
    (
        "a partition only the tier has counts as duplicates",
        10,
        12,
        {"exp_parts": {0: 10}, "obs_parts": {0: 10, 5: 2}},
        "over",
        0,
        2,
    ),
    ("without partitions on one side the totals decide", 20, 20, {"exp_parts": {0: 10, 1: 10}}, "complete", 0, 0),
    # Content digests: only a final window whose counts balance is judged by them.
    (
        "counts balance and the digests agree: complete",
        20,
        20,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 10, 1: 10}, "exp_digests": D, "obs_digests": D},
        "complete",
        0,
        0,
    ),
    (
        "counts balance, content differs in a partition: mismatch",
        20,
        20,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 10, 1: 10}, "exp_digests": D, "obs_digests": {0: 7, 1: -1}},
        "mismatch",
        0,
        0,
    ),
    (
        "a loss hidden by a duplicate in the same partition: mismatch",
        10,
        10,
        {"exp_parts": {0: 10}, "obs_parts": {0: 10}, "exp_digests": {0: 2**63 - 1}, "obs_digests": {0: -(2**63)}},
        "mismatch",
        0,
        0,
    ),
    (
        "a digest of a partition only one side has counts as differing from the digest of nothing",
        10,
        10,
        {"exp_parts": {0: 10, 1: 0}, "obs_parts": {0: 10}, "exp_digests": {0: 7, 1: 5}, "obs_digests": {0: 7}},
        "mismatch",
        0,
        0,
    ),
    (
        "an empty partition's digest is the digest of nothing",
        10,
        10,
        {"exp_parts": {0: 10, 1: 0}, "obs_parts": {0: 10}, "exp_digests": {0: 7, 1: 0}, "obs_digests": {0: 7}},
        "complete",
        0,
        0,
    ),
    (
        "the tier's digest unknown: the counts decide",
        20,
        20,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 10, 1: 10}, "exp_digests": D},
        "complete",
        0,
        0,
    ),
    (
        "the reference's digest unknown: the counts decide",
        20,
        20,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 10, 1: 10}, "obs_digests": D},
        "complete",
        0,
        0,
    ),
    (
        "a loss with differing digests is judged by the counts",
        20,
        17,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 7, 1: 10}, "exp_digests": D, "obs_digests": {0: 1, 1: 2}},
        "incomplete",
        3,
        0,
    ),
    (
        "duplicates with differing digests are judged by the counts",
        20,
        21,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 11, 1: 10}, "exp_digests": D, "obs_digests": {0: 1, 1: 2}},
        "over",
        0,
        1,
    ),
    # Content is judged per partition: a partition whose counts balance and whose digests differ is a mismatch
    # whatever the other partitions' counts; the worse status stays and names it (NAMED).
    (
        "duplicates in one partition do not hide changed content in another: over, the other named",
        20,
        22,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 12, 1: 10}, "exp_digests": D, "obs_digests": {0: 1, 1: 2}},
        "over",
        0,
        2,
    ),
    (
        "a loss in one partition does not hide changed content in another: incomplete, the other named",
        20,
        17,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 10, 1: 7}, "exp_digests": D, "obs_digests": {0: 1, 1: 2}},
        "incomplete",
        3,
        0,
    ),
    (
        "a loss within the threshold beside changed content in another partition: mismatch",
        20,
        19,
        {
            "threshold": 90.0,
            "exp_parts": {0: 10, 1: 10},
            "obs_parts": {0: 10, 1: 9},
            "exp_digests": D,
            "obs_digests": {0: 1, 1: 2},
        },
        "mismatch",
        1,
        0,
    ),  # fmt: skip
    (
        "the digests of a partition whose counts differ are no mismatch",
        20,
        21,
        {"exp_parts": {0: 10, 1: 10}, "obs_parts": {0: 11, 1: 10}, "exp_digests": D, "obs_digests": {0: 1, 1: D[1]}},
        "over",
        0,
        1,
    ),
    (
        "without partition counts differing digests beside duplicates say nothing more",
        20,
        21,
        {"exp_digests": D, "obs_digests": {0: 1, 1: 2}},
        "over",
        0,
        1,
    ),
    (
        "without partition counts but balanced totals differing digests are a mismatch",
        20,
        20,
        {"exp_digests": D, "obs_digests": {0: 1, 1: D[1]}},
        "mismatch",
        0,
        0,
    ),
    (
        "a tier behind its window whose content differs is lagging, not a mismatch yet",
        20,
        20,
        {
            "watermark": DUE - 1,
            "exp_parts": {0: 10, 1: 10},
            "obs_parts": {0: 10, 1: 10},
            "exp_digests": D,
            "obs_digests": {0: 1, 1: 2},
        },
        "lagging",
        0,
        0,
    ),  # fmt: skip
    (
        "an open window whose content differs is pending",
        20,
        20,
        {
            "watermark": DUE - 1,
            "now": DUE - 1,
            "exp_parts": {0: 10, 1: 10},
            "obs_parts": {0: 10, 1: 10},
            "exp_digests": D,
            "obs_digests": {0: 1, 1: 2},
        },
        "pending",
        0,
        0,
    ),  # fmt: skip
]


# The partitions each case names in `mismatched_partitions`; every other case names none (null).
NAMED = {
    "counts balance, content differs in a partition: mismatch": [0, 1],
    "a loss hidden by a duplicate in the same partition: mismatch": [0],
    "a digest of a partition only one side has counts as differing from the digest of nothing": [1],
    "a loss with differing digests is judged by the counts": [1],  # partition 1 balances: its content differs
    "duplicates with differing digests are judged by the counts": [1],
    "duplicates in one partition do not hide changed content in another: over, the other named": [1],
    "a loss in one partition does not hide changed content in another: incomplete, the other named": [0],
    "a loss within the threshold beside changed content in another partition: mismatch": [0],
    "without partition counts but balanced totals differing digests are a mismatch": [0],
}


@pytest.mark.parametrize(
    "why, expected, observed, kwargs, status, missing, duplicated", CASES, ids=[c[0] for c in CASES]
)
def test_status_rules(why, expected, observed, kwargs, status, missing, duplicated):
    result = row(expected, observed, **kwargs)
    assert (result["status"], result["missing"], result["duplicated"]) == (status, missing, duplicated), why


@pytest.mark.parametrize("why, expected, observed, kwargs", [c[:4] for c in CASES], ids=[c[0] for c in CASES])
def test_each_case_names_the_partitions_whose_content_differs(why, expected, observed, kwargs):
    assert row(expected, observed, **kwargs)["mismatched_partitions"] == NAMED.get(why), why


def test_a_mismatch_names_its_partitions_and_a_window_not_final_names_none():
    parts = {0: 10, 1: 10, 2: 10}
    digests = {0: 1, 1: 2, 2: 3}
    mismatch = row(30, 30, exp_parts=parts, obs_parts=parts, exp_digests=digests, obs_digests={0: 1, 1: 5, 2: 0})
    assert (mismatch["status"], mismatch["mismatched_partitions"]) == ("mismatch", [1, 2])
    lagging = row(30, 30, watermark=0, exp_parts=parts, obs_parts=parts, exp_digests=digests, obs_digests={0: 9})
    assert (lagging["status"], lagging["mismatched_partitions"]) == ("lagging", None)
    assert (
        row(30, 30, exp_parts=parts, obs_parts=parts, exp_digests=digests, obs_digests=digests)["mismatched_partitions"]
        is None
    )
    assert row(30, 30)["mismatched_partitions"] is None  # no digest on either side


def test_percentage_and_final_flag():
    result = row(200, 150)
    assert result["completeness_pct"] == 75.0 and result["final"]
    assert pd.isna(row(0, 0)["completeness_pct"])
    assert not row(10, 10, watermark=DUE - 1)["final"]


def test_partition_maps_arrive_as_arrow_pairs_too():
    # Spark's mapInPandas hands MAP columns over as lists of (key, value) tuples.
    result = row(20, 20, exp_parts=[(0, 10), (1, 10)], obs_parts=[(0, 9), (1, 11)])
    assert (result["status"], result["missing"], result["duplicated"]) == ("incomplete", 1, 1)


def test_threshold_for_takes_the_first_matching_pattern():
    thresholds = [(re.compile(r"^dc1\.clicks$"), 99.0), (re.compile(r"clicks"), 95.0)]
    assert threshold_for("dc1.clicks", thresholds) == 99.0
    assert threshold_for("dc2.clicks", thresholds) == 95.0
    assert threshold_for("dc1.orders", thresholds) == 100.0


partition_maps = st.dictionaries(st.integers(0, 7), st.integers(0, 1000), max_size=8)


@given(partition_maps, partition_maps)
def test_partition_gaps_balance_the_totals(expected, observed):
    missing, duplicated = partition_gaps(expected, observed)
    assert missing >= 0 and duplicated >= 0
    assert duplicated - missing == sum(observed.values()) - sum(expected.values())
    assert missing >= max(sum(expected.values()) - sum(observed.values()), 0)


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 2 * DUE), st.integers(0, 2 * DUE))
def test_a_window_that_is_not_final_is_never_a_loss(expected, observed, watermark, now):
    result = row(expected, observed, watermark=watermark, now=now)
    if watermark < DUE:
        assert result["status"] in ("complete", "lagging", "pending")
    if result["status"] == "incomplete":
        assert result["final"] and result["missing"] == expected - observed > 0
    if expected == observed:
        assert result["status"] == "complete"


counts_and_digests = st.dictionaries(st.integers(0, 3), st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=4)


@given(counts_and_digests, counts_and_digests, st.sampled_from([None, 0.0, 90.0]))
def test_content_is_judged_per_partition_whatever_the_other_partitions_counts(reference, tier, threshold):
    """A final row names exactly the partitions whose counts balance and whose digests differ; naming any, it is
    never complete, and it is a mismatch unless a loss below the threshold or duplicates make it worse."""
    exp_parts, exp_digests = {p: n for p, (n, _) in reference.items()}, {p: d for p, (_, d) in reference.items()}
    obs_parts, obs_digests = {p: n for p, (n, _) in tier.items()}, {p: d for p, (_, d) in tier.items()}
    expected, observed = sum(exp_parts.values()), sum(obs_parts.values())
    result = row(
        expected,
        observed,
        threshold=threshold,
        exp_parts=exp_parts,
        obs_parts=obs_parts,
        exp_digests=exp_digests,
        obs_digests=obs_digests,
    )
    partitions = sorted(set(exp_parts) | set(obs_parts))
    differing = [
        p
        for p in partitions
        if exp_parts.get(p, 0) == obs_parts.get(p, 0) and exp_digests.get(p, 0) != obs_digests.get(p, 0)
    ]
    assert result["mismatched_partitions"] == (differing or None)
    if differing and result["status"] != "incomplete":
        assert result["status"] == ("over" if result["duplicated"] else "mismatch")
