"""The one configuration of kafka-audit: a TOML file, environment overrides, a built-in default.

Every key is declared once, with its default and what it holds (`describe()` lists them). Errors
name the key and the value: `windw_minutes: unknown key (did you mean 'window_minutes'?)`.
Secrets (passwords, keys) are held in `Secret`, which prints as ****.

Environment overrides: KAUDIT_<KEY> for top-level keys (KAUDIT_WINDOW_MINUTES=5) and
KAUDIT_CLUSTER_<NAME>_BOOTSTRAP_SERVERS or KAUDIT_CLUSTER_<NAME>_CLIENT__<key with dots as __>
(KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD) per cluster. An unknown KAUDIT_ variable is an error.
"""
from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from audit.errors import ConfigError
from audit.windows import DEFAULT_WINDOW_MINUTES, validate_window_minutes

ENV_PREFIX = "KAUDIT_"
# KAUDIT_ variables read elsewhere, not configuration keys.
OTHER_ENV = {"KAUDIT_CONFIG", "KAUDIT_LOG_LEVEL", "KAUDIT_LOG_FORMAT", "KAUDIT_SPARK_MASTER"}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SECRET_KEY_PATTERN = re.compile(r"(password|secret|\.key\.pem$|^sasl\.oauthbearer\.config$)")
DEFAULT_CLUSTERS = ("dc1", "dc2", "aggregate")


def doc(text: str, default: Any = None, **kwargs: Any) -> Any:
    """A dataclass field with its description kept in metadata."""
    if "default_factory" in kwargs:
        return field(metadata={"doc": text}, **kwargs)
    return field(default=default, metadata={"doc": text})


