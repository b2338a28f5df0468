"""Loading: the TOML file, the KAUDIT_* overlay, paths resolved against the file; `describe()` of every key."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python
from pydantic_settings import InitSettingsSource

from audit.contract.errors import ConfigError
from audit.settings.alerts import AlertRoute
from audit.settings.clusters import ClusterSettings
from audit.settings.environment import CONFIG_ENV, EnvironmentSource
from audit.settings.errors import config_error, from_validation_error, show
from audit.settings.flows import FlowSettings
from audit.settings.root import SECTIONS, Settings
from audit.settings.topics import TopicSelection

EXAMPLE_CONFIG = Path(__file__).with_name("default.toml")
LONG_NUMBER_DIGITS = 4000  # tomllib hands int() numbers this long, which refuses them with a ValueError


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `path`, else $KAUDIT_CONFIG, else the built-in default; then KAUDIT_* overrides.

    `env` defaults to os.environ. The paths of the result are absolute, `~` expanded.
    """
    env = os.environ if env is None else env
    from_env = path is None or path == ""
    chosen = (env.get(CONFIG_ENV) or None) if from_env else path
    file = None if chosen is None else Path(chosen)
    raw = {} if file is None else read_toml(file, CONFIG_ENV if from_env else None)
    base, origin = (Path.cwd(), None) if file is None else (file.absolute().parent, str(file))
    environment = EnvironmentSource(Settings, env, raw)
    try:
        settings = Settings(_build_sources=((environment, InitSettingsSource(Settings, raw)), {}))
        return settings.replace(
            **{
                key: _resolved_dir(key, getattr(settings, key), Path.cwd() if key in environment.variables else base)
                for key in ("state_dir", "cache_dir")
            }
        )
    except ConfigError as exc:
        # Keyed errors are about a value: say whether it came from a variable or from the file.
        # Unkeyed ones (a bad KAUDIT_ variable) already name their variable.
        key = getattr(exc, "key", None)
        where = (environment.variables.get(key) or origin) if key else None
        raise (ConfigError(f"{where}: {exc}") if where else exc) from None


def from_dict(raw: Mapping[str, Any]) -> Settings:
    """Settings from a parsed TOML document, with every key and type checked."""
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise from_validation_error(exc, Settings) from None


def _resolved_dir(key: str, value: Path, base: Path) -> Path:
    try:
        expanded = value.expanduser()
    except RuntimeError:
        raise config_error(key, f"{show(value)}: '~' cannot be expanded (no such user, or no home directory)") from None
    return expanded if expanded.is_absolute() else base / expanded


# -- the TOML file ------------------------------------------------------------------------------


def read_toml(path: Path, variable: str | None) -> dict[str, Any]:
    """The parsed file; errors name it (and the variable that named it) and give file:line:column."""
    named = f"config file {path}" + (f" (from {variable})" if variable else "")
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{named} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{named} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{named} is not UTF-8 text: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{named} is not usable TOML: nested too deeply") from None
    except ValueError as exc:  # tomllib lets int()'s own errors through (a 5000-digit number)
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise _toml_error(path, exc, variable) from None
        raise ConfigError(f"{_long_number_place(path)}: not usable TOML: {str(exc)[:100]}") from None


def _long_number_place(path: Path) -> str:
    """file:line of the first number too long for int(), or just the file."""
    text = path.read_text(errors="replace")
    found = re.search(rf"[0-9_]{{{LONG_NUMBER_DIGITS},}}", text)
    return f"{path}:{text.count(chr(10), 0, found.start()) + 1}" if found else str(path)


def _toml_error(path: Path, exc: tomllib.TOMLDecodeError, variable: str | None) -> ConfigError:
    """tomllib says "Invalid value (at line 3, column 18)"; give the place as file:line:column."""
    message = str(exc)
    place = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if place:
        where = f"{path}:{place.group(1)}:{place.group(2)}"
        message = message[: place.start()]
    else:
        where = str(path)
    return ConfigError(f"{where}: not valid TOML: {message}" + (f" (from {variable})" if variable else ""))


# -- kaudit config keys -------------------------------------------------------------------------


def describe() -> list[tuple[str, str, str]]:
    """(key, default, description) for every configuration key, as `kaudit config keys` prints them."""
    tables: tuple[tuple[str, type[BaseModel]], ...] = (
        ("", Settings),
        ("topics.", TopicSelection),
        (ClusterSettings.key_prefix, ClusterSettings),
        *((f"{name}.", model) for name, model in SECTIONS.items()),
        (AlertRoute.key_prefix, AlertRoute),
        (FlowSettings.key_prefix, FlowSettings),
    )
    return [
        (prefix + (field.alias or name), _shown_default(field), field.description or "")
        for prefix, model in tables
        for name, field in model.model_fields.items()
    ]


def _shown_default(field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "shown" in extra:
        return str(extra["shown"])
    if field.is_required():
        return "(required)"
    default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
    return json.dumps(to_jsonable_python(default))
