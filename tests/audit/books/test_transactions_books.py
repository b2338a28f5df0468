"""Transactional producers through the books on real Kafka, Spark and Delta, from hand-made count records in the
audit topics: a producer that cannot vouch for its counts (an interceptor that saw acks of transactions later
aborted) is not the reference, its windows are judged against dc1 and no loss is cried at dc1, while a loss after
dc1 is still found exactly, with its alert; a producer that counts aborted messages apart stays the reference."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.alerts.run import AlertJob, decide, read_books
from audit.books.run import reconcile
from audit.contract.record import count_record, encode
from audit.contract.tables import AUDIT_RECORDS, COMPLETENESS, TIER_COUNTS
from audit.contract.windows import MS_PER_MINUTE, window_end
from audit.io.lake import lake_of
from tests.audit.books.test_digest_books import judge_by
from tests.audit.books.test_reconcile import FRESH, W1, W2, AuditWriter, rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

W3 = window_end(W2)
COMMITTED, ABORTED, K = 3_900, 600, 37


def send_count(writer: AuditWriter, tier: str, window: int, count: int, **flags) -> None:
    writer.sequence += 1
    cluster, topic = ("dc1", "orders") if tier in ("producer", "dc1") else ("aggregate", "dc1.orders")
    record = count_record(
        record_id=f"{tier}-x:{writer.sequence}",
        tier=tier,
        cluster=cluster,
        topic=topic,
        window_start_ms=window,
        count=count,
        by_partition={0: count},
        emitted_at_ms=FRESH,
        **flags,
    )
    writer.send(cluster, encode(record))


def seed(writer: AuditWriter) -> None:
    """W1: the producer counted the acks of aborted transactions too (unknown), dc1 and the aggregate what was
    committed; W2: the same, and the replicator dropped K; W3: a producer that counts aborted messages apart."""
    for window in (W1, W2):
        send_count(writer, "producer", window, COMMITTED + ABORTED - 100, unknown=True)
        send_count(writer, "producer", window, 100, unknown=True)
        send_count(writer, "dc1", window, COMMITTED)
    send_count(writer, "aggregate", W1, COMMITTED)
    send_count(writer, "aggregate", W2, COMMITTED - K)
    send_count(writer, "producer", W3, COMMITTED, aborted=ABORTED)
    send_count(writer, "dc1", W3, COMMITTED)
    send_count(writer, "aggregate", W3, COMMITTED)
    writer.status("dc1", "dc1", "orders")
    writer.status("aggregate", "aggregate", "dc1.orders")
    writer.status("aggregate", "dc1", "orders", service="kaudit-mirror")
    writer.flush()


@pytest.mark.parametrize("form", ["driver", "spark"])
def test_an_unknown_producer_is_judged_against_dc1_and_aborted_messages_are_shown_apart(
    spark, settings_factory, monkeypatch, form
):
    judge_by(form, monkeypatch)
    settings = settings_factory()
    seed(AuditWriter(settings))
    now_ms = W3 + 120 * MS_PER_MINUTE

    report = reconcile(spark, settings, now_ms=now_ms)

    assert report.rejects == 0
    verdict = ("reference_tier", "expected", "observed", "missing", "duplicated", "status", "final")
    books = {
        (int(r["window_start"].timestamp() * 1000), r["tier"]): tuple(r[c] for c in verdict)
        for r in rows(spark, settings, COMPLETENESS)
        if r["topic"] == "orders"
    }
    assert books == {
        (W1, "dc1"): ("dc1", COMMITTED, COMMITTED, 0, 0, "unknown", True),
        (W1, "aggregate"): ("dc1", COMMITTED, COMMITTED, 0, 0, "complete", True),
        (W2, "dc1"): ("dc1", COMMITTED, COMMITTED, 0, 0, "unknown", True),
        (W2, "aggregate"): ("dc1", COMMITTED, COMMITTED - K, K, 0, "incomplete", True),
        (W3, "dc1"): ("producer", COMMITTED, COMMITTED, 0, 0, "complete", True),
        (W3, "aggregate"): ("producer", COMMITTED, COMMITTED, 0, 0, "complete", True),
    }
    counts = {
        (int(r["window_start"].timestamp() * 1000), r["tier"]): (r["count"], r["aborted"], r["unknown"])
        for r in rows(spark, settings, TIER_COUNTS)
        if r["topic"] == "orders"
    }
    assert counts[(W1, "producer")] == (COMMITTED + ABORTED, 0, True), "the producer tier shown unknown"
    assert counts[(W3, "producer")] == (COMMITTED, ABORTED, False), "aborted shown apart, never expected"
    assert counts[(W3, "dc1")] == (COMMITTED, 0, False)
    stored = {r["record_id"]: (r["aborted"], r["unknown"]) for r in rows(spark, settings, AUDIT_RECORDS)}
    assert sorted(v for k, v in stored.items() if k.startswith("producer-")) == [(0, True)] * 4 + [(ABORTED, False)]

    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    job = AlertJob.of(settings)
    alerts = decide(job, read_books(lake_of(settings), now=now, lookback_hours=24), now=now)
    losses = [(a.topic, a.window_start.timestamp() * 1000, a.tier, a.missing) for a in alerts if a.kind == "loss"]
    assert losses == [("orders", W2, "aggregate", K)], "no loss at dc1; the replicator's K at the aggregate"
    (lost,) = [a for a in alerts if a.kind == "loss"]
    assert "dc1 -> aggregate (the replicator)" in lost.cause, lost.cause
