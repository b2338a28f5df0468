"""Client configuration for a configured cluster, and the admin calls every part shares."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
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
    A broker away (killed, restarting) is asked again until `timeout_s`: its transport error ended a replicator
    that was opening (2026-12-02)."""
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
            # Seen under load right after the broker was killed: an answer with no error and offset -1001.
            # Taken as an end offset it would make anything look caught up.
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


def read_ranges(
    config: Mapping[str, Any],
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    *,
    stall_s: float,
    what: str,
    to_eof: bool = False,
) -> list:
    """Every committed message of each partition's offset range [start, end), `end` at most the partition's last
    stable offset (`list_offsets`). Offsets without a message (transaction markers, aborted records, records
    deleted by retention) are passed over, as Spark's Kafka source with failOnDataLoss=false does. Raises a
    KafkaClientError naming `what` and the partitions not read to their end when no message comes for `stall_s`.

    `to_eof`: a partition also ends where its reader first finds no more committed messages (its last stable
    offset then, below the high watermark while a transaction is open), for readers of what is committed now."""
    wanted = {key: span for key, span in ranges.items() if span[1] > span[0]}
    consumer = Consumer(
        {
            **config,
            "group.id": "kaudit-range-reader",  # assigned, never committed: the group is not joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,  # an idle partition's fetch returns at once, as in the books' Spark reads
        }
    )
    messages: list = []
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in wanted.items()])
        unread = dict(wanted)
        stalled_at = time.monotonic() + stall_s
        while unread:
            batch = consumer.consume(10_000, timeout=0.5)
            if batch:
                stalled_at = time.monotonic() + stall_s
            elif time.monotonic() > stalled_at:
                missing = ", ".join(
                    f"{t}[{p}] from {consumer.position([TopicPartition(t, p)])[0].offset}" for t, p in unread
                )
                raise KafkaClientError(f"{what}: no message for {stall_s:.0f} s before the end of {missing}")
            for message in batch:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    if error.fatal():
                        raise KafkaException(error)
                    log.warning("read error, retried", extra={"what": what, "error": error.str()})
                    continue
                key, offset = (message.topic(), message.partition()), message.offset()
                if key not in unread or offset is None:
                    continue
                end = unread[key][1]
                if error is None and offset < end:
                    messages.append(message)
                if offset + (error is None) >= end or (error is not None and to_eof):  # EOF: the next offset
                    del unread[key]
        return messages
    finally:
        consumer.close()


COMMITTED_ATTEMPT_S = 5.0


