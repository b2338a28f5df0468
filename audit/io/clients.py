"""Client configuration for a configured cluster (librdkafka, and the Java client for Spark), the admin calls
every part shares, and which client errors a later try may not meet."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from audit.contract.errors import KafkaClientError
from audit.io.local_state import recorded_bootstrap_servers

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)

DEFAULT_ADMIN_TIMEOUT_S = 30.0
LATE_ANSWER_S = 5.0  # past its request timeout, how long an admin answer is still waited for


def bootstrap_servers(settings: Settings, cluster_name: str) -> str:
    """The configured address, or for an embedded cluster the one its launcher recorded."""
    cluster = settings.cluster(cluster_name)
    if cluster.bootstrap_servers:
        return cluster.bootstrap_servers
    return recorded_bootstrap_servers(settings.state_dir, cluster_name)


def client_config(settings: Settings, cluster_name: str, overrides: Mapping[str, Any] | None = None) -> dict:
    """librdkafka settings for one cluster: address, security settings, then `overrides` (which win)."""
    config = {"bootstrap.servers": bootstrap_servers(settings, cluster_name)}
    config.update(settings.cluster(cluster_name).client_config())
    config.update(overrides or {})
    return config


def ensure_topics(
    config: Mapping[str, Any],
    partitions: Mapping[str, int],
    *,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names created. Existing ones are left alone.
    A broker away (killed, restarting) is asked again until `timeout_s`: a hop that opens while its broker
    restarts must not end on the transport error."""
    admin = AdminClient(dict(config))
    created: list[str] = []
    retried(lambda: _create_missing(admin, partitions, topic_configs or {}, timeout_s, created), timeout_s=timeout_s)
    if created:
        log.info("topics created", extra={"topics": ",".join(created)})
    return created


