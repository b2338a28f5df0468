"""The soak: its fault schedule and its checker as pure logic, and a short real soak end to end.

The short soak (`kaudit soak --minutes 1`: 6 faults, every kind, a regional broker among them)
starts its own three local clusters, every service and Spark job, then must report every invariant
held. The checker tests hand it tables that disagree with the truth and expect it to say so, so the
soak can fail.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from audit.contract.errors import ConfigError
from audit.local.pipeline import PipelinePlan, replicator_args
from audit.local.soak import exactly_once_clusters
from audit.local.soak_check import Expectations, check_all
from audit.local.soak_plan import FAULT_KINDS, fault_schedule

W = 1_700_000_040_000  # a window start, 1-minute aligned
TS = pd.Timestamp(W, unit="ms", tz="UTC")
EXPECT = Expectations(
    regional=("dc1",),
    hub="aggregate",
    acked={"dc1": 10},
    drop_logical_topic="dc1.orders",
    drop_window_ms=W,
    drop_count=2,
    malformed_markers=("bad-0",),
)


def test_schedule_deals_every_kind_before_repeating_and_is_seeded():
    faults = fault_schedule(random.Random(3), 600, 30, ("dc1", "dc2"), "aggregate")
    assert {f.kind for f in faults[: len(FAULT_KINDS)]} == set(FAULT_KINDS)
    assert faults == fault_schedule(random.Random(3), 600, 30, ("dc1", "dc2"), "aggregate")
    assert all(0 < f.at_s < 600 for f in faults) and 12 <= len(faults) <= 40
    assert all(f.target in ("dc1", "dc2") for f in faults if f.kind == "kill-replicator")


def _tables(*, hub_count=8, lake_count=8, reported_missing=2, reported_dup=0, status="incomplete"):
    counts = pd.DataFrame(
        [
            {
                "logical_topic": "dc1.orders",
                "origin_cluster": "dc1",
                "window_start": TS,
                "tier": "producer",
                "count": 10,
                "by_partition": [(0, 10)],
            },
            {
                "logical_topic": "dc1.orders",
                "origin_cluster": "dc1",
                "window_start": TS,
                "tier": "dc1",
                "count": 10,
                "by_partition": None,
            },
            {
                "logical_topic": "dc1.orders",
                "origin_cluster": "dc1",
                "window_start": TS,
                "tier": "aggregate",
                "count": hub_count,
                "by_partition": None,
            },
            {
                "logical_topic": "dc1.orders",
                "origin_cluster": "dc1",
                "window_start": TS,
                "tier": "lake",
                "count": lake_count,
                "by_partition": None,
            },
        ]
    )
    rows = pd.DataFrame(
        [
            {
                "logical_topic": "dc1.orders",
                "window_start": TS,
                "tier": "dc1",
                "missing": 0,
                "duplicated": 0,
                "status": "complete",
                "final": True,
            },
            {
                "logical_topic": "dc1.orders",
                "window_start": TS,
                "tier": "aggregate",
                "missing": reported_missing,
                "duplicated": reported_dup,
                "status": status,
                "final": True,
            },
            {
                "logical_topic": "dc1.orders",
                "window_start": TS,
                "tier": "lake",
                "missing": 2,
                "duplicated": 0,
                "status": "incomplete",
                "final": True,
            },
        ]
    )
    alerts = pd.DataFrame([{"kind": "loss", "logical_topic": "dc1.orders", "window_start": TS, "tier": "lake"}])
    rejects = pd.DataFrame([{"raw": "xx bad-0 yy", "reason": "not JSON"}])
    return counts, rows, alerts, rejects


TRUTH = {
    ("dc1.orders", W, "dc1"): Counter({0: 10}),
    ("dc1.orders", W, "aggregate"): Counter({0: 8}),
    ("dc1.orders", W, "lake"): Counter({0: 8}),
}


def test_checker_passes_tables_that_match_the_truth():
    checks = check_all(*_tables(), TRUTH, EXPECT)
    assert [c for c in checks if not c.ok] == []


@pytest.mark.parametrize(
    "wrong, failing",
    [
        ({"hub_count": 9}, "every tier's count"),  # a counter double-counted after a kill
        ({"reported_missing": 1, "status": "incomplete"}, "the injected loss"),  # loss under-reported
        ({"reported_missing": 0, "reported_dup": 0, "status": "complete"}, "reported missing and duplicated"),
        (
            {"reported_missing": 2, "reported_dup": 0, "status": "over"},
            "duplicates show as over",
        ),  # a final loss not incomplete
        ({"status": "mismatch"}, "no window is a content mismatch"),  # a digest differs though nothing changed
    ],
)
def test_checker_fails_tables_that_disagree_with_the_truth(wrong, failing):
    failed = [c.name for c in check_all(*_tables(**wrong), TRUTH, EXPECT) if not c.ok]
    assert any(name.startswith(failing) for name in failed), failed


def test_a_drop_window_holding_fewer_messages_than_k_expects_them_all_lost():
    # The hook drops the first K messages of its window; this one held 2, so K = 5 loses exactly 2.
    fewer = dataclasses.replace(EXPECT, drop_count=5)
    truth = {**TRUTH, ("dc1.orders", W, "dc1"): Counter({0: 2}), ("dc1.orders", W, "aggregate"): Counter()}
    truth[("dc1.orders", W, "lake")] = Counter()
    counts, rows, alerts, rejects = _tables(hub_count=0, lake_count=0)
    counts.loc[counts["tier"].isin(["producer", "dc1"]), "count"] = 2
    checks = {c.invariant: c for c in check_all(counts, rows, alerts, rejects, truth, fewer)}
    assert checks["3"].ok, checks["3"].detail
    assert "injected 2, all the window held" in checks["3"].detail
    # ...and five reported where two were lost still fails
    rows.loc[rows["tier"] == "aggregate", "missing"] = 5
    assert not {c.invariant: c for c in check_all(counts, rows, alerts, rejects, truth, fewer)}["3"].ok


def test_checker_fails_a_loss_alert_without_a_loss_and_an_unrejected_record():
    counts, rows, alerts, rejects = _tables()
    alerts = pd.concat(
        [alerts, pd.DataFrame([{"kind": "loss", "logical_topic": "dc1.orders", "window_start": TS, "tier": "dc1"}])]
    )
    failed = [c.invariant for c in check_all(counts, rows, alerts, rejects.iloc[0:0], TRUTH, EXPECT) if not c.ok]
    assert failed == ["5", "6"]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow(minutes=5)
@pytest.mark.timeout(960)  # ~5 min on 2 idle cores, up to 9 with the machine shared 4 ways
def test_short_soak_keeps_every_invariant_with_one_replicator_of_each_mode(tmp_path: Path):
    """One soak, both replicator modes: dc1's at least once (seed 11 kills it twice: its duplicates must
    show as over), dc2's exactly once (its target broker is killed: none of its topics twice on the hub)."""
    state = tmp_path / "soak"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.cli",
            "soak",
            "--minutes",
            "1",
            "--fault-gap-s",
            "11",
            "--seed",
            "11",
            "--backfill-messages",
            "3000",
            "--state-dir",
            str(state),
            "--exactly-once",
            "dc2",
        ],
        capture_output=True,
        text=True,
        timeout=930,
    )
    report = json.loads((state / "report.json").read_text()) if (state / "report.json").exists() else None
    assert report is not None, result.stdout[-4000:] + result.stderr[-4000:]
    failed = [c for c in report["checks"] if not c["ok"]]
    assert failed == [], result.stdout[-6000:]
    assert result.returncode == 0
    facts = report["facts"]
    assert sum(facts["faults_by_kind"].values()) >= 4 and facts["faults_by_kind"]["kill-broker"] >= 1
    assert facts["reported_by_tier"]["aggregate"]["missing"] == facts["loss_injected"]
    assert facts["exactly_once_from"] == ["dc2"]
    assert facts["faults_by_kind"]["kill-replicator"] >= 1 and any("kill-replicator dc1" in f for f in facts["faults"])
    assert facts["messages_acked_total"] >= 2 * 3000 + 2 * 20 * 40  # the backfill and most of a minute at 20 msg/s
    # every fault touches at least one service, and each one's recovery was measured (the check holds the limit)
    assert facts["recovery"]["measured"] >= len(facts["faults"]), facts["recoveries"]


