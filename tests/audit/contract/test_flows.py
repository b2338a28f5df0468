"""Declared flows (audit/contract/flows.py, pure): which tiers a topic is expected at before they count it, which
tiers counted a topic no flow leads to, and what the alerts and the UI say of a silent tier."""

from __future__ import annotations

import logging
import re

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from audit.books.judge import paths
from audit.books.judge.rules import JudgeRules
from audit.contract.flows import Flow, expected_tiers, is_placeholder, silent_cause, undeclared_tiers
from audit.contract.naming import IdentityNaming, PrefixNaming

PREFIX = PrefixNaming(frozenset({"dc1", "dc2", "aggregate"}))
EVERY = (re.compile(".*"),)
HUB = (Flow("dc1", "aggregate", EVERY), Flow("dc2", "aggregate", EVERY), Flow("aggregate", "lake", EVERY))


def flow(source: str, target: str, *patterns: str) -> Flow:
    return Flow(source, target, tuple(map(re.compile, patterns or (".*",))))


def test_a_topic_counted_at_its_origin_is_expected_at_every_hop_after_it():
    counted = {("dc1", "orders", "producer"), ("dc1", "orders", "dc1")}
    assert expected_tiers(counted, HUB, PREFIX) == {("dc1", "orders", "aggregate"), ("dc1", "orders", "lake")}


def test_a_topic_only_the_producer_counted_is_expected_at_its_origin_and_every_hop_after_it():
    assert expected_tiers({("dc2", "pay", "producer")}, HUB, PREFIX) == {
        ("dc2", "pay", "dc2"),  # the flow's source: its counter never reported
        ("dc2", "pay", "aggregate"),
        ("dc2", "pay", "lake"),
    }


def test_the_origin_is_expected_only_where_a_flow_carrying_the_topic_leaves_it():
    produced = {("dc1", "orders", "producer"), ("dc1", "clicks", "producer")}
    flows = (flow("dc1", "aggregate", "^orders$"),)
    assert expected_tiers(produced, flows, PREFIX) == {("dc1", "orders", "dc1"), ("dc1", "orders", "aggregate")}
    assert expected_tiers(produced, (flow("aggregate", "lake"),), PREFIX) == set()  # no flow leaves dc1
    counted = produced | {("dc1", "orders", "dc1")}
    assert ("dc1", "orders", "dc1") not in expected_tiers(counted, flows, PREFIX)  # its counter counted it


def test_a_counter_that_never_started_at_a_flows_source_lags_there_with_its_cause(tmp_path):
    from audit.contract.completeness import classify
    from audit.io.lake import Lake

    rules = JudgeRules(("producer", "dc1", "aggregate"), "producer", 10, 300.0, flows=HUB[:1], naming=PREFIX)
    found = paths.tier_paths(Lake.of(tmp_path / "lake"), rules, counted={("dc1", "orders", "producer")})
    assert found is not None and ("dc1", "orders", "dc1") in found.silent, found
    [at_origin] = [row for row in found.rows if row[2] == "dc1"]
    assert at_origin[4:6] == ("producer", None), at_origin  # judged against the producer, no watermark
    window_end = 1_700_000_600_000
    judged = classify(
        pd.DataFrame(
            [
                {
                    "expected": 600,
                    "observed": 0,
                    "expected_by_partition": None,
                    "observed_by_partition": None,
                    "window_end_ms": window_end,
                    "tier_watermark_ms": float("nan") if at_origin[5] is None else at_origin[5],
                    "threshold_pct": at_origin[6],
                }
            ]
        ),
        now_ms=window_end + 3_600_000,
        grace_ms=300_000,
    )
    assert judged["status"].tolist() == ["lagging"]
    assert silent_cause("dc1", "dc1.orders") == (
        "the counter of dc1 never reported dc1.orders: is kaudit count --cluster dc1 running, does its topic "
        "selection include it?"
    )


def test_a_tier_that_counted_is_not_expected_and_the_hop_after_it_still_is():
    counted = {("dc1", "orders", "dc1"), ("dc1", "orders", "aggregate")}
    assert expected_tiers(counted, HUB, PREFIX) == {("dc1", "orders", "lake")}


