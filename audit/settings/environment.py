"""KAUDIT_* environment variables as a pydantic-settings source laid over the config file.

    KAUDIT_<KEY>                        a top-level scalar key: KAUDIT_WINDOW_MINUTES=5, KAUDIT_STATE_DIR, ...
    KAUDIT_<TABLE>_<KEY>                a scalar key of [smtp], [alerts] or [ui]: KAUDIT_SMTP_PASSWORD
    KAUDIT_CLUSTER_<NAME>_BOOTSTRAP_SERVERS, KAUDIT_CLUSTER_<NAME>_LOCAL
    KAUDIT_CLUSTER_<NAME>_CLIENT__<KEY> a librdkafka setting, dots written as `__`

<NAME> is the cluster name in capitals with `-` as `_`. Any other KAUDIT_ variable is an error (a typo
must not be silently ignored), except the few read elsewhere (`OTHER_ENV`). Values are parsed here, more
strictly than pydantic would ("5.0" is not an integer, "t" is not true), and errors name the variable.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from audit.contract.errors import ConfigError
from audit.settings.clusters import DEFAULT_CLUSTERS, Secret, env_name, flatten
from audit.settings.errors import config_error, key_of, show
from audit.settings.root import SECTIONS, Settings

ENV_PREFIX = "KAUDIT_"
CONFIG_ENV = "KAUDIT_CONFIG"
# KAUDIT_ variables that other modules read; they are not configuration keys. Add a name here when a
# module starts reading a new one, or every command will reject it as a typo.
OTHER_ENV = frozenset(
    {
        CONFIG_ENV,
        "KAUDIT_LOG_LEVEL",
        "KAUDIT_LOG_FORMAT",
        "KAUDIT_PURE_PYTHON",
        "KAUDIT_PORT_SLOT",
        "KAUDIT_DRIVER_JAVA_OPTIONS",
    }
)  # KAUDIT_PURE_PYTHON: audit.hops.counter.fastcount; KAUDIT_PORT_SLOT: audit.local.processes;
# KAUDIT_DRIVER_JAVA_OPTIONS: audit.io.spark. KAUDIT_SPARK_MASTER is spark.master, a configuration key.

CLIENT_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
ENV_INT_PATTERN = re.compile(r"[+-]?[0-9]+")  # of the stripped text: int() strips less than `\s` matches
ENV_MAX_DIGITS = 100  # int() refuses over 4300 digits with a ValueError
ENV_BOOLS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}
_SCALARS = (str, int, float, bool, Path)


def _scalar_keys(model: type[Any]) -> dict[str, type]:
    """The keys of `model` a variable may set, with their types (a Secret is set as a str)."""
    kinds = {
        name: str if field.annotation is Secret else field.annotation for name, field in model.model_fields.items()
    }
    return {name: kind for name, kind in kinds.items() if kind in _SCALARS}


class EnvironmentSource(PydanticBaseSettingsSource):
    """The values KAUDIT_* variables set; `variables` says which variable set which key, for errors."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str], file_values: Mapping[str, Any]):
        super().__init__(settings_cls)
        self.env = env
        self.file_values = file_values
        self.variables: dict[str, str] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every variable at once

    def __call__(self) -> dict[str, Any]:
        overlay: dict[str, Any] = {}
        keys = _scalar_keys(Settings)
        for variable in sorted(self.env):
            if not variable.startswith(ENV_PREFIX) or variable in OTHER_ENV:
                continue
            text, key = self.env[variable], variable[len(ENV_PREFIX) :].lower()
            if key in keys:
                overlay[key] = parse(variable, text, key, keys[key])
                self.variables[key] = variable
            elif (section := _section_key(key)) is not None:
                self._set_section(overlay, variable, text, *section)
            elif key.startswith("cluster_"):
                self.variables[self._set_cluster(overlay, variable, text)] = variable
            else:
                raise ConfigError(f"{variable}: not a configuration variable ({_hint(key, keys)})")
        return overlay

    def _set_section(self, overlay: dict[str, Any], variable: str, text: str, name: str, key: str, kind: type) -> None:
        in_file = self.file_values.get(name, {})
        if not isinstance(in_file, Mapping):
            raise config_error(name, f"expected a table, got {show(in_file)}")
        overlay.setdefault(name, {})[key] = parse(variable, text, f"{name}.{key}", kind)
        self.variables[f"{name}.{key}"] = variable

    def _set_cluster(self, overlay: dict[str, Any], variable: str, text: str) -> str:
        """Apply KAUDIT_CLUSTER_<NAME>_<SETTING>=text to the cluster tables; returns the key it set."""
        if "clusters" not in overlay:
            overlay["clusters"] = self._cluster_tables()
        clusters = overlay["clusters"]
        index, (target, client_key) = _matching_cluster(clusters, variable)
        cluster = clusters[index]
        if target == "client":
            cluster["client"] = {**_flat_client(cluster.get("client", {}), index), client_key: text}
            return f"clusters[{index}].client.{client_key}"
        if target == "local":
            cluster["local"] = parse(variable, text, f"clusters[{index}].local", bool)
        else:
            cluster["bootstrap_servers"] = text
        return f"clusters[{index}].{target}"

    def _cluster_tables(self) -> list[dict[str, Any]]:
        """Copies of the file's [[clusters]] tables, or of the default's."""
        if "clusters" not in self.file_values:
            return [{"name": name} for name in DEFAULT_CLUSTERS]
        tables = self.file_values["clusters"]
        if isinstance(tables, (str, bytes)) or not isinstance(tables, (list, tuple)):
            raise config_error("clusters", f"expected a list of tables ([[clusters]]), got {show(tables)}")
        for index, table in enumerate(tables):
            if not isinstance(table, Mapping):
                raise config_error(f"clusters[{index}]", f"expected a table, got {show(table)}")
        return [dict(table) for table in tables]


