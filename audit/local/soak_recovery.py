"""How long each service of the soak took to make progress again after a fault.

A fault ends when its broker is back or its killed process is started again. From then on, the
services the fault touched are watched through what they publish anyway: the status records of
counters, replicators and the lake job (a counter's status commits in the same transaction as its
counts, so a status that shows up means a commit), and the run line of the reconciliation's log.
A service has recovered at the first status emitted after the fault's end whose position on some
partition passed every position it reported before that end, or that shows it caught up (lag 0
everywhere). The soak fails when any recovery takes longer than RECOVERY_LIMIT_S.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from audit.contract.record import AuditRecord, Kind
from audit.local.soak_check import Check
from audit.local.soak_plan import RECOVERY_LIMIT_S, SPARK_RESTART_LIMIT_S, STOP_LIMIT_S, FaultDone, Recovery

if TYPE_CHECKING:
    from audit.settings import Settings

LAKE_TIER = "lake"
RECONCILE = "reconcile"
# The reconciliation's log line once a run has stored the audit records it read: its first Delta commit.
RECONCILE_PROGRESS_MARKER = "audit.books.run: reconcile step done  step=records"
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")


@dataclass(frozen=True)
class Reporter:
    """Whose status records show a service's progress: (service, tier, cluster) as the records carry them."""

    service: str
    tier: str
    cluster: str

    @property
    def label(self) -> str:
        if self.service == RECONCILE:
            return RECONCILE
        if self.tier == LAKE_TIER:
            return "lake"
        if self.service == "kaudit-mirror":
            return f"replicator {self.cluster}->{self.tier}"
        return f"counter {self.cluster}"


def counter(cluster: str) -> Reporter:
    return Reporter("kaudit-counter", cluster, cluster)


def replicator(source: str, hub: str) -> Reporter:
    return Reporter("kaudit-mirror", hub, source)


def lake(hub: str) -> Reporter:
    return Reporter("kaudit-lake", LAKE_TIER, hub)


def reconcile() -> Reporter:
    return Reporter(RECONCILE, "", "")


def touched_by(kind: str, target: str, regional: tuple[str, ...], hub: str) -> list[Reporter]:
    """The services a fault stops: the killed one, or every client of the killed broker."""
    if kind == "kill-counter":
        return [counter(target)]
    if kind == "kill-replicator":
        return [replicator(target, hub)]
    if kind == "kill-lake":
        return [lake(hub)]
    if kind == "kill-reconcile":
        return [reconcile()]
    if kind == "kill-broker" and target == hub:
        return [counter(hub), *(replicator(source, hub) for source in regional), lake(hub)]
    if kind == "kill-broker":
        return [counter(target), replicator(target, hub)]
    raise ValueError(f"unknown fault kind {kind!r}")


def first_progress_ms(records: Iterable[AuditRecord], reporter: Reporter, ended_at_ms: int) -> int | None:
    """When `reporter` first showed progress after `ended_at_ms` (see the module doc), or None."""
    mine = sorted(
        (r for r in records if r.kind == Kind.STATUS and _reporter_of(r) == reporter),
        key=lambda r: r.emitted_at_ms,
    )
    before: dict[tuple[str, int], int] = {}
    for record in mine:
        if record.emitted_at_ms > ended_at_ms:
            break
        for status in record.partitions:
            key = (record.topic, status.partition)
            before[key] = max(before.get(key, -1), status.position)
    for record in mine:
        if record.emitted_at_ms <= ended_at_ms or not record.partitions:
            continue
        moved = any(s.position > before.get((record.topic, s.partition), -1) for s in record.partitions)
        if moved or all(s.lag == 0 for s in record.partitions):
            return record.emitted_at_ms
    return None


def first_run_after_ms(log_text: str, marker: str, ended_at_ms: int) -> int | None:
    """The time of the first log line holding `marker` stamped after `ended_at_ms` (log lines start with UTC ISO)."""
    for line in log_text.splitlines():
        if marker not in line:
            continue
        stamp = _LOG_TIME.match(line)
        if stamp is None:
            continue
        at_ms = int(datetime.fromisoformat(stamp.group(1)).replace(tzinfo=UTC).timestamp() * 1000)
        if at_ms > ended_at_ms:
            return at_ms
    return None


