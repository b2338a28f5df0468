"""The reconciliation on real Kafka, Spark and Delta, fed audit records whose outcome is known.

Each test writes records straight into the audit topics of the session clusters (its own audit
topic name, its own lake), runs `reconcile`, and reads the Delta tables back.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from audit.alerts.rules import window_alerts
from audit.books import run as run_module
from audit.books.run import ReconcileReport, RunMemory, read_and_store, reconcile
from audit.contract.record import PartitionStatus, count_record, encode, status_record
from audit.contract.retention import RetentionGap
from audit.contract.tables import (
    AUDIT_RECORDS,
    AUDIT_REJECTS,
    COMPLETENESS,
    COMPLETENESS_WATERMARKS,
    RETENTION_GAPS,
    SOURCE_OFFSETS,
    TIER_COUNTS,
    TIER_STATUS,
)
from audit.contract.windows import window_start
from audit.io import delta_io
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MINUTE = 60_000
NOW = time.time_ns() // 1_000_000
W1 = window_start(NOW - 120 * MINUTE)
W2 = W1 + 10 * MINUTE
FRESH = NOW - MINUTE  # status records emitted a minute ago


class AuditWriter:
    """Writes audit records (or raw bytes) into a cluster's audit topic, with ids that never repeat by accident."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.producers = {c.name: Producer({"bootstrap.servers": c.bootstrap_servers}) for c in settings.clusters}
        self.replica = f"dc1.{settings.audit_topic}"  # dc1's audit topic as replicated to the aggregate
        ensure_topics(self._config("dc1"), {settings.audit_topic: 2})
        ensure_topics(self._config("aggregate"), {settings.audit_topic: 2, self.replica: 2})
        self.sequence = 0
        self.failures: list[str] = []

    def _config(self, cluster: str) -> dict:
        return {"bootstrap.servers": self.settings.cluster(cluster).bootstrap_servers}

    def send(self, cluster: str, payload: bytes, topic: str | None = None) -> None:
        def delivered(err, _msg):
            if err is not None:
                self.failures.append(err.str())

        self.producers[cluster].produce(topic or self.settings.audit_topic, payload, on_delivery=delivered)

    def count(
        self,
        tier: str,
        cluster: str,
        topic: str,
        window: int,
        count: int,
        parts: dict | None = None,
        *,
        to: tuple[str, ...] | None = None,
    ) -> bytes:
        self.sequence += 1
        payload = encode(
            count_record(
                record_id=f"{tier}-i:{self.sequence}",
                tier=tier,
                cluster=cluster,
                topic=topic,
                window_start_ms=window,
                count=count,
                bytes=count * 100,
                by_partition=parts,
                emitted_at_ms=FRESH,
            )
        )
        for target in to or (cluster,):
            self.send(target, payload)
        if to:  # and its copy, as the replicator brings it to the aggregate
            self.send("aggregate", payload, self.replica)
        return payload

    def status(
        self,
        tier: str,
        cluster: str,
        topic: str,
        lag: int = 0,
        last_audit_time: int | None = None,
        *,
        service: str = "kaudit-counter",
        emitted_at: int = FRESH,
        to: str | None = None,
        position: int = 1000,
        retention_gaps: tuple = (),
    ) -> None:
        self.sequence += 1
        partitions = [PartitionStatus(0, position, position + lag, lag, last_audit_time)]
        record = status_record(
            record_id=f"{service}-{tier}:{self.sequence}",
            tier=tier,
            cluster=cluster,
            topic=topic,
            service=service,
            partitions=partitions,
            emitted_at_ms=emitted_at,
            retention_gaps=retention_gaps,
        )
        self.send(to or cluster, encode(record))

    def flush(self) -> None:
        for producer in self.producers.values():
            assert producer.flush(30) == 0
        assert not self.failures, self.failures