class Secret:
    """A value that never prints: repr and str give ****; `reveal()` gives it to a client."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('****')"

    def __str__(self) -> str:
        return "****"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    name: str = doc("cluster name used in tiers, tables and metrics (never a hostname)")
    bootstrap_servers: str = doc("host:port list; empty means an embedded local cluster started by `kaudit clusters up`", "")
    client: Mapping[str, str | Secret] = doc(
        "librdkafka client settings (security.protocol, sasl.*, ssl.*, ...); passwords are kept secret",
        default_factory=dict,
    )

    @property
    def local(self) -> bool:
        return not self.bootstrap_servers

    def client_config(self) -> dict[str, str]:
        """The client settings with secrets revealed, for a confluent-kafka client only."""
        return {key: value.reveal() if isinstance(value, Secret) else value for key, value in self.client.items()}


@dataclass(frozen=True, kw_only=True)
class TopicSelection:
    include: tuple[str, ...] = doc("regexes of topics to audit (any match)", (".*",))
    exclude: tuple[str, ...] = doc("regexes of topics never audited (wins over include)", (r"^__.*", r"^_audit$", r"^_kaudit.*"))

    def __post_init__(self) -> None:
        compiled = {}
        for key in ("include", "exclude"):
            patterns = []
            for index, pattern in enumerate(getattr(self, key)):
                try:
                    patterns.append(re.compile(pattern))
                except (re.error, TypeError) as exc:
                    raise ConfigError(f"topics.{key}[{index}]: {pattern!r} is not a valid regex: {exc}") from None
            compiled[key] = patterns
        object.__setattr__(self, "_compiled", compiled)

    def matches(self, topic: str) -> bool:
        compiled = self._compiled  # type: ignore[attr-defined]
        return any(p.search(topic) for p in compiled["include"]) and not any(p.search(topic) for p in compiled["exclude"])


@dataclass(frozen=True, kw_only=True)
class Settings:
    state_dir: Path = doc("root of everything the project writes: local clusters, Delta tables, logs", Path(".kaudit"))
    cache_dir: Path = doc("downloaded jars (filled by `make setup`)", Path("~/.cache/kafka-audit"))
    audit_topic: str = doc("topic the audit records are written to, on every cluster", "_audit")
    window_minutes: int = doc("window size; must divide a day", DEFAULT_WINDOW_MINUTES)
    grace_s: float = doc("seconds after a window's end before it can be final for a tier", 300.0)
    flush_interval_s: float = doc("seconds between audit record emissions of producers and counters", 10.0)
    metrics_host: str = doc("address Prometheus endpoints bind to (loopback unless exposed on purpose)", "127.0.0.1")
    clusters: tuple[ClusterSettings, ...] = doc(
        "the Kafka clusters ([[clusters]] tables)",
        default_factory=lambda: tuple(ClusterSettings(name=name) for name in DEFAULT_CLUSTERS),
    )
    tiers: tuple[str, ...] = doc("counting points in data-flow order; default: producer, each cluster, lake", ())
    reference_tier: str = doc("tier whose counts are the expected ones", "producer")
    topics: TopicSelection = doc("which topics are audited ([topics] table)", default_factory=TopicSelection)

    def __post_init__(self) -> None:
        if not self.tiers:
            object.__setattr__(self, "tiers", ("producer", *(c.name for c in self.clusters), "lake"))
        _validate(self)

    @classmethod
    def default(cls) -> "Settings":
        return cls()

    def cluster(self, name: str) -> ClusterSettings:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise ConfigError(f"cluster {name!r} is not configured (known: {', '.join(c.name for c in self.clusters)})")

    def redacted(self) -> dict[str, Any]:
        """A plain dict for printing, with secrets masked."""
        return _plain(self)


def _validate(settings: Settings) -> None:
    reason = validate_window_minutes(settings.window_minutes)
    if reason:
        raise ConfigError(f"window_minutes: {reason}")
    if settings.grace_s < 0:
        raise ConfigError(f"grace_s: {settings.grace_s} is negative")
    if settings.flush_interval_s <= 0:
        raise ConfigError(f"flush_interval_s: {settings.flush_interval_s} must be positive")
    if not settings.audit_topic or not re.match(r"^[A-Za-z0-9._-]{1,249}$", settings.audit_topic):
        raise ConfigError(f"audit_topic: {settings.audit_topic!r} is not a legal Kafka topic name")
    if not settings.clusters:
        raise ConfigError("clusters: at least one cluster is needed")
    names = [c.name for c in settings.clusters]
    for index, name in enumerate(names):
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise ConfigError(f"clusters[{index}].name: {name!r} is not a name (letters, digits, '_', '-')")
        if name in ("producer", "lake"):
            raise ConfigError(f"clusters[{index}].name: {name!r} is reserved for a tier")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"clusters: name {duplicates[0]!r} is used twice")
    for index, tier in enumerate(settings.tiers):
        if tier not in ("producer", "lake") and tier not in names:
            raise ConfigError(f"tiers[{index}]: {tier!r} is neither producer, lake nor a configured cluster")
    if len(set(settings.tiers)) != len(settings.tiers):
        raise ConfigError(f"tiers: {list(settings.tiers)} names a tier twice")
    if settings.reference_tier not in settings.tiers:
        raise ConfigError(f"reference_tier: {settings.reference_tier!r} is not one of the tiers {list(settings.tiers)}")


def _plain(value: Any) -> Any:
    if isinstance(value, Secret):
        return str(value)
    if isinstance(value, (Settings, ClusterSettings, TopicSelection)):
        data = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, ClusterSettings):
            data["local"] = value.local
        return data
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def describe() -> list[tuple[str, str, str]]:
    """(key, default, description) for every configuration key."""
    rows = []
    for prefix, cls in (("", Settings), ("clusters[].", ClusterSettings), ("topics.", TopicSelection)):
        for f in fields(cls):
            if f.default is not MISSING:
                default = f.default
            elif f.default_factory is not MISSING:
                default = f.default_factory()
            else:
                default = None
            shown = "(required)" if default is None else repr(_plain(default))
            rows.append((prefix + f.name, shown, f.metadata["doc"]))
    return rows


# -- loading ------------------------------------------------------------------------------------


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `path`, else $KAUDIT_CONFIG, else the built-in default; then environment overrides."""
    env = os.environ if env is None else env
    path = path or env.get("KAUDIT_CONFIG") or None
    if path is None:
        raw: dict[str, Any] = {}
        base = Path.cwd()
    else:
        path = Path(path)
        raw = _read_toml(path)
        base = path.resolve().parent
    raw = _apply_env(raw, env)
    settings = from_dict(raw)
    state_dir = settings.state_dir.expanduser()
    return replace(settings, state_dir=state_dir if state_dir.is_absolute() else base / state_dir,
                   cache_dir=settings.cache_dir.expanduser())


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None


