"""The one configuration of kafka-audit: a TOML file, environment overrides, a built-in default.

Where it comes from, first found wins: `load_settings(path)`, else the file named by $KAUDIT_CONFIG,
else the built-in default (three embedded local clusters: dc1, dc2 and the aggregate they feed).
`audit/settings/default.toml` is that default written out, with a comment per key; `describe()` lists
every key for `kaudit config keys`. Environment overrides (KAUDIT_<KEY>, KAUDIT_<TABLE>_<KEY>,
KAUDIT_CLUSTER_<NAME>_...) are applied on top of the file: see `environment`.

Each table is a frozen pydantic model (`Settings` a pydantic-settings BaseSettings whose sources are the
file and the environment); pydantic checks types strictly (TOML's `true` is not 1), fills defaults and
holds the descriptions, and `Secret` is a pydantic SecretStr that prints ****. Kept by hand, because
pydantic-settings cannot express it: errors reformatted to one line, `file: key: message (did you mean
...)`, naming the variable when the value came from one (`errors`); the environment source, since an
unknown KAUDIT_ variable is an error, per-cluster names like KAUDIT_CLUSTER_<NAME>_CLIENT__<KEY> address
an item of the [[clusters]] list, and values are parsed more strictly than pydantic's lax mode; the TOML
reading, for file:line:column errors and hostile files; relative paths resolved against the config
file's folder (the environment's and the default's against the working directory); and librdkafka
client tables flattened to dotted keys with credentials wrapped in Secret. `settings.replace(...)` is a
copy validated like a new object (pydantic's model_copy checks nothing).
"""
from __future__ import annotations

from audit.settings.alerts import SMTP_SECURITY, AlertRoute, AlertSettings, SmtpSettings
from audit.settings.clusters import DEFAULT_CLUSTERS, ClusterSettings, Secret
from audit.settings.environment import CONFIG_ENV, ENV_PREFIX, OTHER_ENV
from audit.settings.errors import SECRET_KEY_PATTERN
from audit.settings.loading import EXAMPLE_CONFIG, describe, from_dict, load_settings
from audit.settings.root import (DEFAULT_CACHE_DIR, DEFAULT_FLUSH_INTERVAL_S, DEFAULT_GRACE_S, DEFAULT_METRICS_HOST,
                                 DEFAULT_STATE_DIR, SECTIONS, Settings)
from audit.settings.topics import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, DEFAULT_NAMING, NAMING_POLICIES, TopicSelection
from audit.settings.ui import UiSettings

__all__ = [
    "CONFIG_ENV", "DEFAULT_CACHE_DIR", "DEFAULT_CLUSTERS", "DEFAULT_EXCLUDE", "DEFAULT_FLUSH_INTERVAL_S",
    "DEFAULT_GRACE_S", "DEFAULT_INCLUDE", "DEFAULT_METRICS_HOST", "DEFAULT_NAMING", "DEFAULT_STATE_DIR",
    "ENV_PREFIX", "EXAMPLE_CONFIG", "NAMING_POLICIES", "OTHER_ENV", "SECRET_KEY_PATTERN", "SECTIONS",
    "SMTP_SECURITY", "AlertRoute", "AlertSettings", "ClusterSettings", "Secret", "Settings", "SmtpSettings",
    "TopicSelection", "UiSettings", "describe", "from_dict", "load_settings",
]
