"""Email alerts: a final window below its threshold, over or with content that differs, its recovery, a tier falling
behind, a drop.

One run (`run_alerts`, `kaudit alert`, or the reconciliation's continuous mode after each pass):
  1. read completeness, tier_status and tier_counts (deltalake, no JVM) and the `alerts` log;
  2. decide the alerts (rules.py): loss/over/mismatch for windows FINAL for the tier, recovery for a window
     alerted on that is now complete, lag for a tier whose watermark is too old, drop for a final window
     whose reference count fell far below that time of day's usual (drops.py), restated for a window
     that flips between complete and incomplete again after its alert (`restatements`);
  3. record every new alert as `pending` in the log BEFORE sending (so a crash or an SMTP outage loses
     nothing), keyed by a deterministic id so a rerun finds it and never records it twice;
  4. send one email per (kind, recipients) holding all its pending alerts (mail.py), retried with
     backoff; accepted: `sent`; refused for good: `failed`; SMTP unreachable: stays `pending` for the
     next run.
A pending loss (over, mismatch) whose window became complete before it could be sent is `resolved`, not sent.

Delivery is at least once between "the server accepted" and "the log says sent": a crash exactly
there resends that one email on the next run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from audit.alerts.drops import COLUMNS as DROP_COLUMNS
from audit.alerts.drops import DropRule, drop_alerts
from audit.alerts.mail import AlertDeliveryError, Mailer, compose
from audit.alerts.rules import (
    WINDOW_KINDS,
    Alert,
    lag_alerts,
    recovery_alerts,
    restatement_alerts,
    window_alerts,
    window_key,
)
from audit.contract.arrow import arrow_table
from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.naming import data_topic_rows
from audit.contract.tables import ALERTS
from audit.io.lake import Lake, before_commit, lake_of
from audit.io.lake_read import read_frame

if TYPE_CHECKING:
    from audit.settings import AlertSettings, Settings, SmtpSettings

log = logging.getLogger(__name__)
NO_RECIPIENTS = "no recipients: set alerts.default_recipients or a matching [[alerts.routes]]"


@dataclass(frozen=True)
class AlertJob:
    """What a run of the alerts reads and where it sends: the books' lake, the [alerts] rules and routes,
    the [smtp] server, and the books' window size, grace period and reference tier."""

    lake: Lake
    alerts: AlertSettings
    smtp: SmtpSettings
    window_minutes: int
    grace_s: float
    reference_tier: str
    audit_topic: str = DEFAULT_AUDIT_TOPIC

    @classmethod
    def of(cls, settings: Settings, lake: Lake | None = None) -> AlertJob:
        """The job `settings` configure, on `lake` when given (else `lake_of(settings)`)."""
        return cls(
            lake=lake or lake_of(settings),
            alerts=settings.alerts,
            smtp=settings.smtp,
            window_minutes=settings.window_minutes,
            grace_s=settings.grace_s,
            reference_tier=settings.reference_tier,
            audit_topic=settings.audit_topic,
        )


@dataclass
class AlertReport:
    """What one run did; `exit_code` is 0 unless alerts were left pending or failed."""

    new: int = 0
    sent: int = 0
    pending: int = 0
    failed: int = 0
    resolved: int = 0
    emails: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if not (self.pending or self.failed) else 3

    def summary(self) -> str:
        return (
            f"alerts: {self.new} new, {self.emails} email(s) sent carrying {self.sent} alert(s), "
            f"{self.pending} pending, {self.failed} failed, {self.resolved} resolved"
        )


@dataclass(frozen=True)
class BooksNow:
    """The tables an alert run judges, as they are at its start; completeness within the lookback."""

    completeness: pd.DataFrame
    tier_status: pd.DataFrame
    tier_counts: pd.DataFrame
    retention_gaps: pd.DataFrame
    restatements: pd.DataFrame
    alerts_log: pd.DataFrame


# -- the log ----------------------------------------------------------------------------------------


def read_log(lake: Lake) -> pd.DataFrame:
    """The alerts log: every alert decided on, with its delivery state."""
    return read_frame(lake, "alerts")


