"""Email alerts: a final window below its threshold or over, its recovery, a tier falling behind.

One run (`run_alerts`, `kaudit alert`, or the reconciliation's continuous mode after each pass):
  1. read completeness, tier_status and tier_counts (deltalake, no JVM) and the `alerts` log;
  2. decide the alerts (pure functions below): loss/over for windows FINAL for the tier, recovery for
     a window alerted on that is now complete, lag for a tier whose watermark is too old;
  3. record every new alert as `pending` in the log BEFORE sending (so a crash or an SMTP outage loses
     nothing), keyed by a deterministic id so a rerun finds it and never records it twice;
  4. send one email per (kind, recipients) holding all its pending alerts, retried with backoff;
     accepted: `sent`; refused for good: `failed`; SMTP unreachable: stays `pending` for the next run.
A pending loss whose window became complete before it could be sent is `resolved`, not sent.

Delivery is at least once between "the server accepted" and "the log says sent": a crash exactly
there resends that one email on the next run.
"""

from __future__ import annotations

import hashlib
import html
import logging
import smtplib
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pandas as pd

from audit.contract.errors import KafkaAuditError
from audit.contract.names import LAKE_TIER
from audit.contract.tables import ALERTS, arrow_table, table_path
from audit.io.lake_read import read_frame

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)

KINDS = ("loss", "over", "recovery", "lag")
ALERTING_STATUS = {"incomplete": "loss", "over": "over"}
KIND_TITLES = {"loss": "LOSS", "over": "DUPLICATES", "recovery": "RECOVERED", "lag": "LAG"}
WINDOW_FORMAT = "%Y-%m-%d %H:%M UTC"


class AlertDeliveryError(KafkaAuditError):
    """The SMTP server could not be reached or refused an email; the alerts stay pending."""


@dataclass(frozen=True)
class Alert:
    """One row of the alerts log before delivery: what is wrong, where, and the likely cause."""

    kind: str
    origin_cluster: str
    topic: str
    window_start: datetime
    tier: str
    status: str
    expected: int | None = None
    observed: int | None = None
    missing: int | None = None
    duplicated: int | None = None
    completeness_pct: float | None = None
    cause: str = ""

    @property
    def logical_topic(self) -> str:
        return f"{self.origin_cluster}.{self.topic}"

    @property
    def alert_id(self) -> str:
        return alert_id(self.kind, self.origin_cluster, self.topic, self.window_start, self.tier, self.status)


def alert_id(kind: str, origin_cluster: str, topic: str, window_start: datetime, tier: str, status: str) -> str:
    """Deterministic id of an alert: the same window, tier, kind and status always give the same id."""
    moment = (
        pd.Timestamp(window_start).tz_convert("UTC")
        if pd.Timestamp(window_start).tzinfo
        else pd.Timestamp(window_start).tz_localize("UTC")
    )
    text = "|".join((kind, origin_cluster, topic, moment.strftime("%Y-%m-%dT%H:%M:%SZ"), tier, status))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


# -- deciding (pure) ------------------------------------------------------------------------------


