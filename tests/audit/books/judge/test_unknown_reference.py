"""The reference of a window whose counts are unknown (audit/contract/unknown_counts.py), as a table of cases
through the driver's judge (`judged_frame`: the joins, the fallback, `classify` and the unknown rule), with no
broker and no Spark. A producer that cannot vouch for a window (a transactional producer audited by an
interceptor that sees no commit or abort) is never the reference; one audited exactly stays it."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
import pytest

from audit.books.judge.in_driver import judged_frame
from audit.contract.unknown_counts import window_references, with_unknown
from audit.contract.windows import window_end

START = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
END_MS = window_end(int(START.timestamp() * 1000))
GRACE_MS = 300_000
FINAL = END_MS + GRACE_MS  # every tier's watermark: every window is final
PATH = ("dc1", "aggregate", "lake")


def judge(counts: dict[str, tuple[int, bool]], *, reference: str = "producer") -> dict[str, tuple]:
    """Per tier on the path: (reference_tier, expected, observed, missing, duplicated, status) of one final window
    of dc1.orders; `counts`: tier -> (count, unknown), the tiers that counted."""
    paths = [("dc1", "orders", tier, order, reference, FINAL, 100.0) for order, tier in enumerate(PATH)]
    paths = [row for row in paths if row[2] != reference]
    windows = pa.table({"origin_cluster": ["dc1"], "topic": ["orders"], "window_start": [START]})
    tiers = list(counts)
    rows = pa.table(
        {
            "origin_cluster": ["dc1"] * len(tiers),
            "topic": ["orders"] * len(tiers),
            "window_start": pa.array([START] * len(tiers), pa.timestamp("us", tz="UTC")),
            "tier": tiers,
            "count": pa.array([counts[t][0] for t in tiers], pa.int64()),
            "by_partition": pa.array([None] * len(tiers), pa.map_(pa.int32(), pa.int64())),
            "digest_by_partition": pa.array([None] * len(tiers), pa.map_(pa.int32(), pa.int64())),
            "latency_p99_ms": pa.array([None] * len(tiers), pa.float64()),
            "window_minutes": pa.array([10] * len(tiers), pa.int32()),
            "unknown": [counts[t][1] for t in tiers],
        }
    )
    judged = judged_frame(windows, paths, rows, minutes=10, now_ms=FINAL + 1, grace_ms=GRACE_MS)
    columns = ["reference_tier", "expected", "observed", "missing", "duplicated", "status"]
    return {row.tier: tuple(getattr(row, c) for c in columns) for row in judged.itertuples(index=False)}


K = 17
CASES = [
    (
        "a transactional producer seen by an interceptor (acks of aborted transactions counted): dc1 is the "
        "reference and its own row unknown, never a loss",
        {"producer": (4_500, True), "dc1": (3_900, False), "aggregate": (3_900, False), "lake": (3_900, False)},
        {
            "dc1": ("dc1", 3_900, 3_900, 0, 0, "unknown"),
            "aggregate": ("dc1", 3_900, 3_900, 0, 0, "complete"),
            "lake": ("dc1", 3_900, 3_900, 0, 0, "complete"),
        },
    ),
    (
        "the same with K dropped by the replicator: exactly K missing at the aggregate, and after it",
        {"producer": (4_500, True), "dc1": (3_900, False), "aggregate": (3_900 - K, False), "lake": (3_900 - K, False)},
        {
            "dc1": ("dc1", 3_900, 3_900, 0, 0, "unknown"),
            "aggregate": ("dc1", 3_900, 3_900 - K, K, 0, "incomplete"),
            "lake": ("dc1", 3_900, 3_900 - K, K, 0, "incomplete"),
        },
    ),
    (
        "an unknown producer that counted fewer than dc1 does not make dc1 over",
        {"producer": (3_000, True), "dc1": (3_900, False), "aggregate": (3_900, False)},
        {
            "dc1": ("dc1", 3_900, 3_900, 0, 0, "unknown"),
            "aggregate": ("dc1", 3_900, 3_900, 0, 0, "complete"),
            "lake": ("dc1", 3_900, 0, 3_900, 0, "incomplete"),
        },
    ),
    (
        "a producer audited exactly (aborted apart) stays the reference",
        {"producer": (3_900, False), "dc1": (3_900, False), "aggregate": (3_900, False), "lake": (3_900, False)},
        {tier: ("producer", 3_900, 3_900, 0, 0, "complete") for tier in PATH},
    ),
    (
        "and a known producer's loss at dc1 is still a loss",
        {"producer": (3_900, False), "dc1": (3_800, False), "aggregate": (3_800, False), "lake": (3_800, False)},
        {tier: ("producer", 3_900, 3_800, 100, 0, "incomplete") for tier in PATH},
    ),
    (
        "a tier that cannot vouch for its own counts is unknown, not a loss",
        {"producer": (3_900, False), "dc1": (3_900, False), "aggregate": (3_000, True), "lake": (3_900, False)},
        {
            "dc1": ("producer", 3_900, 3_900, 0, 0, "complete"),
            "aggregate": ("producer", 3_900, 3_000, 0, 0, "unknown"),
            "lake": ("producer", 3_900, 3_900, 0, 0, "complete"),
        },
    ),
    (
        "unknown origin counts behind an unknown producer leave the tiers after it unknown too",
        {"producer": (4_500, True), "dc1": (3_000, True), "aggregate": (3_900, False), "lake": (3_900, False)},
        {
            "dc1": ("dc1", 3_000, 3_000, 0, 0, "unknown"),
            "aggregate": ("dc1", 3_000, 3_900, 0, 0, "unknown"),
            "lake": ("dc1", 3_000, 3_900, 0, 0, "unknown"),
        },
    ),
]


@pytest.mark.parametrize(("why", "counts", "verdicts"), CASES, ids=[case[0][:60] for case in CASES])
def test_the_reference_of_a_window_with_unknown_counts(why, counts, verdicts):
    assert judge(counts) == verdicts, why


def test_a_topic_judged_against_its_origin_already_is_not_changed_by_an_unknown_producer():
    counts = {"producer": (4_500, True), "dc1": (3_900, False), "aggregate": (3_890, False), "lake": (3_890, False)}
    judged = judge(counts, reference="dc1")
    assert judged == {tier: ("dc1", 3_900, 3_890, 10, 0, "incomplete") for tier in ("aggregate", "lake")}


def test_the_rule_on_rows_as_joins_leave_them():
    rows = pd.DataFrame(
        {
            "origin_cluster": ["dc1"] * 4,
            "tier": ["dc1", "aggregate", "lake", "aggregate"],
            "reference_tier": ["producer", "producer", "producer", None],
            "reference_unknown": [True, None, False, None],
        }
    )
    assert window_references(rows).tolist() == ["dc1", "producer", "producer", None]
    judged = rows.assign(
        reference_tier=window_references(rows),
        observed_unknown=[None, True, False, None],
        expected_unknown=pd.array([None, None, True, False], dtype="boolean"),
        missing=[5, 5, 5, 5],
        duplicated=[1, 1, 1, 1],
        status=["incomplete", "over", "incomplete", "incomplete"],
        mismatched_partitions=[[1], None, [2], [3]],
    )
    out = with_unknown(judged)
    assert out["status"].tolist() == ["unknown", "unknown", "unknown", "incomplete"]
    assert out["missing"].tolist() == [0, 0, 0, 5] and out["duplicated"].tolist() == [0, 0, 0, 1]
    assert out["mismatched_partitions"].tolist() == [None, None, None, [3]]
