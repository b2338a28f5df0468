"""The soak's verdict and report: the ground truth (every topic, the bronze table) and the Delta tables read
once the run is over, every invariant checked against them (audit/local/soak_check.py, soak_recovery.py),
the run summed up in facts, and all of it written as `report.json`."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from audit.contract.record import iso
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.local.soak_check import (
    Expectations,
    Verdict,
    check_all,
    gap_totals,
    injected_loss,
    origin_of,
    pipeline_truth,
)
from audit.local.soak_plan import FAULT_KINDS, TRANSACTIONAL_TOPIC, WINDOW_MINUTES
from audit.local.soak_recovery import recovery_check, stop_check, summary

if TYPE_CHECKING:
    import argparse

    from audit.local.pipeline import DropPlan, PipelinePlan
    from audit.local.soak_plan import SoakLog
    from audit.settings import Settings


class Soak(Protocol):
    """What the verdict reads of a soak that has run (audit/local/soak.py's `Soak`)."""

    settings: Settings
    args: argparse.Namespace
    regional: tuple[str, ...]
    hub: str
    plan: PipelinePlan
    drop: DropPlan
    log: SoakLog

    def say(self, text: str) -> None: ...


def soak_verdict(soak: Soak) -> Verdict:
    """Every invariant checked against the ground truth and the tables, with the run's facts."""
    soak.say("reading the ground truth (every topic, the bronze table) and the tables")
    origin_topics = [(cluster, topic) for cluster in soak.regional for topic in soak.plan.topics]
    truth, _hub_topics = pipeline_truth(
        soak.settings, [*origin_topics, (soak.regional[0], TRANSACTIONAL_TOPIC)], soak.hub, WINDOW_MINUTES
    )
    tables = {
        name: read_frame(lake_of(soak.settings), name)
        for name in ("tier_counts", "completeness", "alerts", "audit_rejects")
    }
    expect = Expectations(
        regional=soak.regional,
        hub=soak.hub,
        acked=dict(soak.log.acked),
        drop_logical_topic=f"{soak.drop.cluster}.{soak.drop.topic}",
        drop_window_ms=soak.drop.window_start_ms,
        drop_count=soak.drop.count,
        malformed_markers=soak.log.malformed_markers,
        transactional_topic=f"{soak.regional[0]}.{TRANSACTIONAL_TOPIC}",
        transactions=soak.log.transactions,
        exactly_once=soak.plan.exactly_once,
    )
    checks = check_all(
        tables["tier_counts"], tables["completeness"], tables["alerts"], tables["audit_rejects"], truth, expect
    )
    return Verdict(
        [*checks, recovery_check(soak.log.recoveries), stop_check(soak.log.stops_s)],
        facts=soak_facts(soak, tables["completeness"], truth, expect),
    )


def soak_facts(soak: Soak, completeness, truth, expect: Expectations) -> dict:
    """What the run did and what the tables say of it, for the report."""
    kinds = Counter(done.fault.kind for done in soak.log.faults)
    hub_truth = sum(sum(c.values()) for (lt, w, tier), c in truth.items() if tier == soak.hub)
    origin_truth = sum(sum(c.values()) for (lt, w, tier), c in truth.items() if tier == origin_of(lt))
    return {
        "seed": soak.log.seed,
        "minutes": soak.args.minutes,
        "rate_per_cluster": soak.args.rate,
        "messages_acked": dict(soak.log.acked),
        "messages_acked_total": sum(soak.log.acked.values()),
        "send_failed": dict(soak.log.failed),
        "faults_by_kind": {kind: kinds.get(kind, 0) for kind in FAULT_KINDS},
        "faults": [
            f"{d.began_s:.0f}s {d.fault.kind} {d.fault.target} down {d.down_s}s {d.note}".strip()
            for d in soak.log.faults
        ],
        "exactly_once_from": sorted(soak.plan.exactly_once),
        "malformed_records_injected": len(soak.log.malformed_markers),
        "unplanned_exits": soak.log.unplanned_exits,
        "loss_injected": injected_loss(truth, expect),
        "loss_window": f"{expect.drop_logical_topic} {iso(expect.drop_window_ms, millis=False)}",
        "hub_messages": hub_truth,
        "origin_messages": origin_truth,
        "duplicates_on_hub_true": max(0, hub_truth - origin_truth + injected_loss(truth, expect)),
        "reported_by_tier": gap_totals(completeness),
        "statuses": completeness["status"].value_counts().to_dict() if len(completeness) else {},
        "phases_s": soak.log.phases_s,
        "transactional_load": soak.log.transactions,
        "recovery": summary(soak.log.recoveries),
        "recoveries": [f"{r.fault}: {r.service} {r.seconds} s" for r in soak.log.recoveries],
        "stops_s": soak.log.stops_s,
    }


def write_report(verdict: Verdict, path: Path) -> None:
    """The verdict as JSON: ok, the facts and every check."""
    path.write_text(
        json.dumps(
            {"ok": verdict.ok, "facts": verdict.facts, "checks": [dataclasses.asdict(c) for c in verdict.checks]},
            indent=2,
            default=str,
        )
    )