def rows(spark, settings, table, *, drop=("updated_at", "ingested_at")) -> list[dict]:
    frame = delta_io.read_table(spark, lake_of(settings), table.name)
    return sorted(
        (row.asDict(recursive=True) for row in frame.drop(*[c for c in drop if c in frame.columns]).collect()),
        key=lambda r: json.dumps(r, default=str, sort_keys=True),
    )


def version_of(spark, settings, table) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, lake_of(settings).path(table.name)).history(1).first().version


def completeness(spark, settings) -> dict[tuple[str, int, str], tuple]:
    result = {}
    for row in rows(spark, settings, COMPLETENESS):
        window = int(row["window_start"].timestamp() * 1000)
        result[(row["logical_topic"], window, row["tier"])] = (
            row["status"],
            row["expected"],
            row["observed"],
            row["missing"],
            row["duplicated"],
        )
    return result


def remembers_the_open_windows(spark, settings, memory: RunMemory) -> bool:
    """The open windows a session remembers are those `completeness` holds: not final, or pending or lagging."""
    held = {
        (r["origin_cluster"], r["topic"], r["window_start"])
        for r in rows(spark, settings, COMPLETENESS)
        if not r["final"] or r["status"] in ("pending", "lagging")
    }
    return memory.open_books is not None and memory.open_books.windows == held and len(held) > 0


def seed_books(writer: AuditWriter) -> None:
    """orders: W2 loses 3 in partition 1 at aggregate (so at the lake too); the lake repeats 5 of W1.
    clicks: written by a plain producer, so dc1 is its reference. payments: the replicator is behind."""
    w = writer
    both = ("dc1",)  # and a copy in dc1.<audit topic> on the aggregate: the same record twice
    w.count("producer", "dc1", "orders", W1, 100, {0: 50, 1: 50}, to=both)
    w.count("producer", "dc1", "orders", W2, 80, {0: 40, 1: 40}, to=both)
    w.count("dc1", "dc1", "orders", W1, 60, {0: 30, 1: 30})
    w.count("dc1", "dc1", "orders", W1, 40, {0: 20, 1: 20})
    w.count("dc1", "dc1", "orders", W2, 80, {0: 40, 1: 40})
    w.count("aggregate", "aggregate", "dc1.orders", W1, 100, {0: 50, 1: 50})
    w.count("aggregate", "aggregate", "dc1.orders", W2, 77, {0: 40, 1: 37})
    w.count("lake", "aggregate", "dc1.orders", W1, 105, {0: 55, 1: 50})
    w.count("lake", "aggregate", "dc1.orders", W2, 77, {0: 40, 1: 37})
    w.count("dc1", "dc1", "clicks", W1, 50)
    w.count("aggregate", "aggregate", "dc1.clicks", W1, 50)
    w.count("lake", "aggregate", "dc1.clicks", W1, 50)
    w.count("producer", "dc1", "payments", W1, 30)
    w.count("dc1", "dc1", "payments", W1, 30)
    w.count("aggregate", "aggregate", "dc1.payments", W1, 10)
    w.count("lake", "aggregate", "dc1.payments", W1, 10)
    for topic in ("orders", "clicks", "payments"):
        w.status("dc1", "dc1", topic)
        w.status("aggregate", "aggregate", f"dc1.{topic}")
        w.status("lake", "aggregate", f"dc1.{topic}", service="kaudit-lake")
    w.status("aggregate", "dc1", "orders", service="kaudit-mirror")
    w.status("aggregate", "dc1", "clicks", service="kaudit-mirror")
    w.status("aggregate", "dc1", "payments", lag=20, last_audit_time=W1 + MINUTE, service="kaudit-mirror")
    w.flush()