def _key(frame: pd.DataFrame) -> pd.Series:
    return (
        frame["origin_cluster"] + "|" + frame["topic"] + "|" + frame["window_start"].astype(str) + "|" + frame["tier"]
    )


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _float(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def window_alerts(
    completeness: pd.DataFrame,
    tier_status: pd.DataFrame,
    tier_counts: pd.DataFrame,
    *,
    now: datetime,
    lag_minutes: float,
) -> list[Alert]:
    """Loss and over alerts: rows FINAL for their tier whose status is incomplete or over."""
    if completeness.empty:
        return []
    rows = completeness[
        completeness["final"].fillna(False).astype(bool) & completeness["status"].isin(list(ALERTING_STATUS))
    ]
    return [
        Alert(
            kind=ALERTING_STATUS[row.status],
            origin_cluster=row.origin_cluster,
            topic=row.topic,
            window_start=row.window_start,
            tier=row.tier,
            status=row.status,
            expected=_int(row.expected),
            observed=_int(row.observed),
            missing=_int(row.missing),
            duplicated=_int(row.duplicated),
            completeness_pct=_float(row.completeness_pct),
            cause=likely_cause(row, completeness, tier_status, tier_counts, now=now, lag_minutes=lag_minutes),
        )
        for row in rows.itertuples(index=False)
    ]


def recovery_alerts(completeness: pd.DataFrame, log_frame: pd.DataFrame) -> list[Alert]:
    """A recovery for every window and tier with a SENT loss or over alert that is now complete."""
    if completeness.empty or log_frame.empty:
        return []
    alerted = log_frame[log_frame["kind"].isin(["loss", "over"]) & (log_frame["state"] == "sent")]
    complete = completeness[completeness["status"] == "complete"]
    if alerted.empty or complete.empty:
        return []
    recovered = complete[_key(complete).isin(set(_key(alerted)))]
    return [
        Alert(
            kind="recovery",
            origin_cluster=row.origin_cluster,
            topic=row.topic,
            window_start=row.window_start,
            tier=row.tier,
            status="complete",
            expected=_int(row.expected),
            observed=_int(row.observed),
            missing=_int(row.missing),
            duplicated=_int(row.duplicated),
            completeness_pct=_float(row.completeness_pct),
            cause="the window is complete now",
        )
        for row in recovered.itertuples(index=False)
    ]


def lag_alerts(
    tier_status: pd.DataFrame, *, now: datetime, lag_minutes: float, window_minutes: int, reference_tier: str
) -> list[Alert]:
    """A lag alert per tier and topic whose watermark is more than `lag_minutes` behind `now`.

    Its window is the one holding the watermark, so a tier stuck at one point alerts once, and once
    more for each further window it crawls into while still behind.
    """
    if tier_status.empty:
        return []
    limit = pd.Timestamp(now) - pd.Timedelta(minutes=lag_minutes)
    behind = tier_status[
        (tier_status["tier"] != reference_tier) & tier_status["watermark"].notna() & (tier_status["watermark"] < limit)
    ]
    size = pd.Timedelta(minutes=window_minutes)
    alerts = []
    for row in behind.itertuples(index=False):
        minutes = (pd.Timestamp(now) - row.watermark) / pd.Timedelta(minutes=1)
        if row.watermark.year == 1970:  # the epoch: a reporter with lag that has not delivered anything yet
            parts = [f"{row.tier} has received nothing yet of what is waiting for it"]
        else:
            parts = [f"{row.tier} is {minutes:.0f} min behind (watermark {row.watermark.strftime(WINDOW_FORMAT)})"]
        if _int(row.lag):
            parts.append(f"lag {int(row.lag):,} messages")
        if bool(row.stalled):
            parts.append(f"stalled replicator ({row.reporters})")
        elif row.reporters:
            parts.append(f"reported by {row.reporters}")
        alerts.append(
            Alert(
                kind="lag",
                origin_cluster=row.origin_cluster,
                topic=row.topic,
                window_start=row.watermark.floor(size),
                tier=row.tier,
                status="lagging",
                missing=_int(row.lag),
                cause="; ".join(parts),
            )
        )
    return alerts


def likely_cause(
    row,
    completeness: pd.DataFrame,
    tier_status: pd.DataFrame,
    tier_counts: pd.DataFrame,
    *,
    now: datetime,
    lag_minutes: float,
) -> str:
    """The evidence for one incomplete or over window, as a sentence: where it went wrong and why it may have."""
    causes = []
    same = completeness[
        (completeness["origin_cluster"] == row.origin_cluster)
        & (completeness["topic"] == row.topic)
        & (completeness["window_start"] == row.window_start)
    ].sort_values("tier_order")
    upstream = same[same["tier_order"] < row.tier_order]
    first_bad = row.tier
    previous = row.reference_tier
    for other in upstream.itertuples(index=False):
        if (row.status == "incomplete" and _int(other.missing)) or (row.status == "over" and _int(other.duplicated)):
            first_bad = other.tier
            break
        previous = other.tier
    hop = f"{previous} -> {first_bad}"
    if row.status == "incomplete":
        what = (
            "the lake job"
            if first_bad == LAKE_TIER
            else (
                "the counter"
                if previous == row.reference_tier and first_bad == row.origin_cluster
                else "the replicator"
            )
        )
        causes.append(
            f"lost between {hop} ({what}): {previous} counted {_int(row.expected) or 0:,}, {first_bad} is short"
        )
    else:
        causes.append(
            f"duplicated between {hop}: an at-least-once hop delivered some messages twice "
            "(a replicator or lake job restart)"
        )
    status = tier_status[(tier_status["origin_cluster"] == row.origin_cluster) & (tier_status["topic"] == row.topic)]
    for tier in dict.fromkeys((first_bad, row.tier)):
        for info in status[status["tier"] == tier].itertuples(index=False):
            if bool(info.stalled):
                causes.append(f"a replicator into {tier} is stalled ({info.reporters})")
            elif _int(info.lag):
                causes.append(f"{tier} has a lag of {int(info.lag):,} messages")
            if (
                tier == LAKE_TIER
                and pd.notna(info.watermark)
                and info.watermark < pd.Timestamp(now) - pd.Timedelta(minutes=lag_minutes)
            ):
                causes.append("the lake job is behind")
    if not tier_counts.empty:
        failed = (
            tier_counts[
                (tier_counts["origin_cluster"] == row.origin_cluster)
                & (tier_counts["topic"] == row.topic)
                & (tier_counts["window_start"] == row.window_start)
                & (tier_counts["tier"] == row.reference_tier)
            ]["send_failed"]
            .fillna(0)
            .sum()
        )
        if failed:
            causes.append(f"the producers failed to send {int(failed):,} message(s) in this window")
    return "; ".join(causes)


# -- composing ------------------------------------------------------------------------------------


def deep_link(ui_url: str, alert: Alert) -> str:
    """The UI's topic page opened on the alert's topic, window and tier."""
    moment = pd.Timestamp(alert.window_start).tz_convert("UTC").strftime("%Y-%m-%dT%H:%MZ")
    query = urlencode({"topic": alert.logical_topic, "window": moment, "tier": alert.tier})
    return f"{ui_url.rstrip('/')}/topic?{query}"


def _worst(alerts: Sequence[Alert]) -> Alert:
    if alerts[0].kind == "loss":
        return min(alerts, key=lambda a: a.completeness_pct if a.completeness_pct is not None else 100.0)
    if alerts[0].kind == "over":
        return max(alerts, key=lambda a: a.completeness_pct or 0.0)
    return alerts[0]


def subject(alerts: Sequence[Alert]) -> str:
    """`[kaudit] LOSS dc1.orders at aggregate: 96.00% in 2025-03-04 10:40 UTC (+2 more)`."""
    worst = _worst(alerts)
    where = f"{worst.logical_topic} at {worst.tier}"
    if worst.kind == "lag":
        text = f"{where}: {worst.cause.split(';')[0]}"
    else:
        pct = f"{worst.completeness_pct:.2f}%" if worst.completeness_pct is not None else "n/a"
        text = f"{where}: {pct} in {pd.Timestamp(worst.window_start).strftime(WINDOW_FORMAT)}"
    more = f" (+{len(alerts) - 1} more)" if len(alerts) > 1 else ""
    return f"[kaudit] {KIND_TITLES[worst.kind]} {text}{more}"


def _rows(alerts: Sequence[Alert]) -> list[list[str]]:
    def number(value) -> str:
        return "" if value is None else f"{value:,}"

    return [
        [
            a.logical_topic,
            a.tier,
            pd.Timestamp(a.window_start).strftime(WINDOW_FORMAT),
            number(a.expected),
            number(a.observed),
            number(a.missing),
            number(a.duplicated),
            "" if a.completeness_pct is None else f"{a.completeness_pct:.2f}%",
            a.cause,
        ]
        for a in sorted(alerts, key=lambda a: (a.logical_topic, a.tier, a.window_start))
    ]


HEADER = ["topic", "tier", "window", "expected", "observed", "missing", "duplicated", "completeness", "likely cause"]
INTROS = {
    "loss": "These windows are final (the tier has seen everything up to their end plus the grace period) "
    "and below their completeness threshold:",
    "over": "These windows are final and hold more messages than the reference tier (duplicates):",
    "recovery": "These windows, alerted on before, are complete now:",
    "lag": "These tiers are behind (their windows are not final yet, so no loss is reported for them):",
}


def compose(alerts: Sequence[Alert], *, sender: str, recipients: Sequence[str], ui_url: str) -> EmailMessage:
    """One email (text and HTML) for alerts of one kind: a table of the windows, links into the UI."""
    kind = alerts[0].kind
    message = EmailMessage()
    message["Subject"] = subject(alerts)
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.split("@")[-1])
    message["X-Kaudit-Alert-Ids"] = ",".join(a.alert_id for a in alerts)
    rows = _rows(alerts)
    ordered = sorted(alerts, key=lambda a: (a.logical_topic, a.tier, a.window_start))
    links = [deep_link(ui_url, a) for a in ordered]
    text = [INTROS[kind], ""]
    for row, link in zip(rows, links):
        text.append(" | ".join(f"{name}: {value}" for name, value in zip(HEADER, row) if value))
        text.append(f"  {link}")
    text += ["", f"Audit UI: {ui_url}"]
    message.set_content("\n".join(text) + "\n")
    cells = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(value)}</td>" for value in row)
        + f'<td><a href="{html.escape(link)}">open</a></td></tr>'
        for row, link in zip(rows, links)
    )
    head = "".join(f"<th>{html.escape(name)}</th>" for name in HEADER + ["UI"])
    message.add_alternative(
        f"<html><body><p>{html.escape(INTROS[kind])}</p>"
        f'<table border="1" cellpadding="4" cellspacing="0"><tr>{head}</tr>{cells}</table>'
        f'<p><a href="{html.escape(ui_url)}">Audit UI</a></p></body></html>',
        subtype="html",
    )
    return message