def _with_transactional_topic(
    status: str,
    *,
    lake_holds: int = 5,
    exactly_once: frozenset[str] = frozenset(),
    transactions: str = "transactions: 3",
):
    """The tables plus dc1.ledger: written by a plain transactional producer, so no producer tier row."""
    counts, rows, alerts, rejects = _tables()
    ledger = [
        {"logical_topic": "dc1.ledger", "window_start": TS, "tier": tier, "missing": 0, "duplicated": 0}
        | {"status": status if tier == "lake" else "complete", "final": True}
        for tier in ("dc1", "aggregate", "lake")
    ]
    rows = pd.concat([rows, pd.DataFrame(ledger)], ignore_index=True)
    counts = pd.concat(
        [
            counts,
            pd.DataFrame(
                [
                    {"logical_topic": "dc1.ledger", "origin_cluster": "dc1", "window_start": TS, "tier": tier}
                    | {"count": n, "by_partition": None}
                    for tier, n in (("dc1", 5), ("aggregate", 5), ("lake", lake_holds))
                ]
            ),
        ],
        ignore_index=True,
    )
    truth = TRUTH | {
        ("dc1.ledger", W, "dc1"): Counter({0: 5}),
        ("dc1.ledger", W, "aggregate"): Counter({0: 5}),
        ("dc1.ledger", W, "lake"): Counter({0: lake_holds}),
    }
    expect = dataclasses.replace(
        EXPECT, transactional_topic="dc1.ledger", transactions=transactions, exactly_once=exactly_once
    )
    return check_all(counts, rows, alerts, rejects, truth, expect)


