"""The one configuration of kafka-audit: a TOML file, environment overrides, a built-in default.

Where it comes from, first found wins: `load_settings(path)`, else the file named by $KAUDIT_CONFIG,
else the built-in default (three embedded local clusters: dc1, dc2 and the aggregate they feed).
`audit/settings/default.toml` is that default written out, with a comment per key.

Every key is declared once, as a dataclass field with its default and a description in
`metadata["doc"]`; `describe()` lists them for `kaudit config keys`. Errors name the key and the value,
and where the value came from: `kaudit.toml: windw_minutes: unknown key (did you mean
'window_minutes'?)`. Credentials in client settings are held in `Secret`, which prints as ****.

Environment overrides, applied on top of the file:
    KAUDIT_<KEY>                       a top-level scalar key: KAUDIT_WINDOW_MINUTES=5, KAUDIT_GRACE_S,
                                       KAUDIT_AUDIT_TOPIC, KAUDIT_STATE_DIR, KAUDIT_CACHE_DIR, ...
    KAUDIT_CLUSTER_<NAME>_BOOTSTRAP_SERVERS, KAUDIT_CLUSTER_<NAME>_LOCAL
    KAUDIT_CLUSTER_<NAME>_CLIENT__<KEY> a librdkafka setting, dots written as `__`:
                                       KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD
<NAME> is the cluster name in capitals with `-` as `_`. Any other KAUDIT_ variable is an error (a
typo must not be silently ignored), except the few read elsewhere (`OTHER_ENV`).

Relative paths are resolved by `load_settings`: against the config file's folder for values from the
file, against the working directory for the built-in default and for environment values.
"""
from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import tomllib
import typing
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from audit.contract.errors import ConfigError
from audit.contract.names import (CLUSTER_NAME_PATTERN, CONTROL_CHARACTERS, DEFAULT_AUDIT_TOPIC, LAKE_TIER,
                                  PRODUCER_TIER, RESERVED_TIERS, is_topic_name)
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, MINUTES_PER_DAY, validate_window_minutes

EXAMPLE_CONFIG = Path(__file__).with_name("default.toml")

ENV_PREFIX = "KAUDIT_"
CONFIG_ENV = "KAUDIT_CONFIG"
# KAUDIT_ variables that other modules read; they are not configuration keys. Add a name here when a
# module starts reading a new one, or every command will reject it as a typo.
OTHER_ENV = frozenset({CONFIG_ENV, "KAUDIT_LOG_LEVEL", "KAUDIT_LOG_FORMAT", "KAUDIT_SPARK_MASTER"})

DEFAULT_CLUSTERS = ("dc1", "dc2", "aggregate")
DEFAULT_STATE_DIR = Path(".kaudit")
DEFAULT_CACHE_DIR = Path("~/.cache/kafka-audit")
DEFAULT_GRACE_S = 300.0
DEFAULT_FLUSH_INTERVAL_S = 10.0
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_NAMING = "prefix"
DEFAULT_INCLUDE = (".*",)
DEFAULT_EXCLUDE = (r"^__.*", rf"^{DEFAULT_AUDIT_TOPIC}$", r"^_kaudit.*")  # Kafka's internal topics, the audit topic, ours
NAMING_POLICIES = ("prefix", "identity")

HOST_PATTERN = re.compile(r"\A[A-Za-z0-9.:_-]{1,253}\Z")  # a host name, IPv4 or IPv6 address
# Deeper than this, a client table is a mistake, not a librdkafka setting (and would exhaust the stack).
MAX_CLIENT_DEPTH = 16
# librdkafka settings whose values are credentials: passwords, secrets, private keys, OAuth config.
SECRET_KEY_PATTERN = re.compile(r"password|secret|\.key\.pem$|^sasl\.oauthbearer\.config$", re.IGNORECASE)
CLIENT_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
ENV_INT_PATTERN = re.compile(r"^\s*[+-]?[0-9]+\s*$")
ENV_BOOLS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}

# Key prefix of errors raised by a ClusterSettings on its own; from_dict puts the index in.
CLUSTER_KEY = "clusters[]."