# -- sending --------------------------------------------------------------------------------------


class Mailer:
    """Sends through the configured SMTP server; the password is revealed to smtplib only."""

    def __init__(self, smtp, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.smtp = smtp
        self.sleep = sleep

    def _connect(self) -> smtplib.SMTP:
        s = self.smtp
        if s.security == "ssl":
            client = smtplib.SMTP_SSL(s.host, s.port, timeout=s.timeout_s, context=ssl.create_default_context())
        else:
            client = smtplib.SMTP(s.host, s.port, timeout=s.timeout_s)
            if s.security == "starttls":
                client.starttls(context=ssl.create_default_context())
        if s.user:
            client.login(s.user, s.password.reveal())
        return client

    def send(self, message: EmailMessage) -> int:
        """Deliver `message`; returns the attempts made. Refused recipients raise at once (permanent)."""
        attempts = 0
        for attempt in range(self.smtp.retries):
            attempts += 1
            try:
                with self._connect() as client:
                    client.send_message(message)
                return attempts
            except smtplib.SMTPRecipientsRefused as exc:
                raise AlertDeliveryError(f"recipients refused: {', '.join(exc.recipients)}") from None
            except (OSError, smtplib.SMTPException) as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "SMTP attempt failed",
                    extra={"host": self.smtp.host, "port": self.smtp.port, "attempt": attempt + 1, "error": error},
                )
                if attempt + 1 < self.smtp.retries:
                    self.sleep(self.smtp.backoff_s * 2**attempt)
        exc = AlertDeliveryError(
            f"SMTP {self.smtp.host}:{self.smtp.port} unreachable after {attempts} attempt(s): {error}"
        )
        exc.attempts = attempts  # type: ignore[attr-defined]
        exc.transient = True  # type: ignore[attr-defined]
        raise exc