def test_the_books_balance_per_topic_window_and_tier(spark, settings_factory):
    settings = settings_factory()
    writer = AuditWriter(settings)
    seed_books(writer)

    report = reconcile(spark, settings, now_ms=NOW)

    assert report.rejects == 0 and not report.unreachable
    books = completeness(spark, settings)
    assert books[("dc1.orders", W1, "dc1")] == ("complete", 100, 100, 0, 0)
    assert books[("dc1.orders", W2, "dc1")] == ("complete", 80, 80, 0, 0)
    assert books[("dc1.orders", W1, "aggregate")] == ("complete", 100, 100, 0, 0)
    assert books[("dc1.orders", W2, "aggregate")] == ("incomplete", 80, 77, 3, 0)
    assert books[("dc1.orders", W1, "lake")] == ("over", 100, 105, 0, 5)
    assert books[("dc1.orders", W2, "lake")] == ("incomplete", 80, 77, 3, 0)
    # No producer audits clicks: the origin cluster is the reference, and it has no row of its own.
    assert books[("dc1.clicks", W1, "aggregate")] == ("complete", 50, 50, 0, 0)
    assert ("dc1.clicks", W1, "dc1") not in books
    # The replicator into the aggregate is behind: lagging there and downstream, never a loss.
    assert books[("dc1.payments", W1, "aggregate")] == ("lagging", 30, 10, 20, 0)
    assert books[("dc1.payments", W1, "lake")] == ("lagging", 30, 10, 20, 0)
    assert not any(key[0] == "dc1.dc1" or ".dc1." in key[0] for key in books), (
        "replicated names map back to their origin"
    )

    reference = {r["logical_topic"]: r["reference_tier"] for r in rows(spark, settings, COMPLETENESS)}
    assert reference == {"dc1.orders": "producer", "dc1.clicks": "dc1", "dc1.payments": "producer"}
    assert_the_loss_alerts_name_the_partition_short(settings)
    producer_w1 = [
        r
        for r in rows(spark, settings, TIER_COUNTS)
        if r["tier"] == "producer" and r["topic"] == "orders" and int(r["window_start"].timestamp() * 1000) == W1
    ]
    assert [(r["count"], r["records"]) for r in producer_w1] == [(100, 1)], (
        "a record read from two clusters counts once"
    )
    dc1_w1 = [
        r
        for r in rows(spark, settings, TIER_COUNTS)
        if r["tier"] == "dc1" and r["topic"] == "orders" and int(r["window_start"].timestamp() * 1000) == W1
    ]
    assert [(r["count"], r["records"], r["by_partition"]) for r in dc1_w1] == [(100, 2, {0: 50, 1: 50})], (
        "two records of a window sum partition by partition"
    )
    status = {(r["logical_topic"], r["tier"]): r for r in rows(spark, settings, TIER_STATUS)}
    assert status[("dc1.payments", "aggregate")]["lag"] == 20
    assert "kaudit-mirror@dc1" in status[("dc1.payments", "aggregate")]["reporters"]

    # The replicator catches up and the rest arrives: the lagging windows turn complete.
    writer.status("aggregate", "dc1", "payments", service="kaudit-mirror", emitted_at=NOW - 30_000)
    writer.count("aggregate", "aggregate", "dc1.payments", W1, 20)
    writer.count("lake", "aggregate", "dc1.payments", W1, 20)
    writer.flush()
    reconcile(spark, settings, now_ms=NOW)
    books = completeness(spark, settings)
    assert books[("dc1.payments", W1, "aggregate")] == ("complete", 30, 30, 0, 0)
    assert books[("dc1.payments", W1, "lake")] == ("complete", 30, 30, 0, 0)
    assert books[("dc1.orders", W2, "aggregate")] == ("incomplete", 80, 77, 3, 0), (
        "untouched windows keep their verdict"
    )