def committed_offsets(
    consumer: Consumer,
    partitions: list[TopicPartition],
    *,
    timeout_s: float,
    attempt_s: float = COMMITTED_ATTEMPT_S,
    config: Mapping[str, Any] | None = None,
) -> list[TopicPartition]:
    """The group's committed offsets of `partitions`, asked anew every `attempt_s` until `timeout_s`.

    One request sent while a restarted broker was loading its group coordinator went unanswered for its
    whole 30 s timeout, and the error, raised inside a rebalance callback, ended the service. A fresh
    request after a few seconds is answered once the coordinator is back.

    `config`, the consumer's own, lets the error tell an absent coordinator from offsets a transaction
    holds (see `_held_by_a_transaction`).

    A consumer being closed gets none (`[]`): librdkafka serves an assignment that arrives during `close()`, whose
    callback then asks, but no partition of it will be read. Every request failed at once for 30 s (a counter run
    to caught up whose group had caught up before its assignment came), then the run failed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.committed(partitions, timeout=max(0.1, min(attempt_s, deadline - time.monotonic())))
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._DESTROY:
                log.info("committed offsets not asked: the consumer is closing", extra={"partitions": len(partitions)})
                return []
            if time.monotonic() >= deadline:
                if config is not None and _held_by_a_transaction(config, partitions):
                    raise KafkaClientError(
                        f"the committed offsets of group {config.get('group.id')} for {len(partitions)} partitions "
                        f"are held by a transaction that has not completed in {timeout_s:.0f} s. If it stays so past "
                        "its transaction timeout, it is a hanging transaction (seen after a broker restart that "
                        "dropped the transaction's markers): find it with `kafka-transactions.sh --bootstrap-server "
                        f"{config.get('bootstrap.servers')} find-hanging --broker-id <id>` and end it with "
                        "`kafka-transactions.sh ... abort`"
                    ) from exc
                raise KafkaClientError(
                    f"the group coordinator did not answer committed offsets for {len(partitions)} partitions "
                    f"in {timeout_s:.0f} s: {exc.args[0].str()}"
                ) from exc
            log.warning("committed offsets not answered; asking again", extra={"error": exc.args[0].str()})


def _held_by_a_transaction(config: Mapping[str, Any], partitions: list[TopicPartition]) -> bool:
    """True when the group's offsets are answered to a read_uncommitted consumer only. A read_committed
    consumer asks for stable offsets (KIP-447), and while a transaction holds offsets of the group the
    coordinator answers UNSTABLE_OFFSET_COMMIT, which librdkafka retries until its timeout."""
    if config.get("isolation.level", "read_committed") != "read_committed":
        return False
    probe = Consumer({**config, "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        probe.committed(partitions, timeout=COMMITTED_ATTEMPT_S)
        return True
    except KafkaException:
        return False
    finally:
        probe.close()


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


def bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """call(), but never waiting more than `timeout_s` for it to return.

    For a transactional producer's calls: librdkafka waits on its own main thread there, without a time
    limit in begin_transaction, and after a broker restart it was seen never to answer, in
    begin_transaction and in send_offsets_to_transaction despite its timeout (librdkafka #5511: a
    coordinator cached after its broker was decommissioned): the counter hung for good (soak, invariant
    8). Past `timeout_s` this raises a KafkaException (_TIMED_OUT, fatal) naming `what`, so the caller
    replaces the producer; the stuck call stays behind in a daemon thread, which keeps the old producer
    referenced: destroying it would wait on the same thread."""
    done = threading.Event()
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=what, daemon=True).start()
    if not done.wait(timeout_s):
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"{what} did not return within {timeout_s:.0f} s", fatal=True)
        )
    if failure:
        raise failure[0]
    return outcome[0]


def abort_written(producer: Producer, timeout_s: float) -> None:
    """Abort the open transaction once every message produced in it is acknowledged.

    librdkafka (#4849, open) may send the abort's EndTxn before the coordinator has handled the
    AddPartitionsToTxn of the transaction's first messages; the coordinator, seeing no transaction yet,
    refuses with INVALID_TXN_STATE, fatal: the producer is lost (CI, a test's aborted batch). A message is
    acknowledged only once its partition is in the transaction, so after the flush the abort is safe;
    the acknowledged messages are aborted like the rest (a read_committed reader never sees them)."""
    producer.flush(timeout_s)
    producer.abort_transaction(timeout_s)


def is_stuck(error: KafkaError) -> bool:
    """The error `bounded` raises: the producer is stuck inside librdkafka and must be left alone."""
    return error.code() == KafkaError._TIMED_OUT and error.fatal()


# Another live producer with our transactional id: renewing would fence it in turn, for ever.
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
# Fatal errors of a transactional producer that a new producer with the same transactional id would not cure:
# fenced, or the client may not use the id.
FENCED_OR_REFUSED = FENCED | {
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def is_lost(error: KafkaError) -> bool:
    """A transactional producer to replace with a new one, whose init aborts what it left open: stuck
    (`is_stuck`), or in a fatal state a new one cures (INVALID_TXN_STATE from librdkafka #4849, say)."""
    return is_stuck(error) or (error.fatal() and error.code() not in FENCED_OR_REFUSED)


ADMIN_RENEW_EVERY_S = 15.0


# Answers that only say the client's cached leader epochs are older than the broker's (after a restart).
STALE_EPOCH_ERRORS = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH})


class Admin:
    """An AdminClient for a long-running service, renewed after an offsets query left partitions
    unanswered: across a broker restart librdkafka's cached leader epochs can go stale ("Leader epoch
    is older than broker epoch") and every later query of the same client fails, which withheld the
    status (and so the watermark) of every partition for minutes. A fresh client reads fresh metadata.
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


def group_lag(
    consumer: Consumer, admin: Admin, topics: list[str], *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> dict[tuple[str, int], int] | None:
    """Per partition of `topics` that the consumer's group has not committed up to its end, how many
    offsets it is behind: judged from the broker, whatever this member's own assignment is. None when
    an end or the committed offsets are not known (a coordinator that is slow or moving)."""
    metadata = consumer.list_topics(timeout=timeout_s).topics
    partitions = [(topic, p) for topic in topics if topic in metadata for p in metadata[topic].partitions]
    ends = admin.list_offsets(partitions, OffsetSpec.latest(), timeout_s=timeout_s)
    if len(ends) != len(partitions):  # `Admin.list_offsets` has logged which
        return None
    try:
        committed = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    except KafkaException as exc:
        log.warning("committed offsets unknown", extra={"group_topics": len(topics), "error": exc.args[0].str()})
        return None
    behind = {(tp.topic, tp.partition): ends[(tp.topic, tp.partition)] - max(tp.offset, 0) for tp in committed}
    return {key: lag for key, lag in behind.items() if lag > 0}


def group_caught_up(
    consumer: Consumer, admin: Admin, topics: list[str], *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S
) -> bool:
    """True when the consumer's group has committed up to the end of EVERY partition of `topics`."""
    return group_lag(consumer, admin, topics, timeout_s=timeout_s) == {}


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
# default) before the task can end: 1.4 of the 1.8 s a read of 80 messages in 6 partitions took (0.45 s
# with 20 ms). A broker with data answers at once, so the short wait costs a big read nothing.
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