# -- the log ----------------------------------------------------------------------------------------


def read_log(lake_root: str) -> pd.DataFrame:
    return read_frame(lake_root, "alerts")


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


def upsert_log(lake_root: str, rows: pd.DataFrame | list[dict]) -> None:
    """Insert or update rows of the alerts log by alert_id (a Delta MERGE; creates the table if needed)."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    data = arrow_table(ALERTS, rows)
    if not data.num_rows:
        return
    path = table_path(lake_root, "alerts")
    try:
        target = DeltaTable(path)
    except TableNotFoundError:
        write_deltalake(path, data, mode="append")
        return
    (
        target.merge(data, predicate="t.alert_id = s.alert_id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _alert_of(row) -> Alert:
    return Alert(
        kind=row.kind,
        origin_cluster=row.origin_cluster,
        topic=row.topic,
        window_start=row.window_start,
        tier=row.tier,
        status=row.status,
        expected=_int(row.expected),
        observed=_int(row.observed),
        missing=_int(row.missing),
        duplicated=_int(row.duplicated),
        completeness_pct=_float(row.completeness_pct),
        cause=row.cause or "",
    )


# -- one run ----------------------------------------------------------------------------------------


def run_alerts(
    settings: Settings, *, now: datetime | None = None, sleep: Callable[[float], None] = time.sleep
) -> AlertReport:
    """Decide, record and send the alerts of the tables under `settings.lake_root`; see the module doc."""
    now = now or datetime.now(UTC)
    lake = settings.lake_root
    config = settings.alerts
    since = (now - timedelta(hours=config.lookback_hours)).date()
    completeness = read_frame(lake, "completeness", since=since)
    if not completeness.empty:
        completeness = completeness[
            completeness["window_start"] >= pd.Timestamp(now) - pd.Timedelta(hours=config.lookback_hours)
        ]
    tier_status = read_frame(lake, "tier_status")
    tier_counts = read_frame(
        lake, "tier_counts", since=since, columns=["origin_cluster", "topic", "window_start", "tier", "send_failed"]
    )
    log_frame = read_log(lake)
    report = AlertReport()

    candidates = [
        *window_alerts(completeness, tier_status, tier_counts, now=now, lag_minutes=config.lag_minutes),
        *recovery_alerts(completeness, log_frame),
        *lag_alerts(
            tier_status,
            now=now,
            lag_minutes=config.lag_minutes,
            window_minutes=settings.window_minutes,
            reference_tier=settings.reference_tier,
        ),
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
        _key(pending).isin(set(_key(complete))) if not complete.empty else False
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
