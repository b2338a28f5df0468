"""Alert emails: one per (kind, recipients), plain text and HTML, with a deep link into the UI; and the
SMTP delivery with retries."""

from __future__ import annotations

import html
import logging
import smtplib
import ssl
import time
from collections.abc import Callable, Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pandas as pd

from audit.alerts.rules import KIND_TITLES, WINDOW_FORMAT, Alert
from audit.contract.errors import KafkaAuditError

if TYPE_CHECKING:
    from audit.settings import SmtpSettings

log = logging.getLogger(__name__)


class AlertDeliveryError(KafkaAuditError):
    """The SMTP server could not be reached (`transient`: the alerts stay pending) or refused an email."""

    def __init__(self, message: str, *, attempts: int = 1, transient: bool = False) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.transient = transient


# -- composing ------------------------------------------------------------------------------------


def deep_link(ui_url: str, alert: Alert) -> str:
    """The UI's topic page opened on the alert's topic, window and tier."""
    moment = pd.Timestamp(alert.window_start).tz_convert("UTC").strftime("%Y-%m-%dT%H:%MZ")
    query = urlencode({"topic": alert.logical_topic, "window": moment, "tier": alert.tier})
    return f"{ui_url.rstrip('/')}/topic?{query}"


def _worst(alerts: Sequence[Alert]) -> Alert:
    if alerts[0].kind in ("loss", "drop"):
        return min(alerts, key=lambda a: a.completeness_pct if a.completeness_pct is not None else 100.0)
    if alerts[0].kind == "over":
        return max(alerts, key=lambda a: a.completeness_pct or 0.0)
    return alerts[0]


def subject(alerts: Sequence[Alert]) -> str:
    """`[kaudit] <KIND> <logical topic> at <tier>: <completeness> in <window> (+<n> more)`, for the worst of
    `alerts`; a lag says how far behind, a mismatch `counts balance, content differs` in place of its 100 %."""
    worst = _worst(alerts)
    where = f"{worst.logical_topic} at {worst.tier}"
    if worst.kind == "lag":  # a lag alert is about a tier, not one window
        return f"[kaudit] {KIND_TITLES[worst.kind]} {where}: {worst.cause.split(';')[0]}{_more(alerts)}"
    window = pd.Timestamp(worst.window_start).strftime(WINDOW_FORMAT)
    if worst.kind == "mismatch":  # 100 % counted: the partitions are named in the email
        text = f"{where}: counts balance, content differs in {window}"
    else:
        pct = f"{worst.completeness_pct:.2f}%" if worst.completeness_pct is not None else "n/a"
        if worst.kind == "drop":
            pct += " of the usual traffic"
        text = f"{where}: {pct} in {window}"
    return f"[kaudit] {KIND_TITLES[worst.kind]} {text}{_more(alerts)}"


def _more(alerts: Sequence[Alert]) -> str:
    return f" (+{len(alerts) - 1} more)" if len(alerts) > 1 else ""


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
    "mismatch": "These windows are final and their counts balance, but the content digest of the partitions named "
    "differs from the reference tier's: a message changed on the way, or a loss hidden by a duplicate:",
    "recovery": "These windows, alerted on before, are complete now:",
    "lag": "These tiers are behind (their windows are not final yet, so no loss is reported for them):",
    "restated": "These windows, alerted on before, changed again after they were final (late counts, a replay "
    "or a recount):",
    "drop": "These final windows hold far fewer messages than the same time of day usually does: traffic "
    "dropped before the first counting point, which completeness cannot show (100 % of nothing is 100 %). "
    "expected is the median of the same time of day over the previous days, observed the window's count:",
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

    def __init__(self, smtp: SmtpSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.smtp = smtp
        self.sleep = sleep

    def _connect(self) -> smtplib.SMTP:
        s = self.smtp
        client: smtplib.SMTP
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
        attempts, error = 0, "no attempt made"
        for attempt in range(self.smtp.retries):
            attempts += 1
            try:
                with self._connect() as client:
                    client.send_message(message)
                return attempts
            except smtplib.SMTPRecipientsRefused as exc:
                refused = ", ".join(map(str, exc.recipients))
                raise AlertDeliveryError(f"recipients refused: {refused}", attempts=attempts) from None
            except (OSError, smtplib.SMTPException) as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "SMTP attempt failed",
                    extra={"host": self.smtp.host, "port": self.smtp.port, "attempt": attempt + 1, "error": error},
                )
                if attempt + 1 < self.smtp.retries:
                    self.sleep(self.smtp.backoff_s * 2**attempt)
        raise AlertDeliveryError(
            f"SMTP {self.smtp.host}:{self.smtp.port} unreachable after {attempts} attempt(s): {error}",
            attempts=attempts,
            transient=True,
        )