def assert_the_loss_alerts_name_the_partition_short(settings) -> None:
    """The alert rules over the Delta tables the reconciliation wrote (read as `kaudit alert` reads them):
    W2 of orders lost 3 messages, all in partition 1, at the aggregate and so at the lake."""
    lake = lake_of(settings)
    alerts = window_alerts(
        read_frame(lake, "completeness"),
        read_frame(lake, "tier_status"),
        read_frame(lake, "tier_counts"),
        now=datetime.fromtimestamp(NOW / 1000, UTC),
        lag_minutes=30,
    )
    causes = {a.tier: a.cause for a in alerts if a.kind == "loss" and a.topic == "orders"}
    assert set(causes) == {"aggregate", "lake"}, causes
    assert causes["aggregate"].startswith("lost between dc1 -> aggregate (the replicator): ")
    assert causes["aggregate"].endswith("aggregate is short; aggregate misses 3 in partition 1"), causes
    assert causes["lake"].endswith("aggregate is short; lake misses 3 in partition 1"), causes


def test_a_run_killed_after_storing_its_records_is_completed_by_the_next(spark, settings_factory):
    """The rerun finds the records stored and still sums their windows: it does not take them for old ones."""
    settings = settings_factory()
    writer = AuditWriter(settings)
    seed_books(writer)
    # then killed: nothing derived, no offsets stored
    read_and_store(spark, settings, ReconcileReport(), lake=lake_of(settings), now_ms=NOW)

    report = reconcile(spark, settings, now_ms=NOW)

    assert report.read > 0 and report.records == 0, "the rerun reads the same records and finds them stored"
    books = completeness(spark, settings)
    assert books[("dc1.orders", W1, "aggregate")] == ("complete", 100, 100, 0, 0)
    assert books[("dc1.orders", W2, "aggregate")] == ("incomplete", 80, 77, 3, 0)
    assert books[("dc1.orders", W1, "lake")] == ("over", 100, 105, 0, 5)
    assert books[("dc1.payments", W1, "lake")] == ("lagging", 30, 10, 20, 0)
    status = {(r["logical_topic"], r["tier"]): r["lag"] for r in rows(spark, settings, TIER_STATUS)}
    assert status[("dc1.payments", "aggregate")] == 20


def test_a_tier_is_final_only_once_its_own_counter_reports_and_a_tier_that_joins_later_is_judged(
    spark, settings_factory
):
    """Two cases. payments: a hung aggregate counter and a replicator saying all has arrived: the
    aggregate's windows are not final with nothing counted (that would be false loss alerts). orders: every
    message of one window is lost on the way and the lake never counts that window: it still gets a lake
    verdict. One session throughout (its memory knows the tiers that counted): a tier that joins a
    path later, even one that counted without reporting yet (the lake on payments), is on it."""
    settings = settings_factory()
    memory = RunMemory()
    writer = AuditWriter(settings)
    writer.count("producer", "dc1", "payments", W1, 10, to=("dc1",))
    writer.count("dc1", "dc1", "payments", W1, 10)
    for window, count in ((W1, 10), (W2, 20)):
        writer.count("producer", "dc1", "orders", window, count, to=("dc1",))
        writer.count("dc1", "dc1", "orders", window, count)
    writer.count("aggregate", "aggregate", "dc1.orders", W2, 20)  # all 10 of W1 lost on the way
    for topic in ("payments", "orders"):
        writer.status("dc1", "dc1", topic)
        writer.status("aggregate", "dc1", topic, service="kaudit-mirror")  # arrived at the aggregate
    writer.status("aggregate", "aggregate", "dc1.orders")  # counted there: only orders
    writer.flush()
    reconcile(spark, settings, now_ms=NOW, memory=memory)
    assert remembers_the_open_windows(spark, settings, memory)
    books = completeness(spark, settings)
    assert books[("dc1.payments", W1, "aggregate")] == ("lagging", 10, 0, 10, 0), "arrived is not counted"
    assert books[("dc1.orders", W1, "aggregate")] == ("incomplete", 10, 0, 10, 0)

    writer.count("aggregate", "aggregate", "dc1.payments", W1, 10)  # the counter is back
    writer.status("aggregate", "aggregate", "dc1.payments")
    writer.count("lake", "aggregate", "dc1.orders", W2, 20)  # the lake job starts: nothing of W1 to count
    writer.status("lake", "aggregate", "dc1.orders", service="kaudit-lake")
    writer.count("lake", "aggregate", "dc1.payments", W1, 10)  # counted, no status yet
    writer.flush()
    reconcile(spark, settings, now_ms=NOW, memory=memory)  # from the open windows it remembers
    books = completeness(spark, settings)
    assert books[("dc1.payments", W1, "aggregate")] == ("complete", 10, 10, 0, 0)
    assert books[("dc1.payments", W1, "lake")] == ("complete", 10, 10, 0, 0)
    assert books[("dc1.orders", W1, "lake")] == ("incomplete", 10, 0, 10, 0)
    assert books[("dc1.orders", W2, "lake")] == ("complete", 20, 20, 0, 0)


