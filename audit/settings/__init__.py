"""The one configuration of kafka-audit: a TOML file, environment overrides, a built-in default.

Where it comes from, first found wins: `load_settings(path)`, else the file named by $KAUDIT_CONFIG,
else the built-in default (three embedded local clusters: dc1, dc2 and the aggregate they feed).
`audit/settings/default.toml` is that default written out, with a comment per key; `describe()` lists
every key for `kaudit config keys`. Environment overrides (KAUDIT_<KEY>, KAUDIT_<TABLE>_<KEY>,
KAUDIT_CLUSTER_<NAME>_...) are applied on top of the file: see `environment`.

Each table is a frozen pydantic model with strict types, defaults and descriptions; `Settings` is a
pydantic-settings BaseSettings fed by two sources, the file and the environment; `Secret` is a SecretStr
that prints ****. Kept by hand, as pydantic-settings cannot express it: errors reformatted to one line,
`file: key: message (did you mean ...)`, naming the variable when a value came from one (`errors`); the
KAUDIT_* source (`environment`), because an unknown KAUDIT_ variable is an error, KAUDIT_CLUSTER_<NAME>_...
addresses an item of the [[clusters]] list, and values parse more strictly than pydantic's lax mode
("5.0" is no integer); TOML reading, for file:line:column errors; relative paths resolved against the
config file's folder; librdkafka client tables flattened to dotted keys. `settings.replace(...)` copies
and validates (pydantic's model_copy does not validate).
"""

from __future__ import annotations

from audit.settings.alerts import SMTP_SECURITY, AlertRoute, AlertSettings, SmtpSettings
from audit.settings.clusters import DEFAULT_CLUSTERS, ClusterSettings, Secret
from audit.settings.environment import CONFIG_ENV, ENV_PREFIX, OTHER_ENV
from audit.settings.errors import SECRET_KEY_PATTERN
from audit.settings.flows import FlowSettings
from audit.settings.loading import EXAMPLE_CONFIG, describe, from_dict, load_settings
from audit.settings.root import (
    DEFAULT_CACHE_DIR,
    DEFAULT_FLUSH_INTERVAL_S,
    DEFAULT_GRACE_S,
    DEFAULT_METRICS_HOST,
    DEFAULT_STATE_DIR,
    SECTIONS,
    Settings,
)
from audit.settings.topics import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, DEFAULT_NAMING, NAMING_POLICIES, TopicSelection
from audit.settings.ui import UiSettings

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_CLUSTERS",
    "DEFAULT_EXCLUDE",
    "DEFAULT_FLUSH_INTERVAL_S",
    "DEFAULT_GRACE_S",
    "DEFAULT_INCLUDE",
    "DEFAULT_METRICS_HOST",
    "DEFAULT_NAMING",
    "DEFAULT_STATE_DIR",
    "ENV_PREFIX",
    "EXAMPLE_CONFIG",
    "NAMING_POLICIES",
    "OTHER_ENV",
    "SECRET_KEY_PATTERN",
    "SECTIONS",
    "SMTP_SECURITY",
    "AlertRoute",
    "AlertSettings",
    "ClusterSettings",
    "FlowSettings",
    "Secret",
    "Settings",
    "SmtpSettings",
    "TopicSelection",
    "UiSettings",
    "describe",
    "from_dict",
    "load_settings",
]
