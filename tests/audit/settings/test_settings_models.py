"""The settings as pydantic models: validated copies, frozen values, construction that reads no environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from audit.contract.errors import ConfigError
from audit.settings import ClusterSettings, Secret, Settings, UiSettings, from_dict


def test_replace_checks_the_copy_like_a_new_object():
    settings = Settings.default()
    assert settings.replace(window_minutes=5).window_minutes == 5
    with pytest.raises(ConfigError, match=r"^window_minutes: 7 does not divide a day"):
        settings.replace(window_minutes=7)
    with pytest.raises(ConfigError, match=r"^ui\.port: 0 is not a TCP port"):
        settings.ui.replace(port=0)
    with pytest.raises(ConfigError, match=r"^tiers\[1\]: 'dc1' is neither producer"):
        settings.replace(clusters=(ClusterSettings(name="east", bootstrap_servers="k:1"),))


def test_settings_are_frozen_hashable_values():
    settings = Settings.default()
    with pytest.raises(ValidationError):
        settings.window_minutes = 5  # type: ignore[misc]
    assert settings == Settings.default() and hash(settings) == hash(Settings.default())
    assert len({settings, settings.replace(), settings.replace(grace_s=1)}) == 2


def test_construction_reads_no_environment(monkeypatch):
    monkeypatch.setenv("KAUDIT_GRACE_S", "42")
    monkeypatch.setenv("KAUDIT_SMTP_HOST", "mail.example.com")
    assert Settings.default().grace_s == 300.0 and Settings().smtp.host == "127.0.0.1"


def test_nested_tables_are_keyed_by_their_place():
    raw = {"clusters": [{"name": "dc1"}, {"name": "dc2", "bootstrap_servers": "k:1", "local": "no"}]}
    with pytest.raises(ConfigError, match=r"^clusters\[1\]\.local: expected true or false, got 'no'$"):
        from_dict(raw)
    with pytest.raises(ConfigError, match=r"^alerts\.routes\[0\]\.recipients\[1\]: 'x' is not an email address"):
        from_dict({"alerts": {"routes": [{"pattern": "x", "recipients": ["a@b", "x"]}]}})


def test_secrets_print_masked_and_show_empty_when_empty():
    ui = UiSettings(auth_user="admin", auth_password="pw")
    assert isinstance(ui.auth_password, Secret) and "pw" not in repr(ui) + str(ui)
    assert ui.model_dump(mode="json")["auth_password"] == "****"
    assert UiSettings().model_dump(mode="json")["auth_password"] == ""