def test_a_session_judges_the_windows_it_summed_from_their_new_counts_and_the_other_open_ones_from_the_table(
    spark, settings_factory
):
    """--continuous: a session that knows the open windows judges those it just re-summed from the counts it
    holds and the other open ones (payments W1, lagging) from `tier_counts`: the verdicts a new process finds."""
    settings = settings_factory()
    writer = AuditWriter(settings)
    seed_books(writer)
    memory = RunMemory()
    reconcile(spark, settings, now_ms=NOW, memory=memory)
    assert remembers_the_open_windows(spark, settings, memory)

    writer.count("aggregate", "aggregate", "dc1.orders", W2, 3, {1: 3})  # the 3 lost on the way turn up
    writer.count("lake", "aggregate", "dc1.orders", W2, 3, {1: 3})
    writer.flush()
    reconcile(spark, settings, now_ms=NOW, memory=memory)
    books = completeness(spark, settings)
    assert books[("dc1.orders", W2, "aggregate")] == ("complete", 80, 80, 0, 0)
    assert books[("dc1.orders", W2, "lake")] == ("complete", 80, 80, 0, 0)
    assert books[("dc1.payments", W1, "lake")] == ("lagging", 30, 10, 20, 0), "open, not summed again"
    session = rows(spark, settings, COMPLETENESS)
    reconcile(spark, settings, now_ms=NOW)  # a new process: every count read from the table
    assert rows(spark, settings, COMPLETENESS) == session


MALFORMED = {
    b"this is not json": "record: not JSON",
    b'{"schema_version": 1, "kind": "count", "tier": "dc1"}': "record_id: missing",
    json.dumps(
        {
            "schema_version": 1,
            "record_id": "bad:1",
            "kind": "count",
            "tier": "dc1",
            "cluster": "dc1",
            "topic": "orders",
            "window_start": "2024-01-01T00:00:00Z",
            "count": -5,
            "emitted_at": "2024-01-01T00:11:00.000Z",
        }
    ).encode(): "count: -5 is negative",
    json.dumps(
        {
            "schema_version": 1,
            "record_id": "bad:2",
            "kind": "count",
            "tier": "dc1",
            "cluster": "dc1",
            "topic": "orders",
            "window_start": "2024-01-01T00:03:00Z",
            "count": 5,
            "emitted_at": "2024-01-01T00:11:00.000Z",
        }
    ).encode(): "window_start: 2024-01-01T00:03:00Z is not aligned",
    json.dumps(
        {
            "schema_version": 1,
            "record_id": "bad:3",
            "kind": "count",
            "tier": "moon",
            "cluster": "dc1",
            "topic": "orders",
            "window_start": "2024-01-01T00:00:00Z",
            "count": 5,
            "emitted_at": "2024-01-01T00:11:00.000Z",
        }
    ).encode(): "tier: 'moon' fails expect_column_values_to_be_in_set",
    json.dumps(
        {
            "schema_version": 1,
            "record_id": "bad:4",
            "kind": "count",
            "tier": "dc1",
            "cluster": "dc1",
            "topic": "orders",
            "window_start": "2024-01-01T00:00:00Z",
            "count": 10**20,
            "emitted_at": "2024-01-01T00:11:00.000Z",
        }
    ).encode(): "count: 100000000000000000000 is over the limit",
}