class Secret:
    """A credential that never prints: repr and str give ****; `reveal()` gives it to a client."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret holds a str, not {type(value).__name__}")
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
        return hash((Secret, self._value))


def setting(doc: str, default: Any = MISSING, *, factory: Any = MISSING, shown: str | None = None,
            hash: bool | None = None) -> Any:
    """A dataclass field with its description (and, for computed defaults, how to show it) in metadata.

    No default and no factory: the key is required.
    """
    metadata = {"doc": doc} if shown is None else {"doc": doc, "shown": shown}
    return field(default=default, default_factory=factory, metadata=metadata, hash=hash)


def _error(key: str, text: str) -> ConfigError:
    """A ConfigError `key: text` that remembers its key, so callers can say where the value came from."""
    exc = ConfigError(f"{key}: {text}")
    exc.key = key  # type: ignore[attr-defined]
    exc.text = text  # type: ignore[attr-defined]
    return exc


def _rekeyed(exc: ConfigError, old_prefix: str, new_prefix: str) -> ConfigError:
    key = getattr(exc, "key", None)
    if key is None or not key.startswith(old_prefix):
        return exc
    return _error(new_prefix + key[len(old_prefix):], exc.text)  # type: ignore[attr-defined]


def _show(value: Any) -> str:
    """A value as an error message shows it: repr, shortened."""
    try:
        text = repr(str(value) if isinstance(value, Path) else value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


# -- field types --------------------------------------------------------------------------------
# Scalar and list fields are type-checked and converted from their annotation, in one place, both for
# values from TOML and for direct construction: `Settings(window_minutes="10")` fails like the file does.

_STR_LIST = tuple[str, ...]
_CHECKED_KINDS = (str, int, float, bool, Path, _STR_LIST)
_ENV_KINDS = (str, int, float, bool, Path)
_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", Path: "a path (string)"}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(key: str, value: Any, kind: Any) -> Any:
    """`value` as `kind`, or a ConfigError naming the key, the expected type and the value."""
    if kind == _STR_LIST:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise _error(key, f"expected a list of strings, got {_show(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise _error(f"{key}[{index}]", f"expected a string, got {_show(item)}")
        return tuple(value)
    if kind is Path:
        if not isinstance(value, (str, os.PathLike)):
            raise _error(key, f"expected {_KIND_NAMES[Path]}, got {_show(value)}")
        path = Path(value)
        if "\x00" in str(path):
            raise _error(key, f"{_show(path)} contains a NUL character")
        return path
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _error(key, f"expected {_KIND_NAMES[float]}, got {_show(value)}")
        try:
            return float(value)
        except OverflowError:
            raise _error(key, f"{_show(value)} is too large") from None
    if kind is int and isinstance(value, bool):  # TOML's true is not 1
        raise _error(key, f"expected {_KIND_NAMES[int]}, got {_show(value)}")
    if not isinstance(value, kind):
        raise _error(key, f"expected {_KIND_NAMES[kind]}, got {_show(value)}")
    return value


def _coerce_fields(obj: Any, prefix: str) -> None:
    """Check and convert every scalar or list-of-strings field of a frozen dataclass, in place.

    A field whose default is None and whose value is None is left alone: it is computed afterwards.
    """
    hints = _hints(type(obj))
    for f in fields(obj):
        kind = hints[f.name]
        if kind not in _CHECKED_KINDS:
            continue
        value = getattr(obj, f.name)
        if value is None and f.default is None:
            continue
        object.__setattr__(obj, f.name, _coerce(prefix + f.name, value, kind))


def _env_name(cluster_name: str) -> str:
    """How a cluster name appears in environment variables: DC1, EAST_1 for east-1."""
    return cluster_name.upper().replace("-", "_")


# -- the settings -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    """One Kafka cluster: its name, its address (none for an embedded local one), its client settings."""

    name: str = setting("cluster name: used in tiers, tables, metrics and KAUDIT_CLUSTER_<NAME>_* "
                        "variables; never a hostname")
    bootstrap_servers: str = setting(
        "host:port list of the brokers; empty: an embedded local cluster started by the project, whose "
        "address is found at run time", "")
    client: Mapping[str, str | Secret] = setting(
        "librdkafka client settings (security.protocol, sasl.*, ssl.*, ...); values of keys holding "
        "'password' or 'secret', or ending in '.key.pem', print as ****", factory=dict, hash=False)
    local: bool = setting("whether the project starts this cluster itself, on loopback", None,
                          shown="true when bootstrap_servers is empty")

    def __post_init__(self) -> None:
        _coerce_fields(self, CLUSTER_KEY)
        if not CLUSTER_NAME_PATTERN.match(self.name):
            raise _error(f"{CLUSTER_KEY}name", f"{_show(self.name)} is not a name (a letter or digit, then up to "
                         "63 letters, digits, '_' or '-')")
        if self.name in RESERVED_TIERS:
            raise _error(f"{CLUSTER_KEY}name", f"{self.name!r} is reserved for a tier")
        if self.bootstrap_servers and not self.bootstrap_servers.strip():
            raise _error(f"{CLUSTER_KEY}bootstrap_servers", f"{self.bootstrap_servers!r} is blank (empty means local)")
        if CONTROL_CHARACTERS.search(self.bootstrap_servers):
            raise _error(f"{CLUSTER_KEY}bootstrap_servers", f"{_show(self.bootstrap_servers)} contains a control character")
        object.__setattr__(self, "client", _client_settings(self.client, f"{CLUSTER_KEY}client"))
        local = not self.bootstrap_servers if self.local is None else self.local
        if local and self.bootstrap_servers:
            raise _error(f"{CLUSTER_KEY}bootstrap_servers",
                         f"{self.bootstrap_servers!r} is set but local = true: the project finds a local cluster's "
                         "address at run time; drop one of the two")
        if not local and not self.bootstrap_servers:
            raise _error(f"{CLUSTER_KEY}local", "false needs bootstrap_servers (the address of the brokers)")
        object.__setattr__(self, "local", local)

    def client_config(self) -> dict[str, str]:
        """The client settings with secrets revealed, for a confluent-kafka client and nothing else."""
        return {key: value.reveal() if isinstance(value, Secret) else value for key, value in self.client.items()}


def _flatten(table: Mapping[Any, Any], where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of a possibly nested table: TOML reads `sasl.password = ...` as nested tables."""
    for key, value in table.items():
        if not isinstance(key, str) or not key:
            raise _error(f"{where}.{key}", "a librdkafka setting name must be a non-empty string")
        if isinstance(value, Mapping):
            if depth >= MAX_CLIENT_DEPTH:
                raise _error(f"{where}.{key}", f"nested more than {MAX_CLIENT_DEPTH} tables deep: not a librdkafka setting")
            for sub_key, sub_value in _flatten(value, f"{where}.{key}", depth + 1):
                yield f"{key}.{sub_key}", sub_value
        else:
            yield key, value