def _create_missing(
    admin: AdminClient,
    partitions: Mapping[str, int],
    topic_configs: Mapping[str, Mapping[str, str]],
    timeout_s: float,
    created: list[str],
) -> None:
    """One try of `ensure_topics`, adding the names it created to `created`; a broker away raises KafkaException."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [
        NewTopic(name, num_partitions=count, replication_factor=-1, config=dict(topic_configs.get(name, {})))
        for name, count in partitions.items()
        if name not in existing
    ]
    if not wanted:
        return
    for name, future in admin.create_topics(wanted, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            # Another process created it between our listing and our request: that is what we wanted.
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if is_transient(error):
                raise
            raise KafkaClientError(f"creating topic {name!r} failed: {error.str()}", code=error.code()) from exc


def retried(call: Callable[[], Any], *, timeout_s: float, codes: frozenset | None = None, pause_s: float = 0.5) -> Any:
    """call(), asked again while it raises a transient KafkaException (`is_transient`: the broker away, or one of
    `codes`), until `timeout_s`; any other error, or the last one, is raised."""
    give_up_at = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not is_transient(exc.args[0], codes or BROKER_AWAY) or time.monotonic() >= give_up_at:
                raise
            time.sleep(pause_s)


def topic_configs(
    admin: AdminClient, topics: list[str], *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> dict[str, dict[str, str]]:
    """Every setting of each of `topics` as in force (the broker's defaults included), in one DescribeConfigs
    request, asked again while its broker is away (`retried`). A topic the broker does not know is left out."""
    if not topics:
        return {}

    def describe() -> dict[str, dict[str, str]]:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics]
        found = {}
        for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
            try:
                entries = future.result(timeout_s + LATE_ANSWER_S)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                continue
            found[resource.name] = {key: entry.value for key, entry in entries.items() if entry.value is not None}
        return found

    return retried(describe, timeout_s=timeout_s)


def list_offsets(
    admin: AdminClient,
    partitions: list[tuple[str, int]],
    spec: OffsetSpec,
    *,
    timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S,
    errors: dict[tuple[str, int], KafkaError] | None = None,
    committed: bool = True,
) -> dict[tuple[str, int], int]:
    """Offsets of many partitions in one ListOffsets round trip (a consumer's watermark query costs a
    round trip per partition). `committed`: `latest` is the last stable offset (a read_committed reader's
    end), else the high watermark. A partition whose answer is an error is left out and logged (and its
    error put in `errors`, when given)."""
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions},
        isolation_level=IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED,
        request_timeout=timeout_s,
    )
    offsets = {}
    give_up_at = time.monotonic() + timeout_s + LATE_ANSWER_S
    for tp, future in futures.items():
        key = (tp.topic, tp.partition)
        try:
            # Bounded here as well as by the request timeout: no admin answer may hold a service's step for ever.
            offset = future.result(max(0.0, give_up_at - time.monotonic())).offset
            # A broker just killed can answer with no error and offset -1001: taken as an end offset it would
            # make anything look caught up.
            problem = None if offset >= 0 else "no offset in the answer"
        except KafkaException as exc:  # a partition that just moved: left out this time
            if errors is not None:
                errors[key] = exc.args[0]
            problem = exc.args[0].str()
        except concurrent.futures.TimeoutError:
            problem = "no answer"
        if problem is None:
            offsets[key] = offset
        else:
            log.warning("offset unknown", extra={"topic": tp.topic, "partition": tp.partition, "error": problem})
    return offsets


# What a client call says while its broker is away (down, restarting); librdkafka flags none of them retriable.
BROKER_AWAY = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})
# Answers of a partition whose leader is being elected or moved (librdkafka does not flag them all retriable).
_LEADERSHIP_MOVING = BROKER_AWAY | {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def is_transient(error: KafkaError, codes: frozenset = BROKER_AWAY) -> bool:
    """An error a later try may not meet: not fatal, and retriable or one of `codes`."""
    return not error.fatal() and (error.retriable() or error.code() in codes)


def watermarks(
    consumer: Consumer, topic: str, partition: int, *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> tuple[int, int]:
    """(low, high) offsets of one partition, retried while its leadership is moving: a topic
    created a moment ago or a broker restart answers "not leader" for a while, not for ever."""
    return retried(
        lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False),
        timeout_s=timeout_s,
        codes=_LEADERSHIP_MOVING,
        pause_s=0.2,
    )


ADMIN_RENEW_EVERY_S = 15.0


# Answers that only say the client's cached leader epochs are older than the broker's (after a restart).
STALE_EPOCH_ERRORS = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH})


class Admin:
    """An AdminClient for a long-running service, renewed after an offsets query left partitions
    unanswered: across a broker restart librdkafka's cached leader epochs can go stale ("Leader epoch
    is older than broker epoch") and every later query of the same client fails, withholding the status
    (and so the watermark) of every partition. A fresh client reads fresh metadata.
    An answer that says exactly that is asked again at once of a fresh client: it is the broker back,
    and a counter that got no end offset would postpone its first commit after the restart. Other
    gaps renew at most once per `renew_every_s`: while a broker is simply away every query is
    incomplete, and a client per status interval only churns connections."""

    def __init__(self, config: Mapping[str, Any], *, renew_every_s: float = ADMIN_RENEW_EVERY_S) -> None:
        self._config = dict(config)
        self.client = AdminClient(self._config)
        self.renew_every_s = renew_every_s
        self._renewed_at = time.monotonic()

    def list_offsets(
        self,
        partitions: list[tuple[str, int]],
        spec: OffsetSpec,
        *,
        timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S,
        committed: bool = True,
    ) -> dict[tuple[str, int], int]:
        errors: dict[tuple[str, int], KafkaError] = {}
        offsets = list_offsets(self.client, partitions, spec, timeout_s=timeout_s, errors=errors, committed=committed)
        stale = [key for key, error in errors.items() if error.code() in STALE_EPOCH_ERRORS]
        if stale:
            self._renew()
            offsets.update(list_offsets(self.client, stale, spec, timeout_s=timeout_s, committed=committed))
        elif len(offsets) < len(set(partitions)) and time.monotonic() - self._renewed_at >= self.renew_every_s:
            self._renew()
        return offsets

    def _renew(self) -> None:
        self.client = AdminClient(self._config)
        self._renewed_at = time.monotonic()


# -- failing fast on bad credentials --------------------------------------------------------------

# librdkafka errors that no retry will cure: the credentials or the certificates are wrong.
_AUTH_ERRORS = {
    KafkaError._AUTHENTICATION: "authentication failed",
    KafkaError._SSL: "TLS authentication failed",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication failed",
}


def check_credentials(config: Mapping[str, Any], cluster: str, *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S) -> None:
    """Reach `cluster` once before any work, so bad credentials or certificates fail at once (librdkafka
    would retry them forever): a KafkaClientError naming the cluster and saying "authentication",
    without any secret. An unreachable cluster returns after at most `timeout_s`; the caller's own
    calls then report it as they always have."""
    failures: list[KafkaError] = []
    admin_config: dict[str, Any] = {**config, "error_cb": failures.append, "log_level": 2}
    admin = AdminClient(admin_config)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic()))).brokers:
                return
        except KafkaException:
            pass
        admin.poll(0)  # serves error_cb
        for error in failures:
            if error.code() in _AUTH_ERRORS:
                raise KafkaClientError(
                    f"cluster {cluster}: {_AUTH_ERRORS[error.code()]} at {config.get('bootstrap.servers')} "
                    f"({error.str()}); check its client settings (security.protocol, sasl.mechanism, sasl.username, "
                    "sasl.password, ssl.ca.location)",
                    code=error.code(),
                )
        if any(error.code() == KafkaError._ALL_BROKERS_DOWN for error in failures):
            return


# -- the Java Kafka client (Spark's Kafka source) ---------------------------------------------------

# librdkafka settings that mean the same in the Java client, under the same name.
JAVA_SAME_KEYS = frozenset(
    {
        "client.id",
        "request.timeout.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "metadata.max.age.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
        "ssl.key.password",
        "ssl.cipher.suites",
    }
)
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Read here, and so not "unmappable".
_HANDLED_KEYS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.endpoint.identification.algorithm",
}


def java_client_options(settings: Settings, cluster_name: str) -> dict[str, str]:
    """The cluster's librdkafka settings as Java Kafka client properties (for Spark's Kafka source:
    prefix each key with `kafka.`). The result holds the password inside `sasl.jaas.config`: hand it to
    the client, never log it. A setting with no Java equivalent is a ConfigError naming its key."""
    index = settings.cluster_names.index(settings.cluster(cluster_name).name)
    where = f"clusters[{index}].client."
    client = settings.cluster(cluster_name).client_config()
    unknown = sorted(key for key in client if key not in _HANDLED_KEYS and key not in JAVA_SAME_KEYS)
    if unknown:
        from audit.contract.errors import ConfigError

        raise ConfigError(
            f"{where}{unknown[0]}: no Java Kafka client equivalent is known; remove it or map it "
            "in audit/io/clients.py java_client_options"
        )
    options = {"bootstrap.servers": bootstrap_servers(settings, cluster_name)}
    options.update({key: client[key] for key in JAVA_SAME_KEYS if key in client})
    protocol = client.get("security.protocol", "plaintext").upper()
    if protocol not in SECURITY_PROTOCOLS:
        _java_error(where, "security.protocol", f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    options["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        options.update(_java_sasl(client, where))
    if protocol in ("SSL", "SASL_SSL"):
        options.update(_java_ssl(client, where))
    return options


# Spark's Kafka source reads each partition up to an end it knows. After a partition's last record its
# consumer's next fetch finds nothing, and the broker holds that fetch for `fetch.max.wait.ms` (500 ms by
# default) before the task can end: most of a small read's time. A broker with data answers at once, so the
# short wait costs a big read nothing.
SPARK_FETCH_MAX_WAIT_MS = 20


def spark_kafka_options(settings: Settings, cluster_name: str) -> dict[str, str]:
    """The options of Spark's Kafka source for reading `cluster_name`: its client settings
    (`java_client_options`, each `kafka.`-prefixed) and a short fetch wait (see SPARK_FETCH_MAX_WAIT_MS)."""
    options = {"kafka.fetch.max.wait.ms": str(SPARK_FETCH_MAX_WAIT_MS)}
    options.update({f"kafka.{key}": value for key, value in java_client_options(settings, cluster_name).items()})
    return options


def _java_error(where: str, key: str, text: str) -> None:
    from audit.contract.errors import ConfigError

    raise ConfigError(f"{where}{key}: {text}")


def _java_sasl(client: Mapping[str, str], where: str) -> dict[str, str]:
    mechanism = client.get("sasl.mechanism") or client.get("sasl.mechanisms") or "GSSAPI"
    key = "sasl.mechanism" if "sasl.mechanism" in client else "sasl.mechanisms"
    if mechanism.upper() not in JAAS_MODULES:
        _java_error(where, key, f"{mechanism!r} cannot be mapped to the Java client (known: {', '.join(JAAS_MODULES)})")
    for needed in ("sasl.username", "sasl.password"):
        if not client.get(needed):
            _java_error(where, needed, f"missing: {mechanism} needs sasl.username and sasl.password")
    username, password = (_jaas_quote(client[k]) for k in ("sasl.username", "sasl.password"))
    return {
        "sasl.mechanism": mechanism.upper(),
        "sasl.jaas.config": f'{JAAS_MODULES[mechanism.upper()]} required username="{username}" password="{password}";',
    }


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _java_ssl(client: Mapping[str, str], where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    if "ssl.ca.location" in client:
        options.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": client["ssl.ca.location"]})
    elif "ssl.ca.pem" in client:
        options.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": client["ssl.ca.pem"]})
    cert_file, key_file = client.get("ssl.certificate.location"), client.get("ssl.key.location")
    if bool(cert_file) != bool(key_file):
        _java_error(
            where,
            "ssl.key.location" if cert_file else "ssl.certificate.location",
            "missing: a client certificate needs both ssl.certificate.location and ssl.key.location",
        )
    if cert_file and cert_file == key_file:  # one PEM file with the key and the chain: a Java PEM keystore as is
        options.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": cert_file})
    elif cert_file:
        options.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": _read_pem(where, "ssl.certificate.location", cert_file),
                "ssl.keystore.key": _read_pem(where, "ssl.key.location", str(key_file)),
            }
        )
    elif "ssl.certificate.pem" in client or "ssl.key.pem" in client:
        if not ("ssl.certificate.pem" in client and "ssl.key.pem" in client):
            _java_error(
                where, "ssl.key.pem", "missing: a client certificate needs both ssl.certificate.pem and ssl.key.pem"
            )
        options.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": client["ssl.certificate.pem"],
                "ssl.keystore.key": client["ssl.key.pem"],
            }
        )
    algorithm = client.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.lower() not in ("https", "none"):
            _java_error(where, "ssl.endpoint.identification.algorithm", f"{algorithm!r} is not https or none")
        options["ssl.endpoint.identification.algorithm"] = "https" if algorithm.lower() == "https" else ""
    return options


def _read_pem(where: str, key: str, path: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except OSError as exc:
        _java_error(where, key, f"{path!r} cannot be read: {exc.strerror or exc}")
        raise  # unreachable: _java_error raises
