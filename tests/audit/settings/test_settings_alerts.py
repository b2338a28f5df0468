"""The [smtp], [alerts] and [ui] settings: defaults, routing, secrets, errors naming the key."""

from __future__ import annotations

import json

import pytest

from audit.contract.errors import ConfigError
from audit.settings import AlertSettings, Settings, from_dict, load_settings


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"smtp": {"security": "tls"}}, "smtp.security"),
        ({"smtp": {"port": 0}}, "smtp.port"),
        ({"smtp": {"password": "pw"}}, "smtp.user"),
        ({"smtp": {"host": "mail.example.com", "user": "u", "password": "pw"}}, "smtp.security"),
        ({"smtp": {"retries": 0}}, "smtp.retries"),
        ({"smtp": {"hots": "x"}}, "smtp.hots"),
        ({"alerts": {"sender": "nobody"}}, "alerts.sender"),
        ({"alerts": {"default_recipients": ["a@b", "oops"]}}, "alerts.default_recipients[1]"),
        ({"alerts": {"routes": [{"pattern": "(", "recipients": ["a@b"]}]}}, "alerts.routes[0].pattern"),
        ({"alerts": {"routes": [{"pattern": "x", "recipients": []}]}}, "alerts.routes[0].recipients"),
        ({"alerts": {"lag_minutes": 0}}, "alerts.lag_minutes"),
        ({"alerts": {"ui_url": "ftp://x"}}, "alerts.ui_url"),
        ({"alerts": {"drop_fraction": 0}}, "alerts.drop_fraction"),
        ({"alerts": {"drop_fraction": 1.5}}, "alerts.drop_fraction"),
        ({"alerts": {"drop_fraction": "10%"}}, "alerts.drop_fraction"),
        ({"alerts": {"drop_history_days": 0}}, "alerts.drop_history_days"),
        ({"alerts": {"drop_history_days": 29}}, "alerts.drop_history_days"),
        ({"alerts": {"drop_exclude": ["ok", "("]}}, "alerts.drop_exclude[1]"),
        ({"alerts": {"drop_exlude": []}}, "alerts.drop_exlude"),
        ({"ui": {"auth_user": "admin"}}, "ui.auth_password"),
        ({"ui": {"port": 70000}}, "ui.port"),
        ({"ui": {"host": " "}}, "ui.host"),
    ],
)
def test_bad_values_name_their_key(raw, key):
    with pytest.raises(ConfigError) as caught:
        from_dict(raw)
    assert str(caught.value).startswith(f"{key}: "), str(caught.value)
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize(
    "topic, expected",
    [
        ("dc1.payments", ("pay@example.com",)),
        ("dc2.payments-eu", ("pay@example.com",)),
        ("dc1.orders", ("orders@example.com", "oncall@example.com")),
        ("dc1.clicks", ("all@example.com",)),
    ],
)
def test_the_first_matching_route_wins_else_the_default(topic, expected):
    alerts = from_dict(
        {
            "alerts": {
                "default_recipients": ["all@example.com"],
                "routes": [
                    {"pattern": r"\.payments", "recipients": ["pay@example.com"]},
                    {"pattern": "orders|payments", "recipients": ["orders@example.com", "oncall@example.com"]},
                ],
            }
        }
    ).alerts
    assert alerts.recipients(topic) == expected


def test_passwords_come_from_the_environment_and_never_print():
    settings = load_settings(
        env={
            "KAUDIT_SMTP_USER": "audit",
            "KAUDIT_SMTP_PASSWORD": "s3cret-pw",
            "KAUDIT_UI_AUTH_USER": "admin",
            "KAUDIT_UI_AUTH_PASSWORD": "ui-pw",
            "KAUDIT_UI_PORT": "9001",
        }
    )
    assert settings.smtp.password.reveal() == "s3cret-pw"
    assert settings.ui.auth_password.reveal() == "ui-pw"
    assert settings.ui.port == 9001
    shown = json.dumps(settings.redacted()) + repr(settings)
    assert "s3cret-pw" not in shown and "ui-pw" not in shown
    assert settings.redacted()["smtp"]["password"] == "****"


def test_an_unknown_section_variable_is_an_error():
    with pytest.raises(ConfigError, match="KAUDIT_SMTP_HOTS"):
        load_settings(env={"KAUDIT_SMTP_HOTS": "x"})


def test_defaults_are_loopback_and_route_nowhere():
    settings = Settings.default()
    assert settings.ui.host == "127.0.0.1" and settings.smtp.host == "127.0.0.1"
    assert settings.alerts == AlertSettings() and settings.alerts.recipients("dc1.orders") == ()


def test_drop_alerts_are_switched_off_per_topic_regex_and_the_fraction_comes_from_the_environment():
    settings = load_settings(env={"KAUDIT_ALERTS_DROP_FRACTION": "0.25"})
    assert settings.alerts.drop_fraction == 0.25 and settings.alerts.drop_history_days == 7
    assert settings.alerts.drops_watched("dc1.orders")
    alerts = from_dict({"alerts": {"drop_exclude": [r"^dc1\.clicks$", "backfill"]}}).alerts
    assert [alerts.drops_watched(t) for t in ("dc1.clicks", "dc2.clicks", "dc1.backfill-x", "dc1.clicks2")] == [
        False,
        True,
        False,
        True,
    ]
    assert not from_dict({"alerts": {"drop_exclude": [".*"]}}).alerts.drops_watched("dc1.orders")
