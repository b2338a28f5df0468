"""Client configuration for a configured cluster, and the admin calls every part shares."""
from __future__ import annotations

import logging
from typing import Mapping

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from audit.errors import KafkaClientError

log = logging.getLogger(__name__)

DEFAULT_ADMIN_TIMEOUT_S = 30.0


def bootstrap_servers(settings, cluster_name: str) -> str:
    """The configured address, or for an embedded cluster the one its launcher recorded."""
    cluster = settings.cluster(cluster_name)
    if cluster.bootstrap_servers:
        return cluster.bootstrap_servers
    from audit.local_cluster import LocalCluster

    return LocalCluster(cluster_name, state_dir=settings.state_dir, cache_dir=settings.cache_dir).bootstrap_servers


def client_config(settings, cluster_name: str, overrides: Mapping[str, object] | None = None) -> dict:
    """librdkafka settings for one cluster: address, security settings, then `overrides` (which win)."""
    config = {"bootstrap.servers": bootstrap_servers(settings, cluster_name)}
    config.update(settings.cluster(cluster_name).client_config())
    config.update(overrides or {})
    return config


# librdkafka settings that mean the same to the Java client, under the same name.
SHARED_CLIENT_KEYS = ("security.protocol", "sasl.mechanism")


def java_client_options(settings, cluster_name: str) -> dict[str, str]:
    """The cluster's client settings for a Java Kafka client (Spark's Kafka source): without the
    `kafka.` prefix Spark wants. librdkafka-only settings are left out."""
    config = client_config(settings, cluster_name)
    options = {"bootstrap.servers": str(config["bootstrap.servers"])}
    options.update({key: str(config[key]) for key in SHARED_CLIENT_KEYS if key in config})
    return options


def ensure_topics(
    config: Mapping[str, object],
    partitions: Mapping[str, int],
    *,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names created. Existing ones are left alone."""
    admin = AdminClient(dict(config))
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [
        NewTopic(name, num_partitions=count, replication_factor=-1, config=dict((topic_configs or {}).get(name, {})))
        for name, count in partitions.items()
        if name not in existing
    ]
    if not wanted:
        return []
    created = []
    for name, future in admin.create_topics(wanted, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            # Another process created it between our listing and our request: that is what we wanted.
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise KafkaClientError(f"creating topic {name!r} failed: {error.str()}", code=error.code()) from exc
    log.info("topics created", extra={"topics": ",".join(created)})
    return created


def list_offsets(admin: AdminClient, partitions: list[tuple[str, int]], spec: OffsetSpec, *,
                 timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S) -> dict[tuple[str, int], int]:
    """Offsets of many partitions in one ListOffsets round trip (a consumer's watermark query costs a
    round trip per partition). Read-committed: `latest` is the last stable offset. A partition whose
    answer is an error is left out and logged."""
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s)
    offsets = {}
    for tp, future in futures.items():
        try:
            offsets[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException as exc:  # a partition that just moved: left out this time
            log.warning("offset unknown", extra={"topic": tp.topic, "partition": tp.partition, "error": exc.args[0].str()})
    return offsets


def group_caught_up(consumer: Consumer, admin: AdminClient, topics: list[str], *,
                    timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S) -> bool:
    """True when the consumer's group has committed up to the end of EVERY partition of `topics`:
    judged from the broker, whatever this member's own assignment is."""
    metadata = consumer.list_topics(timeout=timeout_s).topics
    partitions = [(topic, p) for topic in topics if topic in metadata for p in metadata[topic].partitions]
    ends = list_offsets(admin, partitions, OffsetSpec.latest(), timeout_s=timeout_s)
    if len(ends) != len(partitions):
        return False
    committed = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    return all(max(tp.offset, 0) >= ends[(tp.topic, tp.partition)] for tp in committed)
