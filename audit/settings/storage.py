"""[storage] and [spark]: how the lake's object store is reached, and where the Spark jobs run.

Every key may stay empty: the AWS conventions fill what the file leaves out (`AWS_ENDPOINT_URL`,
`AWS_REGION`, `AWS_ACCESS_KEY_ID`, ...), and with no key at all the standard credential chain of each
engine is used. audit.io.lake resolves them once and translates them for Spark (S3A) and `deltalake`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, StrictBool, StrictFloat, StrictStr

from audit.settings.clusters import Secret
from audit.settings.errors import invalid, show
from audit.settings.fields import SettingsModel, setting

DEFAULT_SPARK_MASTER = "local[2]"
DEFAULT_LEASE_TTL_S = 60.0
SPARK_MASTER_PATTERN = re.compile(r"\A(local(\[(\d+|\*)(,\d+)?\])?|(spark|yarn|k8s|mesos)(://\S+)?|yarn)\Z")
SPARK_CONF_KEY = re.compile(r"\A(spark|hadoop)\.[A-Za-z0-9_.-]+\Z")


def _endpoint(url: str) -> str:
    if url and not re.match(r"\Ahttps?://[^\s/]+/?\Z", url):
        raise invalid(f"{show(url)} is not an http(s) endpoint such as http://127.0.0.1:8333")
    return url.rstrip("/")


def _lease_ttl_s(seconds: float) -> float:
    if not math.isfinite(seconds) or seconds < 1:
        raise invalid(f"{seconds:g} must be a number of seconds >= 1")
    return seconds


class StorageSettings(SettingsModel):
    """How the lake's object store is reached when `lake_path` is an s3:// or s3a:// URI."""

    key_prefix = "storage."

    endpoint: Annotated[StrictStr, AfterValidator(_endpoint)] = setting(
        "S3 endpoint URL for an S3-compatible store (http://127.0.0.1:8333); empty: AWS_ENDPOINT_URL, else AWS's "
        "own. A custom endpoint implies path-style addressing",
        "",
    )
    region: StrictStr = setting("bucket region; empty: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1", "")
    path_style: StrictBool = setting(
        "path-style addressing (http://host/bucket/key); on by itself with a custom endpoint", False
    )
    access_key_id: StrictStr = setting(
        "access key id; empty: AWS_ACCESS_KEY_ID, else the standard credential chain (profile, instance role)", ""
    )
    secret_access_key: Secret = setting(
        "secret access key, never printed; or KAUDIT_STORAGE_SECRET_ACCESS_KEY, or AWS_SECRET_ACCESS_KEY",
        factory=lambda: Secret(""),
        shown='""',
    )
    session_token: Secret = setting(
        "session token of temporary credentials; or AWS_SESSION_TOKEN", factory=lambda: Secret(""), shown='""'
    )
    verify_tls: StrictBool = setting("verify the endpoint's TLS certificate (off only for a test store)", True)
    lease_ttl_s: Annotated[StrictFloat, AfterValidator(_lease_ttl_s)] = setting(
        "seconds a writer's lease on the lake lasts without renewal before another writer may take it over",
        DEFAULT_LEASE_TTL_S,
    )


def _spark_master(master: str) -> str:
    if not SPARK_MASTER_PATTERN.match(master):
        raise invalid(f"{show(master)} is not a Spark master (local[2], spark://host:7077, yarn, k8s://...)")
    return master


def _spark_conf(conf: dict[str, str]) -> dict[str, str]:
    for key in conf:
        if not SPARK_CONF_KEY.match(key):
            raise invalid(f"{show(key)} is not a Spark setting (spark.* or hadoop.*)", key)
    return conf


class SparkSettings(SettingsModel):
    """Where `kaudit lake` and `kaudit reconcile` run their Spark session when not under spark-submit."""

    key_prefix = "spark."

    master: Annotated[StrictStr, AfterValidator(_spark_master)] = setting(
        "Spark master: local[2], spark://host:7077, ...; or KAUDIT_SPARK_MASTER. spark-submit's own wins",
        DEFAULT_SPARK_MASTER,
    )
    conf: Annotated[dict[StrictStr, StrictStr], AfterValidator(_spark_conf)] = setting(
        'extra Spark settings ({ "spark.executor.memory" = "4g" }); they win over kafka-audit\'s own',
        factory=dict,
    )