def read_by(form: str, monkeypatch) -> None:
    """Make the runs of a test read and check their messages in the driver (a small run) or in Spark (a run of more
    than `DRIVER_MESSAGES`), whose counts of rejects and retention gaps come from a query of their own."""
    if form == "spark":
        monkeypatch.setattr(run_module, "DRIVER_MESSAGES", 0)


@pytest.mark.parametrize("form", ["driver", "spark"])
def test_malformed_records_are_rejected_with_reasons_and_nothing_else_is_lost(
    spark, settings_factory, monkeypatch, form
):
    read_by(form, monkeypatch)
    settings = settings_factory()
    writer = AuditWriter(settings)
    writer.count("producer", "dc1", "orders", W1, 10)
    for payload in MALFORMED:
        writer.send("dc1", payload)
    writer.count("dc1", "dc1", "orders", W1, 10)
    writer.status("dc1", "dc1", "orders")
    writer.flush()

    report = reconcile(spark, settings, now_ms=NOW)

    rejects = rows(spark, settings, AUDIT_REJECTS)
    assert report.rejects == len(MALFORMED) == len(rejects)
    by_raw = {r["raw"]: r["reason"] for r in rejects}
    for payload, reason in MALFORMED.items():
        assert by_raw[payload.decode()].startswith(reason), by_raw[payload.decode()]
    assert {r["record_id"] for r in rejects} >= {"bad:1", "bad:2", "bad:3", "bad:4"}
    assert completeness(spark, settings)[("dc1.orders", W1, "dc1")] == ("complete", 10, 10, 0, 0)
    assert len(rows(spark, settings, AUDIT_RECORDS)) == 3


@pytest.mark.parametrize("form", ["driver", "spark"])
def test_a_retention_gap_a_status_record_reports_is_stored_and_a_run_without_one_stores_none(
    spark, settings_factory, monkeypatch, form
):
    read_by(form, monkeypatch)
    settings = settings_factory()
    writer = AuditWriter(settings)
    writer.count("producer", "dc1", "orders", W1, 10)
    writer.status("dc1", "dc1", "orders")
    writer.flush()
    reconcile(spark, settings, now_ms=NOW)
    assert rows(spark, settings, RETENTION_GAPS) == []

    writer.status("aggregate", "aggregate", "dc1.orders", retention_gaps=(RetentionGap(0, 40, 70),))
    writer.flush()
    reconcile(spark, settings, now_ms=NOW)
    gaps = rows(spark, settings, RETENTION_GAPS)
    assert [(g["tier"], g["partition"], g["from_offset"], g["to_offset"], g["skipped"]) for g in gaps] == [
        ("aggregate", 0, 40, 70, 30)
    ]


def test_reconciling_twice_or_from_scratch_leaves_identical_tables(spark, settings_factory):
    settings = settings_factory()
    writer = AuditWriter(settings)
    seed_books(writer)
    writer.send("dc1", b"garbage")
    writer.flush()
    tables = (AUDIT_RECORDS, AUDIT_REJECTS, TIER_COUNTS, TIER_STATUS, COMPLETENESS)

    reconcile(spark, settings, now_ms=NOW)
    first = {t.name: rows(spark, settings, t, drop=()) for t in tables}
    marks_version = version_of(spark, settings, COMPLETENESS_WATERMARKS)
    again = reconcile(spark, settings, now_ms=NOW)
    assert again.read == 0
    assert {t.name: rows(spark, settings, t, drop=()) for t in tables} == first, (
        "a rerun changes nothing, not even updated_at"
    )
    assert version_of(spark, settings, COMPLETENESS_WATERMARKS) == marks_version, "no watermark moved: no commit"

    # Forget every offset: the whole audit topic is read again, and still nothing changes.
    spark.sql(f"DELETE FROM delta.`{lake_of(settings).path(SOURCE_OFFSETS.name)}`")
    replay = reconcile(spark, settings, now_ms=NOW)
    assert replay.read > 0 and replay.records == 0 and replay.rejects == 1
    assert {t.name: rows(spark, settings, t, drop=()) for t in tables} == first
    assert len(rows(spark, settings, AUDIT_REJECTS)) == 1