def _client_settings(client: Any, where: str) -> dict[str, str | Secret]:
    """librdkafka settings as strings, credentials wrapped in Secret; errors never show a secret."""
    if not isinstance(client, Mapping):
        raise _error(where, f"expected a table of librdkafka settings, got {_show(client)}")
    checked: dict[str, str | Secret] = {}
    for key, value in _flatten(client, where):
        secret = SECRET_KEY_PATTERN.search(key) is not None
        shown = "****" if secret else _show(value)
        if key in checked:
            raise _error(f"{where}.{key}", "is set twice (as a dotted key and in a nested table)")
        if key == "bootstrap.servers":
            raise _error(f"{where}.{key}", "set the cluster's bootstrap_servers instead")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            value = str(value)
        elif not isinstance(value, (str, Secret)):
            raise _error(f"{where}.{key}", f"expected a string, a number or true/false, got {shown}")
        checked[key] = Secret(value) if secret and isinstance(value, str) else value
    return checked


@dataclass(frozen=True, kw_only=True)
class TopicSelection:
    """Which topics are audited: one include regex matches (re.search) and no exclude regex does."""

    include: tuple[str, ...] = setting(
        "regexes of topics to audit, any may match (searched anywhere in the name: anchor with ^...$)",
        DEFAULT_INCLUDE)
    exclude: tuple[str, ...] = setting(
        "regexes of topics never audited, even when included: Kafka's internal topics and the audit topic",
        DEFAULT_EXCLUDE)

    def __post_init__(self) -> None:
        _coerce_fields(self, "topics.")
        if not self.include:
            raise _error("topics.include", "[] is empty, so no topic would be audited")
        for key in ("include", "exclude"):
            object.__setattr__(self, f"_{key}", tuple(_compile(f"topics.{key}", getattr(self, key))))

    def matches(self, topic: str) -> bool:
        """Whether `topic` is audited."""
        return (any(p.search(topic) for p in self._include)  # type: ignore[attr-defined]
                and not any(p.search(topic) for p in self._exclude))  # type: ignore[attr-defined]


def _compile(key: str, patterns: tuple[str, ...]) -> Iterator[re.Pattern[str]]:
    for index, pattern in enumerate(patterns):
        try:
            yield re.compile(pattern)
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            raise _error(f"{key}[{index}]", f"{pattern!r} is not a valid regex: {exc}") from None


def _default_clusters() -> tuple[ClusterSettings, ...]:
    return tuple(ClusterSettings(name=name) for name in DEFAULT_CLUSTERS)


# -- alerts, SMTP and the UI (issue 6): [smtp], [alerts] with [[alerts.routes]], [ui] -------------------

SMTP_SECURITY = ("starttls", "ssl", "none")
DEFAULT_SMTP_HOST = "127.0.0.1"
DEFAULT_SMTP_PORT = 8025  # the demo's SMTP server on loopback; 587 (starttls) or 465 (ssl) for a real relay
DEFAULT_UI_HOST = "127.0.0.1"
DEFAULT_UI_PORT = 8050
DEFAULT_UI_URL = f"http://{DEFAULT_UI_HOST}:{DEFAULT_UI_PORT}"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
EMAIL_PATTERN = re.compile(r"^[^@\s,<>]+@[^@\s,<>]+$")


def _secret(obj: Any, name: str, key: str) -> None:
    """Wrap a str field in Secret in place; anything but a str or a Secret is an error that hides the value."""
    value = getattr(obj, name)
    if isinstance(value, str):
        object.__setattr__(obj, name, Secret(value))
    elif not isinstance(value, Secret):
        raise _error(key, f"expected a string, got a {type(value).__name__}")


def _port(key: str, port: int) -> None:
    if not 0 < port < 65536:
        raise _error(key, f"{port} is not a TCP port (1 to 65535)")


def _addresses(key: str, addresses: tuple[str, ...]) -> None:
    for index, address in enumerate(addresses):
        if not EMAIL_PATTERN.match(address):
            raise _error(f"{key}[{index}]", f"{_show(address)} is not an email address (name@domain)")