def test_a_flows_regexes_are_searched_in_the_name_on_its_source():
    flows = (flow("dc1", "aggregate", "^orders$"), flow("aggregate", "lake", r"^dc1\.orders$"))
    counted = {("dc1", "orders", "dc1"), ("dc1", "clicks", "dc1")}
    assert expected_tiers(counted, flows, PREFIX) == {("dc1", "orders", "aggregate"), ("dc1", "orders", "lake")}
    identity = (flow("dc1", "aggregate", "^orders$"), flow("aggregate", "lake", "^orders$"))
    assert expected_tiers({("dc1", "orders", "dc1")}, identity, IdentityNaming()) == {
        ("dc1", "orders", "aggregate"),
        ("dc1", "orders", "lake"),
    }


def test_with_no_flow_nothing_is_expected_and_nothing_undeclared():
    counted = {("dc1", "orders", "dc1"), ("dc1", "orders", "aggregate")}
    assert expected_tiers(counted, (), PREFIX) == set()
    assert undeclared_tiers(counted, (), PREFIX) == set()


def test_a_tier_no_flow_leads_to_is_undeclared_and_nothing_else():
    flows = (flow("dc1", "aggregate"),)
    counted = {
        ("dc1", "orders", "producer"),
        ("dc1", "orders", "dc1"),  # where it was written
        ("dc1", "orders", "aggregate"),  # declared
        ("dc1", "orders", "lake"),  # no flow into the lake
        ("dc2", "pay", "dc2"),
        ("dc2", "pay", "aggregate"),  # no flow from dc2
    }
    assert undeclared_tiers(counted, flows, PREFIX) == {("dc1", "orders", "lake"), ("dc2", "pay", "aggregate")}


def test_the_cause_names_the_topic_the_tier_and_the_hop_to_check():
    assert silent_cause("aggregate", "dc1.orders") == (
        "nothing of dc1.orders has reached aggregate: is the replicator running, does its topic regex include it?"
    )
    assert "is the lake job running" in silent_cause("lake", "dc1.orders")
    assert is_placeholder("") and not is_placeholder("kaudit-counter@dc1") and not is_placeholder(None)


def test_an_undeclared_tier_is_logged_once_per_process(caplog):
    rules = JudgeRules(
        ("producer", "dc1", "aggregate"), "producer", 10, 300.0, flows=(flow("dc1", "lake"),), naming=PREFIX
    )
    counted = {("dc1", "logged-once", "dc1"), ("dc1", "logged-once", "aggregate")}
    with caplog.at_level(logging.WARNING, logger=paths.__name__):
        paths._log_undeclared(counted, rules)
        paths._log_undeclared(counted, rules)
    lines = [r.getMessage() for r in caplog.records if "logged-once" in r.getMessage()]
    assert len(lines) == 1 and "tier=aggregate" in lines[0], lines


CLUSTERS = ("dc1", "dc2", "aggregate")
TIERS = ("producer", *CLUSTERS, "lake")
pairs = st.sets(st.tuples(st.sampled_from(CLUSTERS[:2]), st.sampled_from(("a", "b")), st.sampled_from(TIERS)))
flow_sets = st.lists(
    st.tuples(st.sampled_from(CLUSTERS), st.sampled_from((*CLUSTERS, "lake"))).filter(lambda f: f[0] != f[1]),
    max_size=5,
)


@given(pairs, flow_sets)
def test_expected_tiers_are_new_and_each_reached_by_a_flow_from_a_tier_that_holds_the_topic(counted, declared):
    flows = tuple(flow(source, target) for source, target in declared)
    expected = expected_tiers(counted, flows, PREFIX)
    assert not expected & counted
    holding = {(o, t, o if tier == "producer" else tier) for o, t, tier in counted} | expected
    for origin, topic, tier in expected:
        reached = any((origin, topic, f.source) in holding and f.target == tier for f in flows)
        # or the origin of a topic the producer counted, which a flow leaves: its own counter is expected
        source = tier == origin and (origin, topic, "producer") in counted and any(f.source == tier for f in flows)
        assert reached or source, (origin, topic, tier)
    # adding what is expected as counted expects nothing more: the closure is complete
    assert expected_tiers(counted | expected, flows, PREFIX) == set()