def _invariant_7(checks) -> bool:
    [check] = [c for c in checks if c.invariant == "7"]
    return check.ok


def test_a_transactional_window_over_by_its_duplicates_is_judged_at_least_once_but_not_exactly_once():
    assert _invariant_7(_with_transactional_topic("over", lake_holds=6))
    assert not _invariant_7(_with_transactional_topic("over", lake_holds=6, exactly_once=frozenset({"dc1"})))
    assert _invariant_7(_with_transactional_topic("over", lake_holds=6, exactly_once=frozenset({"dc2"}))), (
        "dc1's replicator ran at least once"
    )
    assert not _invariant_7(_with_transactional_topic("incomplete", lake_holds=4)), "short is never judged right"


def test_the_origin_of_a_transactional_topic_holds_exactly_what_its_producer_committed():
    summary = "transactions: 3 (0 failed), {} messages committed, 2 aborted in 1.0 s"
    assert _invariant_7(_with_transactional_topic("complete", transactions=summary.format(5)))
    assert not _invariant_7(_with_transactional_topic("complete", transactions=summary.format(7)))


def test_a_transactional_topic_without_a_producer_tier_passes_when_complete_and_fails_when_lagging():
    assert [c.name for c in _with_transactional_topic("complete") if not c.ok] == []
    failed = [c.invariant for c in _with_transactional_topic("lagging") if not c.ok]
    assert failed == ["7"]


def test_with_exactly_once_replicators_a_duplicate_on_the_hub_fails_the_soak():
    exactly_once = dataclasses.replace(EXPECT, exactly_once=frozenset({"dc1"}))
    passed = {c.name: c.ok for c in check_all(*_tables(), TRUTH, exactly_once)}
    assert passed["exactly-once replicators: the hub holds no duplicate, whatever was killed"]
    doubled = TRUTH | {("dc1.orders", W, "aggregate"): Counter({0: 11})}
    failed = [c.name for c in check_all(*_tables(hub_count=11), doubled, exactly_once) if not c.ok]
    assert "exactly-once replicators: the hub holds no duplicate, whatever was killed" in failed
    [check] = [c for c in check_all(*_tables(), TRUTH, exactly_once) if c.name.startswith("exactly-once")]
    assert check.invariant == "4"
    # The same duplicate from an origin whose replicator ran at least once is no exactly-once failure.
    other = dataclasses.replace(EXPECT, exactly_once=frozenset({"dc2"}))
    failed = [c.name for c in check_all(*_tables(hub_count=11), doubled, other) if not c.ok]
    assert "exactly-once replicators: the hub holds no duplicate, whatever was killed" not in failed


@pytest.mark.parametrize(
    "given, clusters",
    [
        (None, set()),
        ("", set()),
        ("all", {"dc1", "dc2"}),
        (True, {"dc1", "dc2"}),
        ("dc2", {"dc2"}),
        (" dc1,dc2", {"dc1", "dc2"}),
    ],
)
def test_exactly_once_names_the_replicators_that_run_it(given, clusters):
    assert exactly_once_clusters(argparse.Namespace(exactly_once=given), ("dc1", "dc2")) == clusters


def test_an_unknown_cluster_for_exactly_once_is_named():
    with pytest.raises(ConfigError, match="aggregate is not a regional cluster"):
        exactly_once_clusters(argparse.Namespace(exactly_once="dc2,aggregate"), ("dc1", "dc2"))


def test_only_the_named_replicators_run_exactly_once():
    plan = PipelinePlan(regional=("dc1", "dc2"), hub="aggregate", exactly_once=frozenset({"dc2"}))
    assert "--exactly-once" not in replicator_args(plan, "dc1")
    assert "--exactly-once" in replicator_args(plan, "dc2")
