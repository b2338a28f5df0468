"""[[clusters]]: one Kafka cluster each, its address and its librdkafka client settings; `Secret`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    GetCoreSchemaHandler,
    SecretStr,
    StrictBool,
    StrictStr,
    model_validator,
)
from pydantic_core import core_schema

from audit.contract.names import CLUSTER_NAME_PATTERN, CONTROL_CHARACTERS, RESERVED_TIERS
from audit.settings.errors import SECRET_KEY_PATTERN, invalid, show
from audit.settings.fields import SettingsModel, setting

DEFAULT_CLUSTERS = ("dc1", "dc2", "aggregate")
# Deeper than this, a client table is a mistake, not a librdkafka setting (and would exhaust the stack).
MAX_CLIENT_DEPTH = 16


class Secret(SecretStr):
    """A credential that never prints: repr and str give ****; `reveal()` gives it to a client."""

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret holds a str, not {type(value).__name__}")
        super().__init__(value)

    def reveal(self) -> str:
        return self.get_secret_value()

    def _display(self) -> str:
        return "****"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: type[Any], handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # A str becomes a Secret; `kaudit config show` prints "****", or "" for an empty one (it hides
        # nothing, and must load back as empty).
        return core_schema.union_schema(
            [
                core_schema.is_instance_schema(cls),
                core_schema.no_info_after_validator_function(cls, core_schema.str_schema(strict=True)),
            ],
            custom_error_type="string_type",
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda secret: "****" if secret.reveal() else "", when_used="json"
            ),
        )


def env_name(cluster_name: str) -> str:
    """How a cluster name appears in environment variables: DC1, EAST_1 for east-1."""
    return cluster_name.upper().replace("-", "_")


def _cluster_name(name: str) -> str:
    if not CLUSTER_NAME_PATTERN.match(name):
        raise invalid(f"{show(name)} is not a name (a letter or digit, then up to 63 letters, digits, '_' or '-')")
    if name in RESERVED_TIERS:
        raise invalid(f"{name!r} is reserved for a tier")
    return name


def _bootstrap_servers(servers: str) -> str:
    if servers and not servers.strip():
        raise invalid(f"{servers!r} is blank (empty means local)")
    if CONTROL_CHARACTERS.search(servers):
        raise invalid(f"{show(servers)} contains a control character")
    return servers


def flatten(table: Mapping[Any, Any], at: tuple[str, ...] = (), depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of a possibly nested table: TOML reads `sasl.password = ...` as nested tables.

    `at` is the dotted path so far, for errors.
    """
    for key, value in table.items():
        here = ".".join((*at, str(key)))
        if not isinstance(key, str) or not key:
            raise invalid("a librdkafka setting name must be a non-empty string", here)
        if isinstance(value, Mapping):
            if depth >= MAX_CLIENT_DEPTH:
                raise invalid(f"nested more than {MAX_CLIENT_DEPTH} tables deep: not a librdkafka setting", here)
            for sub_key, sub_value in flatten(value, (*at, key), depth + 1):
                yield f"{key}.{sub_key}", sub_value
        else:
            yield key, value


def client_settings(client: Any) -> dict[str, Any]:
    """librdkafka settings as strings, credentials wrapped in Secret; errors never show a secret."""
    if not isinstance(client, Mapping):
        raise invalid(f"expected a table of librdkafka settings, got {show(client)}")
    checked: dict[str, str | Secret] = {}
    for key, value in flatten(client):
        secret = SECRET_KEY_PATTERN.search(key) is not None
        if key in checked:
            raise invalid("is set twice (as a dotted key and in a nested table)", key)
        if key == "bootstrap.servers":
            raise invalid("set the cluster's bootstrap_servers instead", key)
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            value = str(value)
        elif not isinstance(value, (str, Secret)):
            raise invalid(f"expected a string, a number or true/false, got {'****' if secret else show(value)}", key)
        checked[key] = Secret(value) if secret and isinstance(value, str) else value
    return checked


class ClusterSettings(SettingsModel):
    """One Kafka cluster: its name, its address (none for an embedded local one), its client settings."""

    key_prefix = "clusters[]."

    name: Annotated[StrictStr, AfterValidator(_cluster_name)] = setting(
        "cluster name: used in tiers, tables, metrics and KAUDIT_CLUSTER_<NAME>_* variables; never a hostname"
    )
    bootstrap_servers: Annotated[StrictStr, AfterValidator(_bootstrap_servers)] = setting(
        "host:port list of the brokers; empty: an embedded local cluster started by the project, whose "
        "address is found at run time",
        "",
    )
    client: Annotated[dict[str, StrictStr | Secret], BeforeValidator(client_settings)] = setting(
        "librdkafka client settings (security.protocol, sasl.*, ssl.*, ...); values of keys holding "
        "'password' or 'secret', or ending in '.key.pem', print as ****",
        factory=dict,
    )
    local: StrictBool = setting(
        "whether the project starts this cluster itself, on loopback",
        factory=lambda values: not values.get("bootstrap_servers"),
        shown="true when bootstrap_servers is empty",
    )

    @model_validator(mode="after")
    def _local_or_remote(self) -> ClusterSettings:
        if self.local and self.bootstrap_servers:
            raise invalid(
                f"{self.bootstrap_servers!r} is set but local = true: the project finds a local cluster's "
                "address at run time; drop one of the two",
                "bootstrap_servers",
            )
        if not self.local and not self.bootstrap_servers:
            raise invalid("false needs bootstrap_servers (the address of the brokers)", "local")
        return self

    def client_config(self) -> dict[str, str]:
        """The client settings with secrets revealed, for a confluent-kafka client and nothing else."""
        return {key: value.reveal() if isinstance(value, Secret) else value for key, value in self.client.items()}


def default_clusters() -> tuple[ClusterSettings, ...]:
    return tuple(ClusterSettings(name=name) for name in DEFAULT_CLUSTERS)