def _section_key(key: str) -> tuple[str, str, type] | None:
    """(table, key, type) that KAUDIT_<TABLE>_<KEY> sets, or None."""
    for name, model in SECTIONS.items():
        kind = _scalar_keys(model).get(key[len(name) + 1 :]) if key.startswith(f"{name}_") else None
        if kind is not None:
            return name, key[len(name) + 1 :], kind
    return None


def _cluster_setting(setting: str) -> tuple[str, str] | None:
    """What KAUDIT_CLUSTER_<NAME>_<SETTING> sets: ("bootstrap_servers", ""), ("local", ""),
    ("client", librdkafka key) or None if nothing."""
    lowered = setting.lower()
    if lowered in ("bootstrap_servers", "local"):
        return lowered, ""
    if lowered.startswith("client__"):
        client_key = lowered[len("client__") :].replace("__", ".")
        if CLIENT_KEY_PATTERN.match(client_key):
            return "client", client_key
    return None


def _matching_cluster(clusters: list[dict[str, Any]], variable: str) -> tuple[int, tuple[str, str]]:
    """(index of the cluster, what to set) for KAUDIT_CLUSTER_<NAME>_<SETTING>; errors name the variable."""
    rest = variable[len(ENV_PREFIX) + len("CLUSTER_") :]
    matches: list[tuple[int, str, tuple[str, str]]] = []
    near: list[tuple[int, str, None]] = []
    for index, cluster in enumerate(clusters):
        name = cluster.get("name")
        head = f"{env_name(name)}_" if isinstance(name, str) else None
        if head and rest.upper().startswith(head):
            setting = rest[len(head) :]
            target = _cluster_setting(setting)
            if target:
                matches.append((index, setting, target))
            else:
                near.append((index, setting, None))
    if not matches and near:
        raise ConfigError(
            f"{variable}: {near[0][1].lower()!r} is not a cluster setting "
            "(BOOTSTRAP_SERVERS, LOCAL or CLIENT__<KEY> with dots as __)"
        )
    if not matches:
        names = ", ".join(str(cluster.get("name")) for cluster in clusters)
        raise ConfigError(f"{variable}: no configured cluster matches (known: {names})")
    if len(matches) > 1:
        both = " and ".join(repr(clusters[index]["name"]) for index, _setting, _target in matches)
        raise ConfigError(f"{variable}: matches clusters {both}; rename one of them")
    index, _setting, target = matches[0]
    return index, target


def _flat_client(client: Any, index: int) -> dict[str, Any]:
    """A cluster's client table with dotted keys, so a variable replaces a nested file value."""
    if not isinstance(client, Mapping):
        raise config_error(f"clusters[{index}].client", f"expected a table of librdkafka settings, got {show(client)}")
    try:
        return dict(flatten(client))
    except PydanticCustomError as exc:
        context = exc.context or {}
        raise config_error(key_of(("clusters", index, "client", *context["at"])), context["text"]) from None


def _hint(key: str, keys: Mapping[str, Any]) -> str:
    if key.startswith("clusters_"):
        return f"did you mean {ENV_PREFIX}CLUSTER_{key[len('clusters_') :].upper()}?"
    if key.split("_")[0] in ("clusters", "topics", "tiers"):
        return f"{key.split('_')[0]} can be set in the config file only"
    names = [f"{ENV_PREFIX}{name.upper()}" for name in keys] + sorted(OTHER_ENV)
    close = difflib.get_close_matches(f"{ENV_PREFIX}{key.upper()}", names, n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]}?"
    return (
        "known: " + ", ".join(names) + f", {ENV_PREFIX}CLUSTER_<NAME>_BOOTSTRAP_SERVERS, "
        f"{ENV_PREFIX}CLUSTER_<NAME>_LOCAL, {ENV_PREFIX}CLUSTER_<NAME>_CLIENT__<KEY>"
    )


def parse(variable: str, text: str, key: str, kind: type) -> Any:
    """An environment value as the type of its key; errors name the variable."""
    if kind is int:
        digits = text.strip()
        if not ENV_INT_PATTERN.fullmatch(digits):
            raise ConfigError(f"{variable}: {show(text)} is not an integer ({key})")
        if len(digits) > ENV_MAX_DIGITS:
            raise ConfigError(f"{variable}: {show(text)} has more than {ENV_MAX_DIGITS} digits ({key})")
        return int(digits)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{variable}: {text!r} is not a number ({key})") from None
    if kind is bool:
        if text.strip().lower() not in ENV_BOOLS:
            raise ConfigError(f"{variable}: {text!r} is not true or false ({key})")
        return ENV_BOOLS[text.strip().lower()]
    return text