@dataclass(frozen=True, kw_only=True)
class SmtpSettings:
    """How alert emails leave: an SMTP server, its TLS mode and login. The password prints as ****."""

    host: str = setting("SMTP server host name", DEFAULT_SMTP_HOST)
    port: int = setting("SMTP server port: 587 for starttls, 465 for ssl, 25 or the demo's 8025 for none",
                        DEFAULT_SMTP_PORT)
    security: str = setting("starttls (upgrade a plain connection), ssl (TLS from the start) or none (loopback only "
                            "when a password is set)", "none")
    user: str = setting("login name; empty: no login", "")
    password: Secret = setting("login password, never logged or printed; or KAUDIT_SMTP_PASSWORD", factory=lambda: Secret(""),
                               shown='""')
    timeout_s: float = setting("seconds to wait for the SMTP server on each step", 10.0)
    retries: int = setting("attempts per run before an email is left pending for the next run", 3)
    backoff_s: float = setting("seconds before the second attempt; doubled before each further one", 1.0)

    def __post_init__(self) -> None:
        _coerce_fields(self, "smtp.")
        _secret(self, "password", "smtp.password")
        if not self.host.strip():
            raise _error("smtp.host", f"{self.host!r} is empty")
        _port("smtp.port", self.port)
        if self.security not in SMTP_SECURITY:
            raise _error("smtp.security", f"{self.security!r} is not one of {', '.join(SMTP_SECURITY)}")
        if self.password.reveal() and not self.user:
            raise _error("smtp.user", "'' is empty but a password is set")
        if self.password.reveal() and self.security == "none" and self.host not in LOOPBACK_HOSTS:
            raise _error("smtp.security", f"'none' would send the password in clear text to {self.host}; use "
                         "starttls or ssl")
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise _error("smtp.timeout_s", f"{self.timeout_s:g} must be a finite number of seconds > 0")
        if self.retries < 1:
            raise _error("smtp.retries", f"{self.retries} must be at least 1")
        if not math.isfinite(self.backoff_s) or self.backoff_s < 0:
            raise _error("smtp.backoff_s", f"{self.backoff_s:g} must be a finite number of seconds >= 0")


@dataclass(frozen=True, kw_only=True)
class AlertRoute:
    """Who hears about a topic: the first route whose regex matches `<origin_cluster>.<topic>` wins."""

    pattern: str = setting("regex searched in the logical topic name (`dc1.orders`); anchor with ^...$")
    recipients: tuple[str, ...] = setting("email addresses for the matching topics")

    def __post_init__(self) -> None:
        _coerce_fields(self, ROUTE_KEY)
        try:
            object.__setattr__(self, "_regex", re.compile(self.pattern))
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            raise _error(f"{ROUTE_KEY}pattern", f"{self.pattern!r} is not a valid regex: {exc}") from None
        if not self.recipients:
            raise _error(f"{ROUTE_KEY}recipients", "[] is empty")
        _addresses(f"{ROUTE_KEY}recipients", self.recipients)

    def matches(self, logical_topic: str) -> bool:
        return self._regex.search(logical_topic) is not None  # type: ignore[attr-defined]


ROUTE_KEY = "alerts.routes[]."


@dataclass(frozen=True, kw_only=True)
class AlertSettings:
    """When `kaudit alert` emails, from whom, to whom, and where its links point."""

    sender: str = setting("From: address of alert emails", "kaudit@localhost")
    default_recipients: tuple[str, ...] = setting("recipients of topics no route matches; empty: those alerts are "
                                                  "logged in the alerts table and not emailed", ())
    routes: tuple[AlertRoute, ...] = setting("[[alerts.routes]] tables {pattern, recipients}; first match wins",
                                             (), shown="[] (everything to default_recipients)")
    ui_url: str = setting("base URL of the audit UI, for the links in emails", DEFAULT_UI_URL)
    lag_minutes: float = setting("a lag alert fires when a tier's watermark is this many minutes behind now", 30.0)
    lookback_hours: float = setting("how far back (by window start) final windows are checked", 48.0)

    def __post_init__(self) -> None:
        _coerce_fields(self, "alerts.")
        if not EMAIL_PATTERN.match(self.sender):
            raise _error("alerts.sender", f"{_show(self.sender)} is not an email address (name@domain)")
        _addresses("alerts.default_recipients", self.default_recipients)
        if isinstance(self.routes, (str, bytes)) or not isinstance(self.routes, (list, tuple)):
            raise _error("alerts.routes", f"expected a list of tables ([[alerts.routes]]), got {_show(self.routes)}")
        routes = []
        for index, route in enumerate(self.routes):
            if isinstance(route, Mapping):
                try:
                    route = AlertRoute(**_table(AlertRoute, route, ROUTE_KEY))
                except ConfigError as exc:
                    raise _rekeyed(exc, ROUTE_KEY, f"alerts.routes[{index}].") from None
            if not isinstance(route, AlertRoute):
                raise _error(f"alerts.routes[{index}]", f"expected a table, got {_show(route)}")
            routes.append(route)
        object.__setattr__(self, "routes", tuple(routes))
        if not re.match(r"^https?://[^\s/]+", self.ui_url):
            raise _error("alerts.ui_url", f"{_show(self.ui_url)} is not an http(s) URL")
        for key in ("lag_minutes", "lookback_hours"):
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise _error(f"alerts.{key}", f"{value:g} must be a finite number > 0")

    def recipients(self, logical_topic: str) -> tuple[str, ...]:
        """The recipients of alerts about `logical_topic`: the first matching route's, else the default."""
        for route in self.routes:
            if route.matches(logical_topic):
                return route.recipients
        return self.default_recipients