def from_dict(raw: Mapping[str, Any]) -> Settings:
    """Settings from a parsed TOML document, with every key and type checked."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: expected a table, got {type(raw).__name__}")
    values = _typed(Settings, raw, "")
    if "clusters" in values:
        clusters = values["clusters"]
        if not isinstance(clusters, list):
            raise ConfigError(f"clusters: expected a list of tables ([[clusters]]), got {_short(clusters)}")
        values["clusters"] = tuple(_cluster(item, index) for index, item in enumerate(clusters))
    if "topics" in values:
        if not isinstance(values["topics"], Mapping):
            raise ConfigError(f"topics: expected a table, got {_short(values['topics'])}")
        values["topics"] = TopicSelection(**_typed(TopicSelection, values["topics"], "topics."))
    return Settings(**values)


def _cluster(item: Any, index: int) -> ClusterSettings:
    where = f"clusters[{index}]."
    if not isinstance(item, Mapping):
        raise ConfigError(f"clusters[{index}]: expected a table, got {_short(item)}")
    values = _typed(ClusterSettings, item, where)
    if "name" not in values:
        raise ConfigError(f"{where}name: missing")
    client = values.get("client", {})
    if not isinstance(client, Mapping):
        raise ConfigError(f"{where}client: expected a table of librdkafka settings, got {_short(client)}")
    checked = {}
    for key, value in client.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}client.{key}: expected a string, got {_short(value)}")
        checked[key] = Secret(str(value)) if SECRET_KEY_PATTERN.search(key) else str(value)
    values["client"] = checked
    return ClusterSettings(**values)


# The type each scalar key must have; tables and lists are checked where they are built.
_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "state_dir": (str,), "cache_dir": (str,), "audit_topic": (str,), "window_minutes": (int,),
    "grace_s": (int, float), "flush_interval_s": (int, float), "metrics_host": (str,),
    "reference_tier": (str,), "name": (str,), "bootstrap_servers": (str,),
}
_LIST_KEYS = {"tiers", "include", "exclude"}


def _typed(cls: type, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
            raise ConfigError(f"{where}{key}: unknown key{hint}")
        if key in _SCALAR_TYPES:
            kinds = _SCALAR_TYPES[key]
            if isinstance(value, bool) or not isinstance(value, kinds):
                expected = " or ".join("a number" if k is float else "an integer" if k is int else "a string" for k in kinds)
                raise ConfigError(f"{where}{key}: expected {expected}, got {_short(value)}")
            if key in ("state_dir", "cache_dir"):
                value = Path(value)
            elif kinds == (int, float):
                value = float(value)
        elif key in _LIST_KEYS:
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{where}{key}: expected a list of strings, got {_short(value)}")
            value = tuple(value)
        values[key] = value
    return values


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay KAUDIT_* variables on the parsed file; values are parsed as TOML scalars when they can be."""
    raw = {**raw}
    top_level = {f.name for f in fields(Settings)} - {"clusters", "topics", "tiers"}
    for variable, text in sorted(env.items()):
        if not variable.startswith(ENV_PREFIX) or variable in OTHER_ENV:
            continue
        key = variable[len(ENV_PREFIX):].lower()
        if key in top_level:
            raw[key] = _env_value(variable, text, key)
        elif key.startswith("cluster_"):
            _apply_cluster_env(raw, variable, key[len("cluster_"):], text)
        else:
            close = difflib.get_close_matches(key, sorted(top_level), n=1)
            hint = f" (did you mean KAUDIT_{close[0].upper()}?)" if close else ""
            raise ConfigError(f"{variable}: not a configuration variable{hint}")
    return raw


def _env_value(variable: str, text: str, key: str) -> Any:
    kinds = _SCALAR_TYPES.get(key, (str,))
    if kinds == (str,):
        return text
    try:
        return int(text) if kinds == (int,) else float(text)
    except ValueError:
        raise ConfigError(f"{variable}: {text!r} is not {'an integer' if kinds == (int,) else 'a number'}") from None


def _apply_cluster_env(raw: dict[str, Any], variable: str, rest: str, text: str) -> None:
    clusters = [dict(c) for c in raw.get("clusters", [{"name": n} for n in DEFAULT_CLUSTERS])]
    raw["clusters"] = clusters
    for cluster in clusters:
        name = str(cluster.get("name", "")).lower().replace("-", "_")
        if rest.startswith(name + "_"):
            setting = rest[len(name) + 1:]
            if setting == "bootstrap_servers":
                cluster["bootstrap_servers"] = text
                return
            if setting.startswith("client__"):
                client_key = setting[len("client__"):].replace("__", ".")
                cluster["client"] = {**cluster.get("client", {}), client_key: text}
                return
            raise ConfigError(f"{variable}: {setting!r} is not a cluster setting (bootstrap_servers or client__<key>)")
    raise ConfigError(f"{variable}: no configured cluster matches (known: {', '.join(str(c.get('name')) for c in clusters)})")
