"""Mismatch alerts (a final window whose counts balance and whose content digest differs) against a real SMTP
server on loopback (aiosmtpd) and real Delta tables: routed, deduplicated, retried and logged as a loss is."""

from __future__ import annotations

import pandas as pd

from audit.alerts.rules import MISMATCH_CAUSE, describe_partitions, mismatched_partitions, window_alerts
from audit.alerts.run import AlertJob, read_log, run_alerts
from audit.io.lake import lake_of
from dashboards.sample import Mismatch
from tests.audit.alerts.test_alerts import NOW, UI, body, seed, settings_for, smtp_server, subj  # noqa: F401


def test_a_final_mismatch_sends_one_routed_email_naming_the_partitions_then_its_recovery(tmp_path, smtp_server):  # noqa: F811
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    frames = seed(settings, Mismatch("orders", "aggregate", 3, partition=2))
    judged = frames["completeness"].query("topic == 'orders' and status == 'mismatch'")
    assert sorted(judged["tier"]) == ["aggregate", "lake"] and (judged["missing"] == 0).all()

    report = run_alerts(AlertJob.of(settings), now=NOW)

    assert (report.new, report.emails, report.sent, report.exit_code) == (2, 1, 2, 0)
    [message] = inbox.messages
    assert subj(message) == (
        "[kaudit] MISMATCH dc1.orders at aggregate: counts balance, content differs in 2025-03-04 10:40 UTC (+1 more)"
    )
    assert message["To"] == "orders-oncall@example.com"  # routed as a loss of dc1.orders is
    text, html = body(message, "plain"), body(message, "html")
    for tier in ("aggregate", "lake"):
        assert f"topic: dc1.orders | tier: {tier} | window: 2025-03-04 10:40 UTC" in text
        assert f"{tier} differs from producer in partition 2" in text and f"{tier} differs from producer" in html
        assert f"{UI}/topic?topic=dc1.orders&window=2025-03-04T10%3A40Z&tier={tier}" in text
    assert MISMATCH_CAUSE in text and "first between dc1 -> aggregate (the replicator)" in text
    assert "content digest of the partitions named differs" in text
    log = read_log(lake_of(settings))
    assert set(log["kind"]) == {"mismatch"} and set(log["status"]) == {"mismatch"} and set(log["state"]) == {"sent"}
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0 and len(inbox.messages) == 1

    seed(settings)  # a recount: the window's content agrees again
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.new, report.emails) == (2, 1)
    assert subj(inbox.messages[1]).startswith("[kaudit] RECOVERED dc1.orders at ")
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0 and len(inbox.messages) == 2


def test_smtp_down_keeps_a_mismatch_pending_then_sends_it_once(tmp_path, smtp_server):  # noqa: F811
    controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    seed(settings, Mismatch("payments", "lake", 2, partition=1))
    controller.stop()

    report = run_alerts(AlertJob.of(settings), now=NOW, sleep=lambda _s: None)

    assert (report.new, report.emails, report.pending, report.exit_code) == (1, 0, 1, 3)
    [row] = read_log(lake_of(settings)).itertuples()
    assert (row.kind, row.state, row.attempts) == ("mismatch", "pending", 2)
    assert "first between aggregate -> lake (the lake job)" in row.cause
    assert row.cause.endswith("lake differs from producer in partition 1")
    controller.start()
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.new, report.emails, report.sent, report.exit_code) == (0, 1, 1, 0)
    [message] = inbox.messages
    assert subj(message).startswith("[kaudit] MISMATCH dc1.payments at lake: ") and message["To"] == "audit@example.com"
    assert run_alerts(AlertJob.of(settings), now=NOW).emails == 0 and len(inbox.messages) == 1


def test_a_mismatch_in_a_window_not_final_yet_sends_nothing(tmp_path, smtp_server):  # noqa: F811
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    frames = seed(settings, Mismatch("clicks", "aggregate", 11))  # the window still open
    assert "mismatch" not in set(frames["completeness"]["status"])
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0 and inbox.messages == []


def test_the_partitions_named():
    class Row:
        mismatched_partitions = [11, 0, 2, *range(20, 30)]

    assert mismatched_partitions(Row()) == [0, 2, 11, *range(20, 30)]
    assert describe_partitions([2]) == "partition 2"
    assert describe_partitions([0, 2]) == "partitions 0, 2"
    assert describe_partitions(mismatched_partitions(Row())).endswith("25, 26 and 3 more")
    assert mismatched_partitions(object()) == [] and describe_partitions([]) == ""


def test_an_over_or_incomplete_window_names_the_partitions_whose_content_differs_too():
    def judged(status: str, missing: int, duplicated: int) -> dict:
        return {
            "origin_cluster": "dc1",
            "topic": "orders",
            "logical_topic": "dc1.orders",
            "window_start": pd.Timestamp(NOW).floor("10min") - pd.Timedelta(hours=1),
            "tier": "aggregate",
            "tier_order": 2,
            "reference_tier": "producer",
            "expected": 20,
            "observed": 20 - missing + duplicated,
            "missing": missing,
            "duplicated": duplicated,
            "completeness_pct": 100.0 * (20 - missing + duplicated) / 20,
            "status": status,
            "final": True,
            "mismatched_partitions": [1],  # balanced, content differs (audit/contract/completeness.py)
        }

    tier_status = pd.DataFrame(columns=["origin_cluster", "topic", "tier", "stalled", "lag", "watermark", "reporters"])
    for status, missing, duplicated in (("over", 0, 2), ("incomplete", 3, 0)):
        completeness = pd.DataFrame([judged(status, missing, duplicated)])
        [alert] = window_alerts(completeness, tier_status, pd.DataFrame(), now=NOW, lag_minutes=30)
        assert alert.kind == ("over" if status == "over" else "loss"), alert
        assert "content differs though the counts balance in partition 1" in alert.cause, alert.cause