def _log_rows(alerts: Iterable[Alert], *, recipients_of: Callable[[str], Sequence[str]], now: datetime) -> list[dict]:
    rows = []
    for alert in alerts:
        values = asdict(alert)
        window = pd.Timestamp(alert.window_start)
        rows.append(
            {
                **values,
                "alert_id": alert.alert_id,
                "logical_topic": alert.logical_topic,
                "window_start": window,
                "recipients": ", ".join(recipients_of(alert.logical_topic)),
                "subject": None,
                "state": "pending",
                "attempts": 0,
                "last_error": None,
                "created_at": now,
                "sent_at": None,
                "date": window.date(),
            }
        )
    return rows


def upsert_log(lake: Lake, rows: pd.DataFrame | list[dict]) -> None:
    """Insert or update rows of the alerts log by alert_id (a Delta MERGE; creates the table if needed)."""
    from deltalake.exceptions import TableNotFoundError

    data = arrow_table(ALERTS, rows)
    if not data.num_rows:
        return
    try:
        target = lake.delta_table("alerts")
    except TableNotFoundError:
        lake.write("alerts", data, mode="append")
        return
    before_commit(lake.path("alerts"))
    (
        target.merge(data, predicate="t.alert_id = s.alert_id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _drops(job: AlertJob, tier_status: pd.DataFrame, *, now: datetime, since: datetime) -> list[Alert]:
    """Traffic-drop alerts of the windows since `since`, judged against the days of history before them."""
    config = job.alerts
    history = read_frame(
        job.lake,
        "completeness",
        since=(since - timedelta(days=config.drop_history_days)).date(),
        columns=DROP_COLUMNS,
    )
    return drop_alerts(
        history,
        tier_status,
        now=now,
        since=since,
        rule=DropRule(fraction=config.drop_fraction, history_days=config.drop_history_days),
        watched=config.drops_watched,
        window_minutes=job.window_minutes,
        grace_s=job.grace_s,
    )


def _alert_of(row) -> Alert:
    return Alert.of_row(row, kind=row.kind, status=row.status, cause=row.cause or "")


# -- one run ----------------------------------------------------------------------------------------


def run_alerts(
    job: AlertJob, *, now: datetime | None = None, sleep: Callable[[float], None] = time.sleep
) -> AlertReport:
    """Decide, record and send the alerts of the tables under `job.lake`; see the module doc."""
    now = now or datetime.now(UTC)
    books = read_books(job.lake, now=now, lookback_hours=job.alerts.lookback_hours)
    report = AlertReport()
    new_rows = record_new(job.lake, decide(job, books, now=now), books.alerts_log, job.alerts, now=now, report=report)
    pending = _pending(books.alerts_log, new_rows)
    if pending.empty:
        return report
    pending = resolve_recovered(job.lake, pending, books.completeness, report)
    mailer = Mailer(job.smtp, sleep=sleep)
    for (kind, recipients), group in pending.groupby(["kind", "recipients"], sort=True):
        send_group(job.lake, group, mailer, job.alerts, kind=kind, recipients=recipients, report=report)
    return report


def read_books(lake: Lake, *, now: datetime, lookback_hours: float) -> BooksNow:
    """The tables of `lake` a run judges: completeness, counts and restatements of the last `lookback_hours`."""
    since = (now - timedelta(hours=lookback_hours)).date()
    completeness = read_frame(lake, "completeness", since=since)
    if not completeness.empty:
        completeness = completeness[
            completeness["window_start"] >= pd.Timestamp(now) - pd.Timedelta(hours=lookback_hours)
        ]
    return BooksNow(
        completeness=completeness,
        tier_status=read_frame(lake, "tier_status"),
        tier_counts=read_frame(
            lake,
            "tier_counts",
            since=since,
            columns=["origin_cluster", "topic", "window_start", "tier", "send_failed", "by_partition"],
        ),
        retention_gaps=read_frame(lake, "retention_gaps"),
        restatements=read_frame(lake, "restatements", since=since),
        alerts_log=read_log(lake),
    )


def decide(job: AlertJob, books: BooksNow, *, now: datetime) -> list[Alert]:
    """Every alert the books call for now, known to the log or not: about data topics only, never the audit
    topic or a replicated copy of it (a lake written before the books kept it out may still hold its rows)."""
    config = job.alerts
    data = partial(data_topic_rows, audit_topic=job.audit_topic)
    books = replace(
        books,
        completeness=data(books.completeness),
        tier_status=data(books.tier_status),
        tier_counts=data(books.tier_counts),
        restatements=data(books.restatements),
    )
    return [
        *window_alerts(
            books.completeness,
            books.tier_status,
            books.tier_counts,
            now=now,
            lag_minutes=config.lag_minutes,
            retention_gaps=books.retention_gaps,
        ),
        *recovery_alerts(books.completeness, books.alerts_log),
        *restatement_alerts(books.restatements, books.alerts_log),
        *lag_alerts(
            books.tier_status,
            now=now,
            lag_minutes=config.lag_minutes,
            window_minutes=job.window_minutes,
            reference_tier=job.reference_tier,
        ),
        *_drops(job, books.tier_status, now=now, since=now - timedelta(hours=config.lookback_hours)),
    ]


def record_new(
    lake: Lake,
    candidates: Iterable[Alert],
    alerts_log: pd.DataFrame,
    config: AlertSettings,
    *,
    now: datetime,
    report: AlertReport,
) -> list[dict]:
    """Log the candidates the log does not hold yet, as pending (failed: nobody to send them to); their rows."""
    known = set(alerts_log["alert_id"]) if not alerts_log.empty else set()
    new = list({a.alert_id: a for a in candidates if a.alert_id not in known}.values())
    report.new = len(new)
    new_rows = _log_rows(new, recipients_of=config.recipients, now=now)
    for row in new_rows:
        if not row["recipients"]:
            row.update(state="failed", last_error=NO_RECIPIENTS)
    upsert_log(lake, new_rows)  # recorded before sending: nothing is lost if what follows fails
    for row in new_rows:
        log.info(
            "alert recorded",
            extra={
                "alert_id": row["alert_id"],
                "kind": row["kind"],
                "topic": row["logical_topic"],
                "tier": row["tier"],
                "window_start": str(row["window_start"]),
                "state": row["state"],
            },
        )
    report.failed += sum(row["state"] == "failed" for row in new_rows)
    return new_rows


def _pending(alerts_log: pd.DataFrame, new_rows: list[dict]) -> pd.DataFrame:
    """The alerts to send: those the log held pending, and the new ones recorded pending."""
    parts = [
        alerts_log[alerts_log["state"] == "pending"] if not alerts_log.empty else pd.DataFrame(),
        pd.DataFrame([r for r in new_rows if r["state"] == "pending"]),
    ]
    parts = [part for part in parts if not part.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def resolve_recovered(
    lake: Lake, pending: pd.DataFrame, completeness: pd.DataFrame, report: AlertReport
) -> pd.DataFrame:
    """Log as resolved the pending losses, overs and mismatches whose window is complete now; the rest of
    `pending`."""
    complete = completeness[completeness["status"] == "complete"] if not completeness.empty else completeness
    resolved_mask = pending["kind"].isin(WINDOW_KINDS) & (
        window_key(pending).isin(set(window_key(complete))) if not complete.empty else False
    )
    resolved = pending[resolved_mask]
    if not resolved.empty:
        upsert_log(lake, resolved.assign(state="resolved", last_error=None))
        report.resolved = len(resolved)
    return pending[~resolved_mask]


def send_group(
    lake: Lake,
    group: pd.DataFrame,
    mailer: Mailer,
    config: AlertSettings,
    *,
    kind: str,
    recipients: str,
    report: AlertReport,
) -> None:
    """Send the pending alerts of one kind and recipients as one email and log how it went."""
    alerts = [_alert_of(row) for row in group.itertuples(index=False)]
    message = compose(alerts, sender=config.sender, recipients=recipients.split(", "), ui_url=config.ui_url)
    attempts_before = group["attempts"].fillna(0).astype(int)
    try:
        attempts = mailer.send(message)
    except AlertDeliveryError as exc:
        state = "pending" if exc.transient else "failed"
        logged = group.assign(state=state, last_error=str(exc), subject=message["Subject"])
        upsert_log(lake, logged.assign(attempts=attempts_before + exc.attempts))
        report.errors.append(str(exc))
        if exc.transient:
            report.pending += len(group)
        else:
            report.failed += len(group)
        log.error(
            "alert email not delivered",
            extra={"kind": kind, "alerts": len(group), "error": str(exc), "state": state},
        )
        return
    sent_at = pd.Timestamp(datetime.now(UTC))
    logged = group.assign(state="sent", last_error=None, subject=message["Subject"], sent_at=sent_at)
    upsert_log(lake, logged.assign(attempts=attempts_before + attempts))
    report.sent += len(group)
    report.emails += 1
    log.info(
        "alert email sent",
        extra={"kind": kind, "alerts": len(group), "subject": message["Subject"], "recipients": recipients},
    )