@dataclass(frozen=True, kw_only=True)
class UiSettings:
    """Where `kaudit ui` listens, how often it rereads the tables, and its optional login."""

    host: str = setting("address the UI binds to; loopback unless exposed on purpose (0.0.0.0)", DEFAULT_UI_HOST)
    port: int = setting("TCP port of the UI", DEFAULT_UI_PORT)
    refresh_s: float = setting("seconds between rereads of the Delta tables (pages refresh on this interval too)", 30.0)
    days: int = setting("days of windows the UI loads and lets you pick from", 7)
    auth_user: str = setting("basic-auth user name; empty: no login (run it behind your own proxy, or on loopback)", "")
    auth_password: Secret = setting("basic-auth password, or KAUDIT_UI_AUTH_PASSWORD", factory=lambda: Secret(""),
                                    shown='""')

    def __post_init__(self) -> None:
        _coerce_fields(self, "ui.")
        _secret(self, "auth_password", "ui.auth_password")
        if not self.host.strip():
            raise _error("ui.host", f"{self.host!r} is empty (use 127.0.0.1, or 0.0.0.0 to expose)")
        _port("ui.port", self.port)
        if not math.isfinite(self.refresh_s) or self.refresh_s <= 0:
            raise _error("ui.refresh_s", f"{self.refresh_s:g} must be a finite number of seconds > 0")
        if not 0 < self.days <= 366:
            raise _error("ui.days", f"{self.days} is not between 1 and 366")
        if bool(self.auth_user) != bool(self.auth_password.reveal()):
            raise _error("ui.auth_password" if self.auth_user else "ui.auth_user",
                         "auth_user and auth_password are set together or not at all")


# Nested tables of Settings whose scalar keys KAUDIT_<SECTION>_<KEY> may set (KAUDIT_SMTP_PASSWORD).
SECTIONS: dict[str, type] = {"smtp": SmtpSettings, "alerts": AlertSettings, "ui": UiSettings}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The whole configuration. `Settings.default()` is the embedded local hub and spoke of the demo."""

    state_dir: Path = setting("root of every path the project writes: local clusters, Delta tables, logs; "
                              "relative to the config file's folder", DEFAULT_STATE_DIR)
    cache_dir: Path = setting("downloaded jars (filled by `make setup`), shared by every state_dir", DEFAULT_CACHE_DIR)
    lake_path: str = setting("root of the Delta tables: a local folder or a URI (s3a://bucket/audit, hdfs://...); "
                             "empty: <state_dir>/lake", "")
    audit_topic: str = setting("topic the audit records are written to, on every cluster", DEFAULT_AUDIT_TOPIC)
    window_minutes: int = setting(f"window size in minutes; must divide a day ({MINUTES_PER_DAY})", DEFAULT_WINDOW_MINUTES)
    grace_s: float = setting("seconds after a window's end before the window can be final for a tier", DEFAULT_GRACE_S)
    flush_interval_s: float = setting("seconds between audit record emissions of producers and counters",
                                      DEFAULT_FLUSH_INTERVAL_S)
    clusters: tuple[ClusterSettings, ...] = setting("the Kafka clusters, one [[clusters]] table each; names unique",
                                                    factory=_default_clusters, shown="dc1, dc2, aggregate (all local)")
    tiers: tuple[str, ...] = setting("counting points in data-flow order: producer, cluster names, lake", None,
                                     shown="producer, each cluster, lake")
    reference_tier: str = setting("tier whose counts are the expected ones; one of tiers", PRODUCER_TIER)
    naming: str = setting("replicated topic names: prefix (dc1.orders, as MirrorMaker 2) or identity", DEFAULT_NAMING)
    topics: TopicSelection = setting("which topics are audited ([topics] table)", factory=TopicSelection,
                                     shown="see topics.*")
    metrics_host: str = setting("address the Prometheus endpoints bind to; loopback unless exposed on purpose",
                                DEFAULT_METRICS_HOST)
    thresholds: Mapping[str, float] = setting(
        "completeness (percent) below which a final window is incomplete, per topic regex searched in the logical "
        "topic name (`dc1.orders`); the first match wins; unmatched topics need 100", factory=dict, hash=False)
    smtp: SmtpSettings = setting("how alert emails are sent ([smtp] table)", factory=SmtpSettings, shown="see smtp.*")
    alerts: AlertSettings = setting("when and to whom alerts go ([alerts] table)", factory=AlertSettings,
                                    shown="see alerts.*")
    ui: UiSettings = setting("the audit UI ([ui] table)", factory=UiSettings, shown="see ui.*")

    def __post_init__(self) -> None:
        _coerce_fields(self, "")
        if not isinstance(self.clusters, (list, tuple)):
            raise _error("clusters", f"expected a list of tables ([[clusters]]), got {_show(self.clusters)}")
        for index, cluster in enumerate(self.clusters):
            if not isinstance(cluster, ClusterSettings):
                raise _error(f"clusters[{index}]", f"expected a cluster table, got {_show(cluster)}")
        object.__setattr__(self, "clusters", tuple(self.clusters))
        if not isinstance(self.topics, TopicSelection):
            raise _error("topics", f"expected a table, got {_show(self.topics)}")
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise _error(name, f"expected a table, got {_show(getattr(self, name))}")
        if self.tiers is None:
            object.__setattr__(self, "tiers", (PRODUCER_TIER, *self.cluster_names, LAKE_TIER))
        _validate(self)

    @classmethod
    def default(cls) -> Settings:
        """The built-in default: local clusters dc1, dc2 and aggregate; paths still relative."""
        return cls()

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(cluster.name for cluster in self.clusters)

    def cluster(self, name: str) -> ClusterSettings:
        """The cluster called `name`; a ConfigError listing the known names if there is none."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise ConfigError(f"cluster {name!r} is not configured (known: {', '.join(self.cluster_names)})")

    @property
    def lake_root(self) -> str:
        """Where the Delta tables live: `lake_path`, else `<state_dir>/lake`."""
        return self.lake_path or str(Path(self.state_dir) / "lake")

    def threshold_patterns(self) -> list[tuple[re.Pattern[str], float]]:
        """(compiled regex, percent) in the order of the configuration."""
        return [(re.compile(pattern), float(percent)) for pattern, percent in self.thresholds.items()]

    def naming_policy(self):
        """The configured topic naming policy (audit.contract.naming)."""
        from audit.contract.naming import naming_policy

        return naming_policy(self.naming, self.cluster_names)

    def is_audit_topic(self, cluster: str, topic: str) -> bool:
        """Whether `topic` on `cluster` is an audit topic, here or replicated from elsewhere."""
        return self.naming_policy().origin(cluster, topic).topic == self.audit_topic

    def redacted(self) -> dict[str, Any]:
        """A plain, JSON-ready dict of every key, secrets masked: what `kaudit config show` prints."""
        return _plain(self)


