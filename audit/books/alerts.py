"""Email alerts: a final window below its threshold or over, its recovery, a tier falling behind, a drop.

One run (`run_alerts`, `kaudit alert`, or the reconciliation's continuous mode after each pass):
  1. read completeness, tier_status and tier_counts (deltalake, no JVM) and the `alerts` log;
  2. decide the alerts (pure functions below): loss/over for windows FINAL for the tier, recovery for
     a window alerted on that is now complete, lag for a tier whose watermark is too old, drop for a final
     window whose reference count fell far below that time of day's usual (traffic_drops.py), restated
     for a window that flips between complete and incomplete again after its alert (`restatements`);
  3. record every new alert as `pending` in the log BEFORE sending (so a crash or an SMTP outage loses
     nothing), keyed by a deterministic id so a rerun finds it and never records it twice;
  4. send one email per (kind, recipients) holding all its pending alerts, retried with backoff;
     accepted: `sent`; refused for good: `failed`; SMTP unreachable: stays `pending` for the next run.
A pending loss whose window became complete before it could be sent is `resolved`, not sent.

Delivery is at least once between "the server accepted" and "the log says sent": a crash exactly
there resends that one email on the next run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pandas as pd

from audit.contract.tables import ALERTS, arrow_table
from audit.io.lake_read import read_frame

if TYPE_CHECKING:
    from audit.settings import Settings


from audit.books.alert_mail import AlertDeliveryError, Mailer, compose, deep_link, subject
from audit.books.alert_rules import (
    Alert,
    alert_id,
    lag_alerts,
    recovery_alerts,
    restatement_alerts,
    window_alerts,
    window_key,
)
from audit.books.traffic_drops import COLUMNS as DROP_COLUMNS
from audit.books.traffic_drops import DropRule, drop_alerts
from audit.io.lake import Lake, lake_of

# The alerts' public surface: the run and its log here, the rules and the emails re-exported.
__all__ = [
    "Alert",
    "AlertDeliveryError",
    "AlertReport",
    "Mailer",
    "alert_id",
    "compose",
    "deep_link",
    "drop_alerts",
    "lag_alerts",
    "read_log",
    "recovery_alerts",
    "restatement_alerts",
    "run_alerts",
    "subject",
    "upsert_log",
    "window_alerts",
]

log = logging.getLogger(__name__)


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


# -- the log ----------------------------------------------------------------------------------------


def read_log(lake: Lake | str) -> pd.DataFrame:
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


def upsert_log(lake: Lake | str, rows: pd.DataFrame | list[dict]) -> None:
    """Insert or update rows of the alerts log by alert_id (a Delta MERGE; creates the table if needed)."""
    from deltalake.exceptions import TableNotFoundError

    data = arrow_table(ALERTS, rows)
    if not data.num_rows:
        return
    lake = Lake.of(lake)
    try:
        target = lake.delta_table("alerts")
    except TableNotFoundError:
        lake.write("alerts", data, mode="append")
        return
    (
        target.merge(data, predicate="t.alert_id = s.alert_id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _drops(settings: Settings, tier_status: pd.DataFrame, *, now: datetime, since: datetime) -> list[Alert]:
    """Traffic-drop alerts of the windows since `since`, judged against the days of history before them."""
    config = settings.alerts
    history = read_frame(
        lake_of(settings),
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
        window_minutes=settings.window_minutes,
        grace_s=settings.grace_s,
    )


def _alert_of(row) -> Alert:
    return Alert.of_row(row, kind=row.kind, status=row.status, cause=row.cause or "")


# -- one run ----------------------------------------------------------------------------------------


def run_alerts(
    settings: Settings, *, now: datetime | None = None, sleep: Callable[[float], None] = time.sleep
) -> AlertReport:
    """Decide, record and send the alerts of the tables under `lake_of(settings)`; see the module doc."""
    now = now or datetime.now(UTC)
    lake = lake_of(settings)
    config = settings.alerts
    since = (now - timedelta(hours=config.lookback_hours)).date()
    completeness = read_frame(lake, "completeness", since=since)
    if not completeness.empty:
        completeness = completeness[
            completeness["window_start"] >= pd.Timestamp(now) - pd.Timedelta(hours=config.lookback_hours)
        ]
    tier_status = read_frame(lake, "tier_status")
    tier_counts = read_frame(
        lake,
        "tier_counts",
        since=since,
        columns=["origin_cluster", "topic", "window_start", "tier", "send_failed", "by_partition"],
    )
    retention_gaps = read_frame(lake, "retention_gaps")
    log_frame = read_log(lake)
    report = AlertReport()

    candidates = [
        *window_alerts(
            completeness,
            tier_status,
            tier_counts,
            now=now,
            lag_minutes=config.lag_minutes,
            retention_gaps=retention_gaps,
        ),
        *recovery_alerts(completeness, log_frame),
        *restatement_alerts(read_frame(lake, "restatements", since=since), log_frame),
        *lag_alerts(
            tier_status,
            now=now,
            lag_minutes=config.lag_minutes,
            window_minutes=settings.window_minutes,
            reference_tier=settings.reference_tier,
        ),
        *_drops(settings, tier_status, now=now, since=now - timedelta(hours=config.lookback_hours)),
    ]
    known = set(log_frame["alert_id"]) if not log_frame.empty else set()
    new = list({a.alert_id: a for a in candidates if a.alert_id not in known}.values())
    report.new = len(new)
    new_rows = _log_rows(new, recipients_of=config.recipients, now=now)
    for row in new_rows:
        if not row["recipients"]:
            row.update(
                state="failed",
                last_error="no recipients: set alerts.default_recipients or a matching [[alerts.routes]]",
            )
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

    parts = [
        log_frame[log_frame["state"] == "pending"] if not log_frame.empty else pd.DataFrame(),
        pd.DataFrame([r for r in new_rows if r["state"] == "pending"]),
    ]
    parts = [part for part in parts if not part.empty]
    if not parts:
        return report
    pending = pd.concat(parts, ignore_index=True)
    # A loss or over that recovered before it could be sent is resolved, not sent.
    complete = completeness[completeness["status"] == "complete"] if not completeness.empty else completeness
    resolved_mask = pending["kind"].isin(["loss", "over"]) & (
        window_key(pending).isin(set(window_key(complete))) if not complete.empty else False
    )
    resolved = pending[resolved_mask]
    if not resolved.empty:
        upsert_log(lake, resolved.assign(state="resolved", last_error=None))
        report.resolved = len(resolved)
    pending = pending[~resolved_mask]

    for (kind, recipients), group in pending.groupby(["kind", "recipients"], sort=True):
        alerts = [_alert_of(row) for row in group.itertuples(index=False)]
        message = compose(alerts, sender=config.sender, recipients=recipients.split(", "), ui_url=config.ui_url)
        attempts_before = group["attempts"].fillna(0).astype(int)
        try:
            attempts = Mailer(settings.smtp, sleep=sleep).send(message)
        except AlertDeliveryError as exc:
            transient = getattr(exc, "transient", False)
            attempts = getattr(exc, "attempts", 1)
            upsert_log(
                lake,
                group.assign(
                    state="pending" if transient else "failed",
                    attempts=attempts_before + attempts,
                    last_error=str(exc),
                    subject=message["Subject"],
                ),
            )
            report.errors.append(str(exc))
            if transient:
                report.pending += len(group)
            else:
                report.failed += len(group)
            log.error(
                "alert email not delivered",
                extra={
                    "kind": kind,
                    "alerts": len(group),
                    "error": str(exc),
                    "state": "pending" if transient else "failed",
                },
            )
            continue
        upsert_log(
            lake,
            group.assign(
                state="sent",
                attempts=attempts_before + attempts,
                last_error=None,
                subject=message["Subject"],
                sent_at=pd.Timestamp(datetime.now(UTC)),
            ),
        )
        report.sent += len(group)
        report.emails += 1
        log.info(
            "alert email sent",
            extra={"kind": kind, "alerts": len(group), "subject": message["Subject"], "recipients": recipients},
        )
    return report
