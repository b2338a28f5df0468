"""[smtp] and [alerts] with [[alerts.routes]]: how alert emails leave, and who gets which."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, PrivateAttr, StrictFloat, StrictInt, StrictStr, model_validator

from audit.settings.clusters import Secret
from audit.settings.errors import invalid, show
from audit.settings.fields import (
    EmailAddress,
    Port,
    Positive,
    PositiveSeconds,
    Regexes,
    SettingsModel,
    compiled,
    setting,
)
from audit.settings.ui import DEFAULT_UI_URL

SMTP_SECURITY = ("starttls", "ssl", "none")
DEFAULT_SMTP_HOST = "127.0.0.1"
DEFAULT_SMTP_PORT = 8025  # the demo's SMTP server on loopback; 587 (starttls) or 465 (ssl) for a real relay
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_DROP_FRACTION = 0.1
DEFAULT_DROP_HISTORY_DAYS = 7
MAX_DROP_HISTORY_DAYS = 28


def _smtp_host(host: str) -> str:
    if not host.strip():
        raise invalid(f"{host!r} is empty")
    return host


def _smtp_security(security: str) -> str:
    if security not in SMTP_SECURITY:
        raise invalid(f"{security!r} is not one of {', '.join(SMTP_SECURITY)}")
    return security


def _at_least_one(count: int) -> int:
    if count < 1:
        raise invalid(f"{count} must be at least 1")
    return count


def _fraction(value: float) -> float:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise invalid(f"{value:g} is not a fraction above 0 and at most 1 (0.1 is 10 %)")
    return value


def _history_days(days: int) -> int:
    if not 1 <= days <= MAX_DROP_HISTORY_DAYS:
        raise invalid(f"{days} is not a number of days from 1 to {MAX_DROP_HISTORY_DAYS}")
    return days


def _seconds_or_zero(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise invalid(f"{value:g} must be a finite number of seconds >= 0")
    return value


class SmtpSettings(SettingsModel):
    """How alert emails leave: an SMTP server, its TLS mode and login. The password prints as ****."""

    key_prefix = "smtp."

    host: Annotated[StrictStr, AfterValidator(_smtp_host)] = setting("SMTP server host name", DEFAULT_SMTP_HOST)
    port: Port = setting(
        "SMTP server port: 587 for starttls, 465 for ssl, 25 or the demo's 8025 for none", DEFAULT_SMTP_PORT
    )
    security: Annotated[StrictStr, AfterValidator(_smtp_security)] = setting(
        "starttls (upgrade a plain connection), ssl (TLS from the start) or none (loopback only when a password "
        "is set)",
        "none",
    )
    user: StrictStr = setting("login name; empty: no login", "")
    password: Secret = setting(
        "login password, never logged or printed; or KAUDIT_SMTP_PASSWORD", factory=lambda: Secret(""), shown='""'
    )
    timeout_s: PositiveSeconds = setting("seconds to wait for the SMTP server on each step", 10.0)
    retries: Annotated[StrictInt, AfterValidator(_at_least_one)] = setting(
        "attempts per run before an email is left pending for the next run", 3
    )
    backoff_s: Annotated[StrictFloat, AfterValidator(_seconds_or_zero)] = setting(
        "seconds before the second attempt; doubled before each further one", 1.0
    )

    @model_validator(mode="after")
    def _login(self) -> SmtpSettings:
        if self.password.reveal() and not self.user:
            raise invalid("'' is empty but a password is set", "user")
        if self.password.reveal() and self.security == "none" and self.host not in LOOPBACK_HOSTS:
            raise invalid(
                f"'none' would send the password in clear text to {self.host}; use starttls or ssl", "security"
            )
        return self


class AlertRoute(SettingsModel):
    """Who hears about a topic: the first route whose regex matches `<origin_cluster>.<topic>` wins."""

    key_prefix = "alerts.routes[]."

    pattern: StrictStr = setting("regex searched in the logical topic name (`dc1.orders`); anchor with ^...$")
    recipients: tuple[EmailAddress, ...] = setting("email addresses for the matching topics")

    _regex: re.Pattern[str] = PrivateAttr()

    @model_validator(mode="after")
    def _compile(self) -> AlertRoute:
        self._regex = compiled(("pattern",), self.pattern)
        if not self.recipients:
            raise invalid("[] is empty", "recipients")
        return self

    def matches(self, logical_topic: str) -> bool:
        return self._regex.search(logical_topic) is not None


def _http_url(url: str) -> str:
    if not re.match(r"^https?://[^\s/]+", url):
        raise invalid(f"{show(url)} is not an http(s) URL")
    return url


class AlertSettings(SettingsModel):
    """When `kaudit alert` emails, from whom, to whom, and where its links point."""

    key_prefix = "alerts."

    sender: EmailAddress = setting("From: address of alert emails", "kaudit@localhost")
    default_recipients: tuple[EmailAddress, ...] = setting(
        "recipients of topics no route matches; empty: those alerts are logged in the alerts table and not emailed", ()
    )
    routes: tuple[AlertRoute, ...] = setting(
        "[[alerts.routes]] tables {pattern, recipients}; first match wins",
        (),
        shown="[] (everything to default_recipients)",
    )
    ui_url: Annotated[StrictStr, AfterValidator(_http_url)] = setting(
        "base URL of the audit UI, for the links in emails", DEFAULT_UI_URL
    )
    lag_minutes: Positive = setting("a lag alert fires when a tier's watermark is this many minutes behind now", 30.0)
    lookback_hours: Positive = setting("how far back (by window start) final windows are checked", 48.0)
    drop_fraction: Annotated[StrictFloat, AfterValidator(_fraction)] = setting(
        "a final window whose reference count is below this fraction of the median of the same time of day over "
        "the previous drop_history_days days is a drop alert (0.1: below 10 %)",
        DEFAULT_DROP_FRACTION,
    )
    drop_history_days: Annotated[StrictInt, AfterValidator(_history_days)] = setting(
        f"days of history the median of a drop alert is taken over (1 to {MAX_DROP_HISTORY_DAYS})",
        DEFAULT_DROP_HISTORY_DAYS,
    )
    drop_exclude: Regexes = setting(
        "regexes searched in the logical topic name (`dc1.orders`): matching topics get no drop alerts; "
        '[".*"] turns them off',
        (),
    )

    _drop_exclude: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _compile_drop_exclude(self) -> AlertSettings:
        self._drop_exclude = tuple(map(re.compile, self.drop_exclude))
        return self

    def drops_watched(self, logical_topic: str) -> bool:
        """Whether traffic drops of `logical_topic` are alerted on: no drop_exclude regex matches it."""
        return not any(pattern.search(logical_topic) for pattern in self._drop_exclude)

    def recipients(self, logical_topic: str) -> tuple[str, ...]:
        """The recipients of alerts about `logical_topic`: the first matching route's, else the default."""
        for route in self.routes:
            if route.matches(logical_topic):
                return route.recipients
        return self.default_recipients