def _validate(settings: Settings) -> None:
    """The rules between values; each error names the key and the value."""
    reason = validate_window_minutes(settings.window_minutes)
    if reason:
        raise _error("window_minutes", reason)
    if not math.isfinite(settings.grace_s):
        raise _error("grace_s", f"{settings.grace_s:g} is not a finite number of seconds")
    if settings.grace_s < 0:
        raise _error("grace_s", f"{settings.grace_s:g} is negative; it must be >= 0 seconds")
    if not math.isfinite(settings.flush_interval_s) or settings.flush_interval_s <= 0:
        raise _error("flush_interval_s", f"{settings.flush_interval_s:g} must be a finite number of seconds > 0")
    if not is_topic_name(settings.audit_topic):
        raise _error("audit_topic", f"{settings.audit_topic!r} is not a legal Kafka topic name "
                     "(1 to 249 letters, digits, '.', '_', '-')")
    if not settings.metrics_host.strip():
        raise _error("metrics_host", f"{settings.metrics_host!r} is empty (use 127.0.0.1, or 0.0.0.0 to expose)")
    if not HOST_PATTERN.match(settings.metrics_host):
        raise _error("metrics_host", f"{_show(settings.metrics_host)} is not a host name or address "
                     "(use 127.0.0.1, or 0.0.0.0 to expose)")
    if settings.naming not in NAMING_POLICIES:
        raise _error("naming", f"{settings.naming!r} is not a naming policy ({' or '.join(NAMING_POLICIES)})")
    if not settings.clusters:
        raise _error("clusters", "[] is empty: at least one cluster is needed")
    seen: dict[str, tuple[int, str]] = {}
    for index, name in enumerate(settings.cluster_names):
        folded = _env_name(name)
        if folded in seen:
            first, other = seen[folded]
            if other == name:
                raise _error(f"clusters[{index}].name", f"{name!r} is used twice (also clusters[{first}])")
            raise _error(f"clusters[{index}].name", f"{name!r} clashes with {other!r} (clusters[{first}]): names must "
                         f"differ in more than case and '-' versus '_', both are KAUDIT_CLUSTER_{folded}_*")
        seen[folded] = (index, name)
    if not settings.tiers:
        raise _error("tiers", "[] is empty (leave the key out for: producer, each cluster, lake)")
    known = {*RESERVED_TIERS, *settings.cluster_names}
    for index, tier in enumerate(settings.tiers):
        if tier not in known:
            raise _error(f"tiers[{index}]", f"{tier!r} is neither producer, lake nor a configured cluster "
                         f"({', '.join(settings.cluster_names)})")
        if tier in settings.tiers[:index]:
            raise _error(f"tiers[{index}]", f"{tier!r} is named twice")
    _validate_thresholds(settings.thresholds)
    if settings.reference_tier not in settings.tiers:
        raise _error("reference_tier", f"{settings.reference_tier!r} is not one of the tiers {list(settings.tiers)}")


def _validate_thresholds(thresholds: Any) -> None:
    if not isinstance(thresholds, Mapping):
        raise _error("thresholds", f"expected a table of regex = percent, got {_show(thresholds)}")
    for pattern, percent in thresholds.items():
        key = f"thresholds.{pattern}"
        list(_compile(key, (pattern,)))
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
            raise _error(key, f"{_show(percent)} is not a percentage between 0 and 100")


def _plain(value: Any) -> Any:
    if isinstance(value, Secret):
        return str(value) if value.reveal() else ""  # an empty secret hides nothing and must load back as empty
    if isinstance(value, (Settings, ClusterSettings, TopicSelection, AlertRoute, *SECTIONS.values())):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _shown_default(f: Field) -> str:
    if "shown" in f.metadata:
        return f.metadata["shown"]
    if f.default is not MISSING:
        return json.dumps(_plain(f.default))
    if f.default_factory is not MISSING:
        return json.dumps(_plain(f.default_factory()))
    return "(required)"


