"""Target topics the replicator creates: the source's partition count and the settings that matter."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from audit.contract.errors import KafkaClientError

log = logging.getLogger(__name__)

# Topic settings copied to a target topic the replicator creates; the rest stay the target's defaults.
COPIED_TOPIC_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "message.timestamp.type",
    "max.message.bytes",
    "compression.type",
    "segment.bytes",
    "min.compaction.lag.ms",
    "delete.retention.ms",
)


def create_target_topics(
    source_admin: AdminClient,
    target_admin: AdminClient,
    target_names: dict[str, str],
    partitions: dict[str, int],
    *,
    target: str,
    timeout_s: float,
) -> dict[str, int]:
    """Create the target topics that do not exist yet, with the source's partition count and relevant
    configs; returns the partition count of every target topic that exists now, by source topic."""
    existing = target_admin.list_topics(timeout=timeout_s).topics
    configs = source_topic_configs(source_admin, [t for t in partitions if target_names[t] not in existing])
    new = [
        NewTopic(target_names[t], num_partitions=partitions[t], replication_factor=-1, config=configs.get(t, {}))
        for t in partitions
        if target_names[t] not in existing
    ]
    for name, future in (target_admin.create_topics(new) if new else {}).items():
        try:
            future.result()
            log.info("target topic created", extra={"target": target, "topic": name})
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaClientError(
                    f"creating {name!r} on {target}: {exc.args[0].str()}", code=exc.args[0].code()
                ) from exc
    existing = target_admin.list_topics(timeout=timeout_s).topics
    return {topic: len(existing[name].partitions) for topic, name in target_names.items() if name in existing}


def source_topic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The non-default settings of `topics` that a copy should share (COPIED_TOPIC_CONFIGS)."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics]
    configs = {}
    for resource, future in admin.describe_configs(resources).items():
        entries = future.result()
        configs[resource.name] = {
            key: entry.value
            for key, entry in entries.items()
            if key in COPIED_TOPIC_CONFIGS and not entry.is_default and entry.value is not None
        }
    return configs