def measure(
    faults: list[FaultDone], records: list[AuditRecord], reconcile_log: str, regional: tuple[str, ...], hub: str
) -> list[Recovery]:
    """One Recovery per fault and service it touched, but none for a service killed again by a later fault
    before it showed progress: that later fault's recovery covers it."""
    recoveries = []
    for index, done in enumerate(faults):
        for reporter in touched_by(done.fault.kind, done.fault.target, regional, hub):
            if reporter.service == RECONCILE:
                at_ms = first_run_after_ms(reconcile_log, RECONCILE_PROGRESS_MARKER, done.ended_at_ms)
            else:
                at_ms = first_progress_ms(records, reporter, done.ended_at_ms)
            killed_again = [
                later.ended_at_ms for later in faults[index + 1 :] if _kills(later, reporter, regional, hub)
            ]
            if killed_again and (at_ms is None or at_ms > killed_again[0]):
                continue
            seconds = None if at_ms is None else round((at_ms - done.ended_at_ms) / 1000, 1)
            restarted_spark_job = done.fault.kind in ("kill-lake", "kill-reconcile")
            limit_s = SPARK_RESTART_LIMIT_S if restarted_spark_job else RECOVERY_LIMIT_S
            recoveries.append(Recovery(f"{done.fault.kind} {done.fault.target}", reporter.label, seconds, limit_s))
    return recoveries


def pending(recoveries: list[Recovery]) -> bool:
    """Whether some service has not shown progress yet and is still within its limit."""
    return any(r.seconds is None for r in recoveries)


def _kills(fault: FaultDone, reporter: Reporter, regional: tuple[str, ...], hub: str) -> bool:
    """Whether `fault` kills the process of `reporter` (a broker fault leaves it running)."""
    return not fault.fault.kind == "kill-broker" and reporter in touched_by(
        fault.fault.kind, fault.fault.target, regional, hub
    )


def measure_from_pipeline(
    settings: Settings, faults: list[FaultDone], reconcile_log: Path, regional: tuple[str, ...], hub: str
) -> list[Recovery]:
    """`measure` on every cluster's audit topic and the reconciliation's log."""
    from audit.io.audit_log import read_audit_topic
    from audit.io.clients import client_config

    records = []
    for cluster in settings.cluster_names:
        records += read_audit_topic(client_config(settings, cluster), settings.audit_topic)[0]
    return measure(faults, records, reconcile_log.read_text(errors="replace"), regional, hub)


def summary(recoveries: list[Recovery]) -> dict:
    """p50 and max over the recoveries seen, and those that took too long or never came."""
    seconds = [r.seconds for r in recoveries if r.seconds is not None]
    return {
        "measured": len(seconds),
        "p50_s": round(statistics.median(seconds), 1) if seconds else None,
        "max_s": round(max(seconds), 1) if seconds else None,
        "too_slow": [
            f"{r.fault}: {r.service} {_seconds(r.seconds)} (limit {r.limit_s:.0f} s)" for r in recoveries if not r.ok
        ],
    }


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _reporter_of(record: AuditRecord) -> Reporter:
    return Reporter(record.service, record.tier, record.cluster)


def recovery_check(recoveries: list[Recovery]) -> Check:
    facts = summary(recoveries)
    detail = (
        f"{facts['measured']} recoveries measured, p50 {facts['p50_s']} s, max {facts['max_s']} s"
        if facts["measured"]
        else "no recovery measured"
    )
    if facts["too_slow"]:
        detail += "; over the limit or never: " + "; ".join(facts["too_slow"])
    return Check(
        "8",
        f"every service makes progress within {RECOVERY_LIMIT_S:.0f} s of its fault's end "
        f"(a restarted Spark job {SPARK_RESTART_LIMIT_S:.0f} s)",
        not facts["too_slow"],
        detail,
    )


def stop_check(stops_s: dict[str, float]) -> Check:
    slow = {name: seconds for name, seconds in stops_s.items() if seconds > STOP_LIMIT_S}
    detail = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(stops_s.items())) or "no service stopped"
    return Check("8", f"every service stops within {STOP_LIMIT_S:.0f} s of SIGTERM", bool(stops_s) and not slow, detail)
