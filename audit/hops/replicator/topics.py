"""The topics a replicator mirrors, and the target topics it creates for them: the source's partition count and
the settings that matter."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from audit.contract.errors import KafkaClientError
from audit.contract.naming import NamingPolicy, is_audit_topic
from audit.hops.replicator.state import ReplicatorOptions

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


class ReplicatedTopics:
    """The source topics one replicator mirrors, and the partition count of each one's target topic.

    A topic is mirrored when `select_topic` selects it or it is an audit topic (the source's own, or a copy of
    another cluster's); never when it is internal, or a copy of the target's own topics (a cycle). It is read only
    once its target topic shows the source's partitions (`create_target_topics`)."""

    def __init__(self, options: ReplicatorOptions, naming: NamingPolicy, select_topic: Callable[[str], bool]) -> None:
        self.options = options
        self.naming = naming
        self.select_topic = select_topic
        self.target_partitions: dict[str, int] = {}

    def selected(self, metadata: Mapping[str, Any]) -> set[str]:
        """The topics of the source's `metadata` to mirror."""
        source, target, audit_topic = self.options.source, self.options.target, self.options.audit_topic
        return {
            name
            for name in metadata
            if not name.startswith("__")
            and self.naming.origin(source, name).cluster != target
            and (self.select_topic(name) or is_audit_topic(self.naming, source, name, audit_topic))
        }

    def readable(self, metadata: Mapping[str, Any], selected: set[str], source_admin, target_admin) -> list[str]:
        """The `selected` topics to read now, sorted: those whose metadata has no error this time and whose target
        topic shows its partitions, the missing target topics created first. The others wait for a later call."""
        wanted = sorted(name for name in selected if metadata[name].error is None)
        missing = {name: len(metadata[name].partitions) for name in wanted if name not in self.target_partitions}
        if missing:
            target_names = {topic: self.naming.target_topic(self.options.source, topic) for topic in missing}
            self.target_partitions.update(
                create_target_topics(
                    source_admin,
                    target_admin,
                    target_names,
                    missing,
                    target=self.options.target,
                    timeout_s=self.options.client_timeout_s,
                )
            )
        return [name for name in wanted if name in self.target_partitions]

    def target_partition(self, topic: str, partition: int) -> int:
        """Where a copy goes: the source's partition where its target topic has it, else -1 (the partitioner)."""
        return partition if partition < self.target_partitions.get(topic, 0) else -1


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
    configs; returns the partition count of every target topic whose partitions the target's metadata
    shows now, by source topic. A topic left out is not ready: copying into it would hand its messages to
    the default partitioner, so the caller does not read its source yet."""
    existing = target_admin.list_topics(timeout=timeout_s).topics
    configs = source_topic_configs(source_admin, [t for t in partitions if target_names[t] not in existing])
    # A source topic not described yet (a broker that has not learnt of it) is created at a later refresh:
    # created now, its copy would miss the source's settings.
    new = [
        NewTopic(target_names[t], num_partitions=partitions[t], replication_factor=-1, config=configs[t])
        for t in partitions
        if target_names[t] not in existing and t in configs
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
    created = [topic.topic for topic in new]
    return visible_partitions(target_admin, target_names, wait_for=created, timeout_s=timeout_s)


def visible_partitions(
    admin: AdminClient, target_names: dict[str, str], *, wait_for: list[str], timeout_s: float
) -> dict[str, int]:
    """The partition count of each target topic the metadata shows with its partitions, by source topic.
    A topic just created can be missing from a broker's metadata for a moment (KRaft brokers learn of it
    asynchronously): wait up to `timeout_s` for those in `wait_for`."""
    give_up_at = time.monotonic() + timeout_s
    while True:
        existing = admin.list_topics(timeout=timeout_s).topics
        shown = {name for name, meta in existing.items() if meta.error is None and meta.partitions}
        unseen = [name for name in wait_for if name not in shown]
        if not unseen or time.monotonic() >= give_up_at:
            if unseen:
                log.warning("target topics not visible yet", extra={"topics": unseen, "waited_s": timeout_s})
            return {topic: len(existing[name].partitions) for topic, name in target_names.items() if name in shown}
        time.sleep(0.2)


def source_topic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The non-default settings of `topics` that a copy should share (COPIED_TOPIC_CONFIGS); a topic the
    broker does not know (yet) is left out."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics]
    configs = {}
    for resource, future in admin.describe_configs(resources).items():
        try:
            entries = future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            log.warning("source topic not described yet", extra={"topic": resource.name})
            continue
        configs[resource.name] = {
            key: entry.value
            for key, entry in entries.items()
            if key in COPIED_TOPIC_CONFIGS and not entry.is_default and entry.value is not None
        }
    return configs
