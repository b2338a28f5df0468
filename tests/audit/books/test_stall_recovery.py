"""A replicator's stall that ends must show as lag at the tiers after it, never as a loss, whatever the order in
which the tiers' status records arrive.

The case: the replicator into the aggregate is stalled; the lake job's status says lag 0 on the aggregate's copy
of a topic, which is still empty. The replicator resumes, the aggregate counts the backlog (355 messages of a
window long past) and reports caught up. The lake's effective watermark taken as the lowest of its own and the
aggregate's newest would be past the window's end and grace: the lake final at 0 of 355, a LOSS emailed, and a
RECOVERED after it. The lake's lag 0 covers only what the aggregate held when the lake reported, and the
aggregate's watermark at that moment is unknown (its replicator stalled).
"""

from __future__ import annotations

from audit.books.run import reconcile
from audit.contract.tables import COMPLETENESS
from tests.audit.books.test_reconcile import MINUTE, NOW, W1, AuditWriter, completeness, rows

STALLED_AT = NOW - 5 * MINUTE  # the replicator's last status while stalled: its watermark unknown
EMPTY_COPY_SEEN_AT = NOW - 3 * MINUTE  # a lag 0 on a copy still empty (the lake's, the aggregate counter's)
CAUGHT_UP_AT = NOW - 1 * MINUTE  # the replicator and the aggregate's counter, once the backlog was copied
LANDED_AT = NOW - MINUTE // 2  # the next status of the tier that saw the copy empty: the backlog counted


def test_a_lake_status_older_than_the_backlogs_arrival_upstream_leaves_the_window_lagging(spark, settings_factory):
    settings = settings_factory()
    w = AuditWriter(settings)
    w.count("producer", "dc1", "clicks", W1, 355, to=("dc1",))
    w.count("dc1", "dc1", "clicks", W1, 355)
    w.count("aggregate", "aggregate", "dc1.clicks", W1, 355)  # the backlog, counted once the replicator resumed
    w.status("dc1", "dc1", "clicks", position=355)
    w.status("aggregate", "dc1", "clicks", lag=355, service="kaudit-mirror", emitted_at=STALLED_AT, position=0)
    w.status("lake", "aggregate", "dc1.clicks", service="kaudit-lake", emitted_at=EMPTY_COPY_SEEN_AT, position=0)
    w.status("aggregate", "dc1", "clicks", service="kaudit-mirror", emitted_at=CAUGHT_UP_AT, position=355)
    w.status("aggregate", "aggregate", "dc1.clicks", emitted_at=CAUGHT_UP_AT, position=355)
    w.flush()

    reconcile(spark, settings, now_ms=NOW)

    books = completeness(spark, settings)
    assert books[("dc1.clicks", W1, "aggregate")][0] == "complete"
    status = books[("dc1.clicks", W1, "lake")][0]
    assert status != "incomplete", (
        "the lake's lag 0 predates the backlog's arrival at the aggregate: lagging until the lake reports again, "
        f"not a loss (got {status})"
    )

    w.count("lake", "aggregate", "dc1.clicks", W1, 355)  # the lake lands the backlog and says so
    w.status("lake", "aggregate", "dc1.clicks", service="kaudit-lake", emitted_at=LANDED_AT, position=355)
    w.flush()
    reconcile(spark, settings, now_ms=NOW)
    lake = [r for r in rows(spark, settings, COMPLETENESS) if (r["logical_topic"], r["tier"]) == ("dc1.clicks", "lake")]
    assert [(r["status"], r["final"]) for r in lake] == [("complete", True)], "final once it reported again"


def test_a_backlog_delivered_after_the_counters_status_leaves_the_window_lagging(spark, settings_factory):
    """The same race within one tier: the aggregate's counter reports lag 0 on its copy, still empty, while the
    replicator into it is stalled; the replicator then delivers the backlog and reports caught up, in a later
    run of the books, before the counter's next status. The counter's lag 0 covers only what had arrived when
    it reported. (That its next status lifts the bound: tests/audit/contract/test_watermark_points.py.)"""
    settings = settings_factory()
    w = AuditWriter(settings)
    w.count("producer", "dc1", "clicks", W1, 355, to=("dc1",))
    w.count("dc1", "dc1", "clicks", W1, 355)
    w.status("dc1", "dc1", "clicks", position=355)
    w.status("aggregate", "dc1", "clicks", lag=355, service="kaudit-mirror", emitted_at=STALLED_AT, position=0)
    w.status("aggregate", "aggregate", "dc1.clicks", emitted_at=EMPTY_COPY_SEEN_AT, position=0)  # its counter
    w.flush()
    reconcile(spark, settings, now_ms=NOW)

    w.status("aggregate", "dc1", "clicks", service="kaudit-mirror", emitted_at=CAUGHT_UP_AT, position=355)
    w.flush()
    reconcile(spark, settings, now_ms=NOW)
    status = completeness(spark, settings)[("dc1.clicks", W1, "aggregate")][0]
    assert status != "incomplete", f"the backlog arrived after the counter's lag 0: lagging, not a loss (got {status})"
