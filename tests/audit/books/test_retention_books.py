"""The books over a retention gap (invariant 9): the loss is reported as missing in its window, the gap is
in `retention_gaps`, and the loss alert and its email name retention as the likely cause."""

from __future__ import annotations

import pytest

from tests.audit.hops.test_retention_gaps import delete_before

pytestmark = pytest.mark.kafka


@pytest.mark.spark
def test_the_books_report_a_retention_gap_as_missing_with_its_cause(spark, settings_factory, topic_factory):
    """A replicator down while retention deletes 30 messages it had not copied: the aggregate tier misses
    exactly those 30 in their window, `retention_gaps` holds the gap, and the loss alert (and its email)
    names retention as the cause; the window copied before the gap is complete."""
    from datetime import UTC, datetime

    from confluent_kafka import Producer

    from audit.alerts.mail import compose
    from audit.alerts.rules import window_alerts
    from audit.books.run import reconcile
    from audit.io.clients import ensure_topics
    from audit.io.lake import lake_of
    from audit.io.lake_read import read_frame
    from tests.audit.local.test_pipeline_e2e import books, count_cluster, mirror

    settings = settings_factory()
    dc1 = settings.cluster("dc1").bootstrap_servers
    topic = topic_factory("dc1")
    ensure_topics({"bootstrap.servers": dc1}, {settings.audit_topic: 1})
    window_a, window_b = 1_700_000_400_000, 1_700_001_000_000  # two 10-minute windows

    def produce_in(window_ms: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": dc1, "acks": "all"})
        for i in range(count):
            producer.produce(topic, value=b"m%d" % i, timestamp=window_ms + 1000 + i)
        assert producer.flush(30) == 0

    group = f"mirror-{settings.audit_topic}"
    produce_in(window_a, 100)  # offsets 0..99
    count_cluster(settings, "dc1", [topic])
    mirror(settings, [topic], group=group)
    produce_in(window_b, 50)  # offsets 100..149: counted at dc1, then 100..129 deleted before the copy
    count_cluster(settings, "dc1", [topic])
    delete_before(dc1, topic, 130)
    mirror(settings, [topic], group=group)
    count_cluster(settings, "aggregate", [f"dc1.{topic}"])
    reconcile(spark, settings)

    verdicts = books(spark, settings, f"dc1.{topic}")
    assert verdicts[(window_a, "aggregate")] == ("complete", 100, 100, 0, 0)
    assert verdicts[(window_b, "aggregate")] == ("incomplete", 50, 20, 30, 0)
    gaps = read_frame(lake_of(settings), "retention_gaps")
    assert gaps[["tier", "partition", "from_offset", "to_offset", "skipped"]].values.tolist() == [
        ["aggregate", 0, 100, 130, 30]
    ]

    alerts = window_alerts(
        read_frame(lake_of(settings), "completeness"),
        read_frame(lake_of(settings), "tier_status"),
        read_frame(lake_of(settings), "tier_counts"),
        now=datetime.now(UTC),
        lag_minutes=30,
        retention_gaps=gaps,
    )
    assert [(a.tier, a.missing) for a in alerts] == [("aggregate", 30)]
    assert alerts[0].cause.startswith(
        "deleted by retention before aggregate read it (30 offsets skipped); lost between"
    )
    email = compose(alerts, sender="kaudit@localhost", recipients=["ops@localhost"], ui_url="http://127.0.0.1:8050")
    assert (
        "deleted by retention before aggregate read it (30 offsets skipped)" in email.get_body(("plain",)).get_content()
    )


@pytest.mark.spark
def test_a_lake_job_restarted_after_retention_passed_its_checkpoint_reports_exactly_the_skipped(
    spark, settings_factory, topic_factory
):
    """Spark's Kafka source (failOnDataLoss=false) passes a deleted range with a log line only: the lake job
    compares each batch's planned start with what it read and reports the gap like the other hops."""
    from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
    from audit.io.clients import ensure_topics
    from tests.audit.hops.test_replicator import produce
    from tests.audit.hops.test_retention_gaps import reported_gaps

    settings = settings_factory()
    aggregate = settings.cluster("aggregate").bootstrap_servers
    topic = topic_factory("aggregate")
    ensure_topics({"bootstrap.servers": aggregate}, {settings.audit_topic: 1})
    options = LakeOptions(cluster="aggregate", checkpoint=default_checkpoint(settings, "aggregate"))

    def land():
        return LakeJob(spark, settings, options, lambda t: t == topic).run(until_caught_up=True)

    produce(aggregate, topic, 100, partitions=1)
    assert land().rows == 100
    produce(aggregate, topic, 50, partitions=1)  # offsets 100..149, while the lake job is down
    delete_before(aggregate, topic, 130)
    stats = land()

    assert stats.rows == 20
    assert stats.retention_skipped == 30
    assert reported_gaps(aggregate, settings.audit_topic, "lake") == {(0, 100, 130)}
