"""[ui]: where `kaudit ui` listens, how often it rereads the tables, and its optional login."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, StrictInt, StrictStr, model_validator

from audit.settings.clusters import Secret
from audit.settings.errors import invalid
from audit.settings.fields import Port, PositiveSeconds, SettingsModel, setting

DEFAULT_UI_HOST = "127.0.0.1"
DEFAULT_UI_PORT = 8050
DEFAULT_UI_URL = f"http://{DEFAULT_UI_HOST}:{DEFAULT_UI_PORT}"
MAX_UI_DAYS = 366


def _ui_host(host: str) -> str:
    if not host.strip():
        raise invalid(f"{host!r} is empty (use 127.0.0.1, or 0.0.0.0 to expose)")
    return host


def _days(days: int) -> int:
    if not 0 < days <= MAX_UI_DAYS:
        raise invalid(f"{days} is not between 1 and {MAX_UI_DAYS}")
    return days


class UiSettings(SettingsModel):
    """Where `kaudit ui` listens, how often it rereads the tables, and its optional login."""

    key_prefix = "ui."

    host: Annotated[StrictStr, AfterValidator(_ui_host)] = setting(
        "address the UI binds to; loopback unless exposed on purpose (0.0.0.0)", DEFAULT_UI_HOST
    )
    port: Port = setting("TCP port of the UI", DEFAULT_UI_PORT)
    refresh_s: PositiveSeconds = setting(
        "seconds between rereads of the Delta tables (pages refresh on this interval too)", 30.0
    )
    days: Annotated[StrictInt, AfterValidator(_days)] = setting(
        "days of windows the UI loads and lets you pick from", 7
    )
    auth_user: StrictStr = setting(
        "basic-auth user name; empty: no login (run it behind your own proxy, or on loopback)", ""
    )
    auth_password: Secret = setting(
        "basic-auth password, or KAUDIT_UI_AUTH_PASSWORD", factory=lambda: Secret(""), shown='""'
    )

    @model_validator(mode="after")
    def _login_or_none(self) -> UiSettings:
        if bool(self.auth_user) != bool(self.auth_password.reveal()):
            raise invalid(
                "auth_user and auth_password are set together or not at all",
                "auth_password" if self.auth_user else "auth_user",
            )
        return self