def test_a_session_skips_the_judging_while_nothing_is_new_and_no_window_is_due(spark, settings_factory):
    """--continuous: a run that reads nothing new before the first pending window turns due leaves every
    table as it is, and skips the judging; time alone turns that window, and a new process (empty
    memory) finds the same tables. (A new record ends the quiet: tests/audit/books/test_run_memory.py.)"""
    settings = settings_factory()
    writer = AuditWriter(settings)
    seed_books(writer)
    tables = (TIER_COUNTS, TIER_STATUS, COMPLETENESS)
    due = W1 + 10 * MINUTE + int(settings.grace_s * 1000)  # payments W1: pending (its replicator lags) until then
    memory = RunMemory()

    first = reconcile(spark, settings, now_ms=due - 60_000, memory=memory)
    assert not first.quiet and memory.next_due_ms == due
    assert completeness(spark, settings)[("dc1.payments", W1, "aggregate")][0] == "pending"
    assert remembers_the_open_windows(spark, settings, memory)
    books = {t.name: rows(spark, settings, t, drop=()) for t in tables}

    quiet = reconcile(spark, settings, now_ms=due - 1, memory=memory)
    assert quiet.quiet and quiet.windows == 0 and "none judged" in quiet.line()
    assert {t.name: rows(spark, settings, t, drop=()) for t in tables} == books

    turned = reconcile(spark, settings, now_ms=due, memory=memory)
    assert not turned.quiet and turned.windows > 0, "the window turned due: judged although nothing is new"
    assert completeness(spark, settings)[("dc1.payments", W1, "aggregate")][0] == "lagging"
    assert memory.next_due_ms is None, "nothing is pending any more"
    books = {t.name: rows(spark, settings, t, drop=()) for t in tables}
    assert reconcile(spark, settings, now_ms=due + 1).windows > 0, "a new process does every step"
    assert {t.name: rows(spark, settings, t, drop=()) for t in tables} == books, "and finds the same tables"


def test_a_cluster_never_started_is_reported_and_the_others_still_balance(spark, settings_factory):
    """A configured local cluster that was never started has no address at all: the run goes on
    without it, names it in the report and in `cluster_reads`, and rewrites that row only on a change."""
    from audit.contract.tables import CLUSTER_READS
    from audit.io.lake_read import table_version
    from audit.settings import ClusterSettings

    base = settings_factory()
    settings = base.replace(clusters=(*base.clusters, ClusterSettings(name="dc2")))
    writer = AuditWriter(base)
    seed_books(writer)

    report = reconcile(spark, settings, now_ms=NOW)

    assert list(report.unreachable) == ["dc2"] and "never started" in report.unreachable["dc2"]
    assert "UNREACHABLE: dc2" in report.line()
    books = completeness(spark, settings)
    assert books[("dc1.orders", W2, "aggregate")] == ("incomplete", 80, 77, 3, 0)
    reads = {r["cluster"]: (r["reachable"], r["error"]) for r in rows(spark, settings, CLUSTER_READS)}
    assert reads["dc1"] == reads["aggregate"] == (True, None)
    assert reads["dc2"][0] is False and "never started" in reads["dc2"][1]

    version = table_version(lake_of(settings), CLUSTER_READS.name)
    reconcile(spark, settings, now_ms=NOW + MINUTE)
    assert table_version(lake_of(settings), CLUSTER_READS.name) == version, "an unchanged state is not rewritten"