def describe() -> list[tuple[str, str, str]]:
    """(key, default, description) for every configuration key, as `kaudit config keys` prints them."""
    return [
        (prefix + f.name, _shown_default(f), f.metadata["doc"])
        for prefix, cls in (("", Settings), ("topics.", TopicSelection), (CLUSTER_KEY, ClusterSettings),
                            *((f"{name}.", cls) for name, cls in SECTIONS.items()), (ROUTE_KEY, AlertRoute))
        for f in fields(cls)
    ]


# -- loading ------------------------------------------------------------------------------------


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `path`, else $KAUDIT_CONFIG, else the built-in default; then KAUDIT_* overrides.

    `env` defaults to os.environ. The paths of the result are absolute, `~` expanded.
    """
    env = os.environ if env is None else env
    from_env = path is None or path == ""
    chosen = (env.get(CONFIG_ENV) or None) if from_env else path
    if chosen is None:
        raw: dict[str, Any] = {}
        base, origin = Path.cwd(), None
    else:
        file = Path(chosen)
        raw = _read_toml(file, CONFIG_ENV if from_env else None)
        base, origin = file.absolute().parent, str(file)
    sources: dict[str, str] = {}
    try:
        overlaid, sources = _env_overlay(raw, env)
        settings = from_dict(overlaid)
        return replace(
            settings,
            state_dir=_resolve_dir("state_dir", settings.state_dir, Path.cwd() if "state_dir" in sources else base),
            cache_dir=_resolve_dir("cache_dir", settings.cache_dir, Path.cwd() if "cache_dir" in sources else base),
        )
    except ConfigError as exc:
        # Keyed errors are about a value: say whether it came from a variable or from the file.
        # Unkeyed ones (a bad KAUDIT_ variable) already name their variable.
        key = getattr(exc, "key", None)
        where = (sources.get(key) or origin) if key else None
        raise (ConfigError(f"{where}: {exc}") if where else exc) from None


def _read_toml(path: Path, variable: str | None) -> dict[str, Any]:
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
    found = re.search(r"[0-9_]{4000,}", text)
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


def _resolve_dir(key: str, value: Path, base: Path) -> Path:
    try:
        expanded = value.expanduser()
    except RuntimeError:
        raise _error(key, f"{_show(value)}: '~' cannot be expanded (no such user, or no home directory)") from None
    return expanded if expanded.is_absolute() else base / expanded


def from_dict(raw: Mapping[str, Any]) -> Settings:
    """Settings from a parsed TOML document, with every key and type checked."""
    values = _table(Settings, raw, "")
    if "clusters" in values:
        values["clusters"] = tuple(_cluster(item, index) for index, item in enumerate(_cluster_tables(values["clusters"])))
    if "topics" in values:
        values["topics"] = TopicSelection(**_table(TopicSelection, values["topics"], "topics."))
    for name, cls in SECTIONS.items():
        if name in values:
            values[name] = cls(**_table(cls, values[name], f"{name}."))
    return Settings(**values)


def _table(cls: type, raw: Any, where: str) -> dict[str, Any]:
    """`raw` as keyword arguments of `cls`: a table, no unknown key, no required key missing."""
    if not isinstance(raw, Mapping):
        raise _error(where.rstrip(".") or "config", f"expected a table, got {_show(raw)}")
    known = [f.name for f in fields(cls)]
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise _error(f"{where}{key}", f"unknown key ({hint})")
    for f in fields(cls):
        if f.default is MISSING and f.default_factory is MISSING and f.name not in raw:
            raise _error(f"{where}{f.name}", "missing (required)")
    return dict(raw)


def _cluster_tables(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _error("clusters", f"expected a list of tables ([[clusters]]), got {_show(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _error(f"clusters[{index}]", f"expected a table, got {_show(item)}")
    return list(value)


def _cluster(item: Mapping[str, Any], index: int) -> ClusterSettings:
    where = f"clusters[{index}]."
    try:
        return ClusterSettings(**_table(ClusterSettings, item, CLUSTER_KEY))
    except ConfigError as exc:
        raise _rekeyed(exc, CLUSTER_KEY, where) from None


# -- environment overrides ----------------------------------------------------------------------


def _env_keys() -> dict[str, Any]:
    """Top-level keys that KAUDIT_<KEY> may set, with their types."""
    hints = _hints(Settings)
    return {f.name: hints[f.name] for f in fields(Settings) if hints[f.name] in _ENV_KINDS}


def _env_overlay(raw: Mapping[str, Any], env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The parsed file with KAUDIT_* values laid over it, and which variable set which key."""
    overlaid = dict(raw)
    sources: dict[str, str] = {}
    keys = _env_keys()
    for variable in sorted(env):
        if not variable.startswith(ENV_PREFIX) or variable in OTHER_ENV:
            continue
        text = env[variable]
        key = variable[len(ENV_PREFIX):].lower()
        if key in keys:
            overlaid[key] = _parse_env(variable, text, key, keys[key])
            sources[key] = variable
        elif _section_env(key):
            name, sub_key, kind = _section_env(key)
            section = overlaid.get(name, {})
            if not isinstance(section, Mapping):
                raise _error(name, f"expected a table, got {_show(section)}")
            overlaid[name] = {**section, sub_key: _parse_env(variable, text, f"{name}.{sub_key}", kind)}
            sources[f"{name}.{sub_key}"] = variable
        elif key.startswith("cluster_"):
            sources[_cluster_env(overlaid, variable, variable[len(ENV_PREFIX) + len("CLUSTER_"):], text)] = variable
        else:
            raise ConfigError(f"{variable}: not a configuration variable ({_env_hint(key, keys)})")
    return overlaid, sources


