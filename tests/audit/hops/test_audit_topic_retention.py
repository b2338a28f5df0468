"""The audit topic's own retention (issue #59): the counter and the replicator check at start that every audit
topic they read or write keeps its records for the books' lookback plus the longest outage, and say so, with
the command that fixes it, when it does not. Never a failed start."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from audit.contract.naming import naming_policy
from audit.contract.record import count_record, encode, new_instance_id, record_id
from audit.contract.windows import window_start
from audit.hops import upkeep
from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.replicator.hop import Replicator, ReplicatorOptions
from audit.hops.upkeep import (
    DEFAULT_AUDIT_RETENTION_MS,
    HOUR_MS,
    audit_retention_ms,
    check_audit_retention,
    drop_series,
    fix_command,
    needed_retention_ms,
    shortfalls,
)
from audit.settings import Settings

NEEDED_MS = 72 * HOUR_MS
WARNING = "audit topic keeps its records shorter than the books need"


# -- the rules, without a broker ------------------------------------------------------------------


def test_the_books_need_their_lookback_plus_the_longest_outage():
    assert needed_retention_ms(48, 24) == NEEDED_MS
    assert DEFAULT_AUDIT_RETENTION_MS == audit_retention_ms(Settings.default()) == NEEDED_MS
    settings = Settings.default().replace(max_outage_hours=6.5)
    assert audit_retention_ms(settings) == round((48 + 6.5) * HOUR_MS)


@pytest.mark.parametrize(
    ("configs", "needed_bytes", "short"),
    [
        ({"retention.ms": "-1", "cleanup.policy": "delete"}, None, {}),
        ({"retention.ms": str(NEEDED_MS)}, None, {}),
        ({"retention.ms": str(7 * 24 * HOUR_MS)}, None, {}),
        ({"retention.ms": str(NEEDED_MS - 1)}, None, {"retention.ms": (str(NEEDED_MS - 1), str(NEEDED_MS))}),
        ({"retention.ms": "0"}, None, {"retention.ms": ("0", str(NEEDED_MS))}),
        ({"retention.ms": "-1", "cleanup.policy": "compact"}, None, {"cleanup.policy": ("compact", "delete")}),
        (
            {"retention.ms": "-1", "cleanup.policy": "compact,delete"},
            None,
            {"cleanup.policy": ("compact,delete", "delete")},
        ),
        ({"retention.ms": "-1", "retention.bytes": "-1"}, 10**9, {}),
        ({"retention.ms": "-1", "retention.bytes": "1000"}, None, {}),  # no rate known: not judged
        ({"retention.ms": "-1", "retention.bytes": "1000"}, 999, {}),
        ({"retention.ms": "-1", "retention.bytes": "1000"}, 1001, {"retention.bytes": ("1000", "1001")}),
    ],
)
def test_shortfalls(configs, needed_bytes, short):
    assert shortfalls(configs, NEEDED_MS, needed_bytes) == short


def test_the_fix_is_one_kafka_configs_command_with_every_setting_needed():
    short = {"cleanup.policy": ("compact", "delete"), "retention.ms": ("3600000", str(NEEDED_MS))}
    assert fix_command("b1:9092,b2:9092", "_audit", short) == (
        "kafka-configs.sh --bootstrap-server b1:9092,b2:9092 --alter --entity-type topics --entity-name _audit "
        f"--add-config cleanup.policy=delete,retention.ms={NEEDED_MS}"
    )


class BrokenAdmin:
    def describe_configs(self, *args, **kwargs):
        raise RuntimeError("no broker")


def test_a_check_that_cannot_be_made_is_a_warning_never_an_error(caplog):
    with caplog.at_level(logging.WARNING, logger="audit.hops.upkeep"):
        found = check_audit_retention(
            BrokenAdmin(), {}, service="s", cluster="c", topic="_audit", needed_ms=NEEDED_MS, timeout_s=1
        )
    assert found is None
    [record] = [r for r in caplog.records if r.getMessage() == "audit topic retention not checked"]
    assert (record.cluster, record.topic, record.error) == ("c", "_audit", "no broker")


def test_drop_series_removes_exactly_the_series_of_a_topic():
    messages = Counter("m_total", "m", ["cluster", "topic"], registry=CollectorRegistry())
    for cluster, topic in [("a", "x"), ("a", "y"), ("b", "x")]:
        messages.labels(cluster, topic).inc()
    assert drop_series(messages, cluster="a", topic="x") == 1
    left = {tuple(s.labels.values()) for family in messages.collect() for s in family.samples}
    assert left == {("a", "y"), ("b", "x")}
    assert drop_series(messages, cluster="a", topic="x") == 0


# -- against a real cluster -----------------------------------------------------------------------


def short_value(service: str, cluster: str, topic: str, config: str) -> float | None:
    return REGISTRY.get_sample_value(
        "kaudit_audit_topic_retention_short",
        {"service": service, "cluster": cluster, "topic": topic, "config": config},
    )


def warnings_about(caplog, topic: str) -> list:
    return [r for r in caplog.records if r.getMessage().startswith(WARNING) and r.topic == topic]


@pytest.mark.kafka
def test_a_counter_warns_once_at_start_about_a_short_or_compacted_audit_topic(local_clusters, topic_factory, caplog):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    short = topic_factory("dc1", config={"retention.ms": str(HOUR_MS)})
    compacted = topic_factory("dc1", config={"cleanup.policy": "compact"})
    fine = topic_factory("dc1", config={"retention.ms": str(NEEDED_MS)})
    for topic in (short, compacted, fine):
        counter = ClusterCounter(
            {"bootstrap.servers": bootstrap}, CounterOptions(cluster="dc1", audit_topic=topic), lambda _t: False
        )
        with caplog.at_level(logging.WARNING, logger="audit.hops.upkeep"):
            counter.open()  # never fails for it
        counter.close()

    [record] = warnings_about(caplog, short)
    assert (record.service, record.cluster, record.found, record.needed, record.needed_hours) == (
        "kaudit-counter",
        "dc1",
        f"retention.ms={HOUR_MS}",
        f"retention.ms={NEEDED_MS}",
        72.0,
    )
    assert record.fix == (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics --entity-name {short} "
        f"--add-config retention.ms={NEEDED_MS}"
    )
    assert short_value("kaudit-counter", "dc1", short, "retention.ms") == 1
    assert short_value("kaudit-counter", "dc1", short, "cleanup.policy") == 0

    [record] = warnings_about(caplog, compacted)
    assert record.found == "cleanup.policy=compact" and record.fix.endswith("--add-config cleanup.policy=delete")
    assert short_value("kaudit-counter", "dc1", compacted, "cleanup.policy") == 1

    assert warnings_about(caplog, fine) == []
    assert {short_value("kaudit-counter", "dc1", fine, c) for c in upkeep.CHECKED} == {0}


def produce_count_records(bootstrap: str, topic: str, n: int) -> int:
    """`n` count records of the current window into `topic`; returns the bytes of one."""
    instance = new_instance_id("test")
    producer = Producer({"bootstrap.servers": bootstrap})
    now = int(time.time() * 1000)
    size = 0
    for i in range(n):
        record = count_record(
            record_id=record_id(instance, i),
            tier="dc1",
            cluster="dc1",
            topic="orders",
            window_start_ms=window_start(now),
            count=100,
            by_partition={0: 60, 1: 40},
        )
        value = encode(record)
        size = len(value) + len(b"orders")
        producer.produce(topic, key=b"orders", value=value)
    assert producer.flush(30) == 0
    return size


@pytest.mark.kafka
def test_retention_bytes_is_judged_by_the_last_hours_rate(local_clusters, topic_factory, caplog):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", config={"retention.bytes": "1000000"})
    size = produce_count_records(bootstrap, topic, 50)
    config = {"bootstrap.servers": bootstrap}
    from confluent_kafka.admin import AdminClient

    with caplog.at_level(logging.WARNING, logger="audit.hops.upkeep"):
        short = check_audit_retention(
            AdminClient(config), config, service="test", cluster="dc1", topic=topic, needed_ms=NEEDED_MS, timeout_s=30
        )
    # 50 records in the last hour, each its bytes plus its share of the batch: 72 hours of that is far more.
    found, needed = short["retention.bytes"]
    assert found == "1000000"
    assert 50 * 72 * size < int(needed) <= 50 * 72 * (size + upkeep.RECORD_OVERHEAD_BYTES)
    [record] = warnings_about(caplog, topic)
    assert record.fix.endswith(f"--add-config retention.bytes={needed}")


@pytest.mark.kafka
def test_a_replicator_checks_the_audit_topic_it_reads_and_its_copy(local_clusters, topic_factory, caplog, unique_name):
    dc1, aggregate = (local_clusters[name].bootstrap_servers for name in ("dc1", "aggregate"))
    audit_topic = unique_name("_audit").replace("-", "_")
    topic_factory("dc1", name=audit_topic, config={"retention.ms": str(2 * HOUR_MS)})
    copy = topic_factory("aggregate", name=f"dc1.{audit_topic}", config={"cleanup.policy": "compact"})
    mirror = Replicator(
        {"bootstrap.servers": dc1},
        {"bootstrap.servers": aggregate},
        ReplicatorOptions(source="dc1", target="aggregate", audit_topic=audit_topic),
        naming_policy("prefix", ("dc1", "aggregate")),
        lambda _t: False,
    )
    with caplog.at_level(logging.WARNING, logger="audit.hops.upkeep"):
        mirror.open()
    mirror.close()
    [source] = warnings_about(caplog, audit_topic)
    assert (source.service, source.cluster, source.found) == ("kaudit-mirror", "dc1", f"retention.ms={2 * HOUR_MS}")
    [target] = warnings_about(caplog, copy)
    assert (target.cluster, target.found) == ("aggregate", "cleanup.policy=compact")
    assert dc1 in source.fix and aggregate in target.fix
    assert short_value("kaudit-mirror", "aggregate", copy, "cleanup.policy") == 1
