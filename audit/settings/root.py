"""Settings: the whole configuration, its top-level keys and the rules between them."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from audit.contract.errors import ConfigError
from audit.contract.flows import Flow
from audit.contract.names import DEFAULT_AUDIT_TOPIC, LAKE_TIER, PRODUCER_TIER, is_topic_name
from audit.contract.naming import is_audit_topic, naming_policy
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, MINUTES_PER_DAY, validate_window_minutes
from audit.settings.alerts import AlertSettings, SmtpSettings
from audit.settings.clusters import ClusterSettings, default_clusters, env_name
from audit.settings.errors import config_error, from_validation_error, invalid, show
from audit.settings.fields import (
    ConfigPath,
    FrozenValues,
    Positive,
    PositiveSeconds,
    SettingsModel,
    Strings,
    setting,
)
from audit.settings.flows import FlowSettings, check_flows, default_flows
from audit.settings.maintenance import MaintenanceSettings, check_retention
from audit.settings.storage import SparkSettings, StorageSettings
from audit.settings.topics import (
    DEFAULT_NAMING,
    TopicSelection,
    check_naming,
    check_thresholds,
    check_tiers,
    compiled_thresholds,
)
from audit.settings.ui import UiSettings

DEFAULT_STATE_DIR = Path(".kaudit")
DEFAULT_CACHE_DIR = Path("~/.cache/kafka-audit")
DEFAULT_GRACE_S = 300.0
DEFAULT_FLUSH_INTERVAL_S = 10.0
# Hours a reader of the audit topics (a replicator, the reconciliation) may be down without losing a record.
DEFAULT_MAX_OUTAGE_HOURS = 24.0
DEFAULT_METRICS_HOST = "127.0.0.1"
HOST_PATTERN = re.compile(r"\A[A-Za-z0-9.:_-]{1,253}\Z")  # a host name, IPv4 or IPv6 address
# Tables of Settings whose scalar keys KAUDIT_<SECTION>_<KEY> may set (KAUDIT_SMTP_PASSWORD).
SECTIONS: dict[str, type[SettingsModel]] = {
    "smtp": SmtpSettings,
    "alerts": AlertSettings,
    "ui": UiSettings,
    "storage": StorageSettings,
    "spark": SparkSettings,
    "maintenance": MaintenanceSettings,
}
# What Settings(...) takes already built, as before: keyword arguments are values, not TOML tables.
_BUILT: dict[str, type[SettingsModel]] = {"topics": TopicSelection, **SECTIONS}


def _window_minutes(minutes: int) -> int:
    reason = validate_window_minutes(minutes)
    if reason:
        raise invalid(reason)
    return minutes


def _grace_s(seconds: float) -> float:
    if not math.isfinite(seconds):
        raise invalid(f"{seconds:g} is not a finite number of seconds")
    if seconds < 0:
        raise invalid(f"{seconds:g} is negative; it must be >= 0 seconds")
    return seconds


def _audit_topic(topic: str) -> str:
    if not is_topic_name(topic):
        raise invalid(f"{topic!r} is not a legal Kafka topic name (1 to 249 letters, digits, '.', '_', '-')")
    return topic


def _metrics_host(host: str) -> str:
    if not host.strip():
        raise invalid(f"{host!r} is empty (use 127.0.0.1, or 0.0.0.0 to expose)")
    if not HOST_PATTERN.match(host):
        raise invalid(f"{show(host)} is not a host name or address (use 127.0.0.1, or 0.0.0.0 to expose)")
    return host


def _unique_names(clusters: tuple[ClusterSettings, ...]) -> tuple[ClusterSettings, ...]:
    """At least one cluster; names that differ in more than case and '-' versus '_' (their variables would not)."""
    if not clusters:
        raise invalid("[] is empty: at least one cluster is needed")
    seen: dict[str, tuple[int, str]] = {}
    for index, cluster in enumerate(clusters):
        folded = env_name(cluster.name)
        if folded in seen:
            first, other = seen[folded]
            if other == cluster.name:
                raise invalid(f"{cluster.name!r} is used twice (also clusters[{first}])", index, "name")
            raise invalid(
                f"{cluster.name!r} clashes with {other!r} (clusters[{first}]): names must differ in more "
                f"than case and '-' versus '_', both are KAUDIT_CLUSTER_{folded}_*",
                index,
                "name",
            )
        seen[folded] = (index, cluster.name)
    return clusters


def _default_tiers(values: dict[str, Any]) -> tuple[str, ...]:
    return (PRODUCER_TIER, *(cluster.name for cluster in values.get("clusters", ())), LAKE_TIER)


class Settings(FrozenValues, BaseSettings):
    """The whole configuration. `Settings.default()` is the embedded local hub and spoke of the demo."""

    # Settings(...) reads nothing but its arguments; load_settings adds the file and KAUDIT_* sources.
    model_config = SettingsConfigDict(frozen=True, extra="forbid", case_sensitive=True, validate_default=False)

    state_dir: ConfigPath = setting(
        "root of every path the project writes: local clusters, Delta tables, logs; "
        "relative to the config file's folder",
        DEFAULT_STATE_DIR,
    )
    cache_dir: ConfigPath = setting(
        "downloaded jars (filled by `make setup`), shared by every state_dir", DEFAULT_CACHE_DIR
    )
    lake_path: StrictStr = setting(
        "root of the Delta tables: a local folder or an object store URI (s3://bucket/audit or s3a://..., reached "
        "as [storage] says); empty: <state_dir>/lake",
        "",
    )
    audit_topic: Annotated[StrictStr, AfterValidator(_audit_topic)] = setting(
        "topic the audit records are written to, on every cluster", DEFAULT_AUDIT_TOPIC
    )
    max_outage_hours: Positive = setting(
        "longest outage of a reader of the audit topics (replicator, reconciliation) to survive: every audit topic "
        "must keep its records alerts.lookback_hours plus this long, which the counters and replicators check at "
        "start",
        DEFAULT_MAX_OUTAGE_HOURS,
    )
    window_minutes: Annotated[StrictInt, AfterValidator(_window_minutes)] = setting(
        f"window size in minutes; must divide a day ({MINUTES_PER_DAY})", DEFAULT_WINDOW_MINUTES
    )
    grace_s: Annotated[StrictFloat, AfterValidator(_grace_s)] = setting(
        "seconds after a window's end before the window can be final for a tier", DEFAULT_GRACE_S
    )
    flush_interval_s: PositiveSeconds = setting(
        "seconds between audit record emissions of producers and counters", DEFAULT_FLUSH_INTERVAL_S
    )
    clusters: Annotated[tuple[ClusterSettings, ...], AfterValidator(_unique_names)] = setting(
        "the Kafka clusters, one [[clusters]] table each; names unique",
        factory=default_clusters,
        shown="dc1, dc2, aggregate (all local)",
    )
    tiers: Strings = setting(
        "counting points in data-flow order: producer, cluster names, lake",
        factory=_default_tiers,
        shown="producer, each cluster, lake",
    )
    reference_tier: StrictStr = setting("tier whose counts are the expected ones; one of tiers", PRODUCER_TIER)
    naming: Annotated[StrictStr, AfterValidator(check_naming)] = setting(
        "replicated topic names: prefix (dc1.orders, as MirrorMaker 2) or identity", DEFAULT_NAMING
    )
    mirror_exactly_once: StrictBool = setting(
        "replicators (kaudit mirror) write to the target in Kafka transactions, source offsets included: no "
        "duplicates for read_committed readers; --exactly-once/--no-exactly-once override it",
        False,
    )
    flows: tuple[FlowSettings, ...] = setting(
        "where data must go, one [[flows]] table each {from, to, topics}: a topic counted at `from` is expected at "
        "`to` from its first window, so a hop that never started is lagging, never complete; none: paths are what "
        "was observed",
        factory=default_flows,
        shown="dc1 and dc2 to aggregate, aggregate to lake (with the default clusters; else none)",
    )
    topics: TopicSelection = setting(
        "which topics are audited ([topics] table)", factory=TopicSelection, shown="see topics.*"
    )
    metrics_host: Annotated[StrictStr, AfterValidator(_metrics_host)] = setting(
        "address the Prometheus endpoints bind to; loopback unless exposed on purpose", DEFAULT_METRICS_HOST
    )
    thresholds: Annotated[dict[StrictStr, StrictFloat], AfterValidator(check_thresholds)] = setting(
        "completeness (percent) below which a final window is incomplete, per topic regex searched in the logical "
        "topic name (`dc1.orders`); the first match wins; unmatched topics need 100",
        factory=dict,
    )
    smtp: SmtpSettings = setting("how alert emails are sent ([smtp] table)", factory=SmtpSettings, shown="see smtp.*")
    alerts: AlertSettings = setting(
        "when and to whom alerts go ([alerts] table)", factory=AlertSettings, shown="see alerts.*"
    )
    ui: UiSettings = setting("the audit UI ([ui] table)", factory=UiSettings, shown="see ui.*")
    storage: StorageSettings = setting(
        "how the lake's object store is reached ([storage] table)", factory=StorageSettings, shown="see storage.*"
    )
    spark: SparkSettings = setting(
        "where the Spark jobs run ([spark] table)", factory=SparkSettings, shown="see spark.*"
    )
    maintenance: MaintenanceSettings = setting(
        "compaction, VACUUM, log and row retention of the Delta tables ([maintenance] table)",
        factory=MaintenanceSettings,
        shown="see maintenance.*",
    )

    def __init__(self, /, **values: Any) -> None:
        if "_build_sources" not in values:
            _check_built(values)
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise from_validation_error(exc, Settings) from None

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # as SettingsModel's

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)

    @model_validator(mode="after")
    def _tiers(self) -> Settings:
        check_tiers(self.tiers, self.cluster_names, self.reference_tier)
        check_flows(self.flows, self.cluster_names, self.tiers)
        return self

    @model_validator(mode="after")
    def _retention(self) -> Settings:
        check_retention(self.maintenance, self.ui, self.alerts)
        return self

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

    def declared_flows(self) -> tuple[Flow, ...]:
        """The [[flows]] as the books apply them (audit/contract/flows.py)."""
        return tuple(flow.flow() for flow in self.flows)

    def threshold_patterns(self) -> list[tuple[re.Pattern[str], float]]:
        """(compiled regex, percent) in the order of the configuration."""
        return compiled_thresholds(self.thresholds)

    def naming_policy(self):
        """The configured topic naming policy (audit.contract.naming)."""
        return naming_policy(self.naming, self.cluster_names)

    def is_audit_topic(self, cluster: str, topic: str) -> bool:
        """Whether `topic` on `cluster` is an audit topic, here or replicated from elsewhere."""
        return is_audit_topic(self.naming_policy(), cluster, topic, self.audit_topic)

    def redacted(self) -> dict[str, Any]:
        """A plain, JSON-ready dict of every key, secrets masked: what `kaudit config show` prints."""
        return self.model_dump(mode="json")


def _check_built(values: dict[str, Any]) -> None:
    """Direct construction takes built tables (ClusterSettings, TopicSelection, ...), as before, not dicts."""
    clusters = values.get("clusters", ())
    if isinstance(clusters, (list, tuple)):
        for index, cluster in enumerate(clusters):
            if not isinstance(cluster, ClusterSettings):
                raise config_error(f"clusters[{index}]", f"expected a cluster table, got {show(cluster)}")
    for index, flow in enumerate(values.get("flows", ())):
        if not isinstance(flow, FlowSettings):
            raise config_error(f"flows[{index}]", f"expected a flow table, got {show(flow)}")
    for name, cls in _BUILT.items():
        if name in values and not isinstance(values[name], cls):
            raise config_error(name, f"expected a table, got {show(values[name])}")
