"""A transactional AuditedProducer through the whole pipeline on real brokers, Spark and Delta, no hand-made
audit record (DESIGN invariants 7 and 3): it commits 3,900 messages and aborts 600 on dc1; the dc1 counter, the
replicator (dropping exactly K of one window), the aggregate counter, the books and the alerts. The producer stays
the reference, its aborted messages are shown apart and never expected, dc1 is complete in every window, the
aggregate misses exactly K in the window of the drop, and the only email is that LOSS at the aggregate."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from audit.alerts.run import AlertJob, run_alerts
from audit.books.run import reconcile
from audit.contract.tables import COMPLETENESS, TIER_COUNTS
from audit.contract.windows import window_start
from audit.hops.faults import DropFault
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.io.transactions import abort_written
from audit.settings import AlertSettings, SmtpSettings
from producers.audited import AuditedProducer
from tests.audit.alerts.test_alerts import body, smtp_server, subj  # noqa: F401 (a fixture)
from tests.audit.local.test_pipeline_e2e import count_cluster, mirror

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MINUTE = 60_000
WINDOW_MINUTES = 10
START = window_start(time.time_ns() // 1_000_000 - 180 * MINUTE)  # three windows, all long past their grace
WINDOWS = (START, START + 10 * MINUTE, START + 20 * MINUTE)
DROPPED_WINDOW = WINDOWS[1]
PARTITIONS = 3
TRANSACTION_SIZE = 300
ABORTED = {3, 10}  # of 15 transactions: 13 committed (3,900 messages), 2 aborted (600)
K = 37  # dropped by the replicator, all in DROPPED_WINDOW


def produce_transactions(settings, topic: str) -> tuple[Counter, Counter]:
    """15 transactions of 300 messages over every partition and three windows; (committed, aborted) per window."""
    committed, aborted = Counter(), Counter()
    producer = AuditedProducer(
        config={
            "bootstrap.servers": settings.cluster("dc1").bootstrap_servers,
            "transactional.id": f"txn-{settings.audit_topic}",
            "linger.ms": 5,
        },
        cluster="dc1",
        audit_topic=settings.audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=0.2,  # emissions while transactions are open: they must not count them yet
        service="e2e",
    )
    producer.init_transactions(30)
    sequence = 0
    for transaction in range(15):
        producer.begin_transaction()
        for _ in range(TRANSACTION_SIZE):
            ts = START + (sequence * 7_919) % (3 * WINDOW_MINUTES * MINUTE)
            producer.produce(
                topic, key=b"k%d" % sequence, value=b"v%d" % sequence, timestamp=ts, partition=sequence % PARTITIONS
            )
            (aborted if transaction in ABORTED else committed)[window_start(ts, WINDOW_MINUTES)] += 1
            sequence += 1
        if transaction in ABORTED:
            abort_written(producer, 30)  # every message acknowledged first: aborted, none purged
        else:
            producer.commit_transaction(30)
    assert producer.close() == 0
    return committed, aborted


def test_an_audited_transactional_producer_through_the_books_and_the_alerts(
    spark,
    settings_factory,
    topic_factory,
    smtp_server,  # noqa: F811 (the fixture)
):
    _server, inbox, port = smtp_server
    settings = settings_factory(
        smtp=SmtpSettings(host="127.0.0.1", port=port, retries=2, backoff_s=0.01, timeout_s=5),
        alerts=AlertSettings(default_recipients=("audit@example.com",)),
    )
    topic = topic_factory("dc1", partitions=PARTITIONS)
    replica = f"dc1.{topic}"
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    committed, aborted = produce_transactions(settings, topic)
    assert set(committed) == set(aborted) == set(WINDOWS)
    assert sum(committed.values()) == 3_900 and sum(aborted.values()) == 600

    count_cluster(settings, "dc1", [topic])
    fault = DropFault(f"^{topic}$", count=K, windows_ms=(DROPPED_WINDOW,), window_minutes=WINDOW_MINUTES)
    mirror(settings, [topic], group=f"mirror-{settings.audit_topic}", fault=fault)
    assert fault.dropped == K
    count_cluster(settings, "aggregate", [replica])
    report = reconcile(spark, settings)
    assert report.rejects == 0

    lake = lake_of(settings)
    verdict = ["reference_tier", "expected", "observed", "missing", "duplicated", "status", "final"]
    judged = read_frame(lake, COMPLETENESS.name).query("topic == @topic")
    books = {
        (int(r.window_start.timestamp() * 1000), r.tier): tuple(getattr(r, c) for c in verdict)
        for r in judged.itertuples(index=False)
    }
    expected_books = {}
    for window, n in committed.items():
        lost = K if window == DROPPED_WINDOW else 0
        expected_books[(window, "dc1")] = ("producer", n, n, 0, 0, "complete", True)
        status = "incomplete" if lost else "complete"
        expected_books[(window, "aggregate")] = ("producer", n, n - lost, lost, 0, status, True)
    assert books == expected_books, "dc1 complete against the producer; the aggregate misses the replicator's K"

    counted = read_frame(lake, TIER_COUNTS.name).query("topic == @topic and tier == 'producer'")
    producer_rows = {
        int(r.window_start.timestamp() * 1000): (r.count, r.aborted, r.unknown) for r in counted.itertuples(index=False)
    }
    assert producer_rows == {w: (committed[w], aborted[w], False) for w in WINDOWS}, "aborted apart, vouched for"
    assert counted["count"].sum() == 3_900 and counted["aborted"].sum() == 600

    alerts = run_alerts(AlertJob.of(settings), now=datetime.now(UTC))
    assert alerts.exit_code == 0 and alerts.emails == 1, alerts.summary()
    [message] = inbox.messages
    window = datetime.fromtimestamp(DROPPED_WINDOW / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert subj(message).startswith(f"[kaudit] LOSS {replica} at aggregate: ") and window in subj(message)
    text = body(message, "plain")
    [row] = [line for line in text.splitlines() if line.startswith("topic: ")]  # none at dc1: aborted never expected
    n = committed[DROPPED_WINDOW]
    assert row.startswith(f"topic: {replica} | tier: aggregate | window: {window} | "), row
    assert f"| expected: {n:,} | observed: {n - K:,} | missing: {K} | duplicated: 0 |" in row, row
    assert "dc1 -> aggregate (the replicator)" in row, row