def _section_env(key: str) -> tuple[str, str, Any] | None:
    """(section, key, type) that KAUDIT_<SECTION>_<KEY> sets (secrets as str), or None."""
    for name, cls in SECTIONS.items():
        if key.startswith(f"{name}_"):
            sub_key = key[len(name) + 1:]
            kind = {f.name: _hints(cls)[f.name] for f in fields(cls)}.get(sub_key)
            kind = str if kind is Secret else kind
            if kind in _ENV_KINDS:
                return name, sub_key, kind
    return None


def _env_hint(key: str, keys: Mapping[str, Any]) -> str:
    if key.startswith("clusters_"):
        return f"did you mean {ENV_PREFIX}CLUSTER_{key[len('clusters_'):].upper()}?"
    if key.split("_")[0] in ("clusters", "topics", "tiers"):
        return f"{key.split('_')[0]} can be set in the config file only"
    names = [f"{ENV_PREFIX}{name.upper()}" for name in keys] + sorted(OTHER_ENV)
    close = difflib.get_close_matches(f"{ENV_PREFIX}{key.upper()}", names, n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]}?"
    return ("known: " + ", ".join(names) + f", {ENV_PREFIX}CLUSTER_<NAME>_BOOTSTRAP_SERVERS, "
            f"{ENV_PREFIX}CLUSTER_<NAME>_LOCAL, {ENV_PREFIX}CLUSTER_<NAME>_CLIENT__<KEY>")


def _parse_env(variable: str, text: str, key: str, kind: Any) -> Any:
    """An environment value as the type of its key; errors name the variable."""
    if kind is int:
        if not ENV_INT_PATTERN.match(text):
            raise ConfigError(f"{variable}: {_show(text)} is not an integer ({key})")
        if len(text) > 100:  # int() refuses over 4300 digits with a ValueError, not a ConfigError
            raise ConfigError(f"{variable}: {_show(text)} has more than 100 digits ({key})")
        return int(text)
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


def _cluster_setting(setting: str) -> tuple[str, str] | None:
    """What KAUDIT_CLUSTER_<NAME>_<SETTING> sets: ("bootstrap_servers", ""), ("local", ""),
    ("client", librdkafka key) or None if nothing."""
    lowered = setting.lower()
    if lowered in ("bootstrap_servers", "local"):
        return lowered, ""
    if lowered.startswith("client__"):
        client_key = lowered[len("client__"):].replace("__", ".")
        if CLIENT_KEY_PATTERN.match(client_key):
            return "client", client_key
    return None


def _cluster_env(overlaid: dict[str, Any], variable: str, rest: str, text: str) -> str:
    """Apply KAUDIT_CLUSTER_<rest>=text to the cluster tables; returns the key path it set."""
    tables = _cluster_tables(overlaid["clusters"]) if "clusters" in overlaid else [{"name": n} for n in DEFAULT_CLUSTERS]
    clusters = [dict(table) for table in tables]
    matches, near = [], []
    for index, cluster in enumerate(clusters):
        name = cluster.get("name")
        head = f"{_env_name(name)}_" if isinstance(name, str) else None
        if head and rest.upper().startswith(head):
            setting = rest[len(head):]
            target = _cluster_setting(setting)
            (matches if target else near).append((index, setting, target))
    names = ", ".join(str(cluster.get("name")) for cluster in clusters)
    if not matches and near:
        raise ConfigError(f"{variable}: {near[0][1].lower()!r} is not a cluster setting "
                          "(BOOTSTRAP_SERVERS, LOCAL or CLIENT__<KEY> with dots as __)")
    if not matches:
        raise ConfigError(f"{variable}: no configured cluster matches (known: {names})")
    if len(matches) > 1:
        both = " and ".join(repr(clusters[index]["name"]) for index, _setting, _target in matches)
        raise ConfigError(f"{variable}: matches clusters {both}; rename one of them")
    index, _setting, (target, client_key) = matches[0]
    cluster = clusters[index]
    where = f"clusters[{index}]"
    if target == "client":
        client = cluster.get("client", {})
        if not isinstance(client, Mapping):
            raise _error(f"{where}.client", f"expected a table of librdkafka settings, got {_show(client)}")
        cluster["client"] = {**dict(_flatten(client, f"{where}.client")), client_key: text}
        key = f"{where}.client.{client_key}"
    elif target == "local":
        cluster["local"] = _parse_env(variable, text, f"{where}.local", bool)
        key = f"{where}.local"
    else:
        cluster["bootstrap_servers"] = text
        key = f"{where}.bootstrap_servers"
    overlaid["clusters"] = clusters
    return key
