"""A topic deleted and created again under the same name while the counter's group still holds offsets
of the old one: the counter reads the new topic from its start, counts each new message once (also
across a restart), and reports positions of the new topic, never the old one's."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from audit.io.clients import ensure_topics
from tests.audit.hops.test_counter import BASE_MS, WINDOW_MS, counted, counter_for, produce_plain
from tests.audit.hops.test_transactional_topics import last_status_by_partition

pytestmark = pytest.mark.kafka


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ensure_topics({"bootstrap.servers": bootstrap}, {topic: partitions})
            if topic in admin.list_topics(timeout=10).topics:
                return
        except Exception:  # noqa: BLE001 - the deletion is still in progress: try again
            pass
        time.sleep(0.5)
    raise AssertionError(f"{topic} was not created again")


def test_a_recreated_topic_is_counted_from_its_start_once(local_clusters, topic_factory, unique_name):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    prefix = unique_name("again")
    topic = topic_factory("dc1", partitions=2, name=f"{prefix}-t")
    audit_topic = topic_factory("dc1", name=f"{prefix}-audit")
    first = produce_plain(bootstrap, [topic], 3000, windows=1, partitions=2)
    counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)
    assert counted(bootstrap, audit_topic) == dict(first)

    recreate(bootstrap, topic, 2)
    second = produce_plain(bootstrap, [topic], 200, windows=1, partitions=2, seed=2)
    stats = counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60)
    assert stats.counted == 200
    # And a restart after that commit must not count them again.
    assert counter_for(bootstrap, audit_topic, prefix).run(until_caught_up=True, max_seconds=60).counted == 0

    window = BASE_MS // WINDOW_MS * WINDOW_MS
    assert counted(bootstrap, audit_topic) == {(topic, window): 3000 + 200}, "old counts stay, new ones add once"
    assert sum(second.values()) == 200
    status = last_status_by_partition(bootstrap, audit_topic, "dc1")
    assert sum(position for position, _end, _lag in status.values()) == 200, status
    assert all(lag == 0 for _p, _e, lag in status.values())


def test_a_recreated_topic_is_copied_from_its_start_once(local_clusters, topic_factory, unique_name):
    from tests.audit.hops.test_replicator import options_for, read_all, replicator
    from tests.audit.hops.test_transactional_topics import PREFIX

    dc1, aggregate = local_clusters["dc1"].bootstrap_servers, local_clusters["aggregate"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    options = options_for(unique_name)
    produce_plain(dc1, [topic], 1000, windows=1, partitions=2)
    mirror = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    mirror.run(until_caught_up=True, max_seconds=60)

    recreate(dc1, topic, 2)
    produce_plain(dc1, [topic], 200, windows=1, partitions=2, seed=2)
    again = replicator(dc1, aggregate, options, PREFIX, lambda t: t == topic)
    assert again.run(until_caught_up=True, max_seconds=60).lag == 0

    assert len(read_all(aggregate, f"dc1.{topic}", 1200, timeout_s=20)) == 1200
