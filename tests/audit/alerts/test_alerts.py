"""Alerts against a real SMTP server on loopback (aiosmtpd) and real Delta tables (deltalake)."""

from __future__ import annotations

import email
import logging
import statistics
from datetime import UTC, datetime
from email import policy

import pandas as pd
import pytest
from aiosmtpd.controller import Controller

from audit.alerts.mail import subject
from audit.alerts.rules import Alert, alert_id, lag_alerts
from audit.alerts.run import AlertJob, read_log, run_alerts
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.local.processes import free_port
from audit.settings import AlertRoute, AlertSettings, Settings, SmtpSettings
from dashboards.sample import (
    Drop,
    Duplicate,
    Lagging,
    Loss,
    SampleSpec,
    SendFailed,
    sample_frames,
    window_starts,
    write_frames,
)

NOW = datetime(2025, 3, 4, 12, 3, tzinfo=UTC)
UI = "http://ui.example:8050"


class Inbox:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        message = email.message_from_bytes(envelope.content, policy=policy.default)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"


class Server:
    """aiosmtpd on a fixed loopback port that can go down and come back (a new controller each time)."""

    def __init__(self, inbox: Inbox, port: int) -> None:
        self.inbox, self.port, self.controller = inbox, port, None

    def start(self) -> None:
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def smtp_server():
    inbox = Inbox()
    server = Server(inbox, free_port())
    server.start()
    yield server, inbox, server.port
    server.stop()


def settings_for(tmp_path, port: int, **alerts) -> Settings:
    return Settings.default().replace(
        state_dir=tmp_path,
        smtp=SmtpSettings(host="127.0.0.1", port=port, retries=2, backoff_s=0.01, timeout_s=5),
        alerts=AlertSettings(
            ui_url=UI,
            default_recipients=("audit@example.com",),
            routes=(AlertRoute(pattern=r"^dc1\.orders$", recipients=("orders-oncall@example.com",)),),
            **alerts,
        ),
    )


def seed(settings: Settings, *faults, **spec) -> dict[str, pd.DataFrame]:
    frames = sample_frames(SampleSpec(now=NOW, topics=("orders", "payments", "clicks"), faults=list(faults), **spec))
    write_frames(lake_of(settings), frames)
    return frames


def subj(message) -> str:
    """The subject as a mail reader shows it (long subjects are folded on the wire)."""
    return " ".join(str(message["Subject"]).split())


def body(message, subtype: str) -> str:
    return message.get_body(preferencelist=(subtype,)).get_content()


def test_a_seeded_loss_sends_exactly_one_email_with_the_windows_and_a_link(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    frames = seed(settings, Loss("orders", "aggregate", 3, 40), SendFailed("orders", 3, 2))
    expected = int(frames["completeness"].query("topic == 'orders' and tier == 'producer'")["expected"].iloc[3])
    pct = 100.0 * (expected - 40) / expected

    report = run_alerts(AlertJob.of(settings), now=NOW)

    assert (report.new, report.emails, report.sent, report.pending, report.exit_code) == (2, 1, 2, 0, 0)
    [message] = inbox.messages
    assert subj(message) == f"[kaudit] LOSS dc1.orders at aggregate: {pct:.2f}% in 2025-03-04 10:40 UTC (+1 more)"
    assert message["To"] == "orders-oncall@example.com" and message["From"] == "kaudit@localhost"
    text = body(message, "plain")
    assert (
        f"topic: dc1.orders | tier: aggregate | window: 2025-03-04 10:40 UTC | expected: {expected:,} | "
        f"observed: {expected - 40:,} | missing: 40" in text
    )
    assert "tier: lake | window: 2025-03-04 10:40 UTC" in text
    assert "lost between dc1 -> aggregate (the replicator)" in text
    assert "the producers failed to send 2 message(s) in this window" in text
    assert f"{UI}/topic?topic=dc1.orders&window=2025-03-04T10%3A40Z&tier=aggregate" in text
    html = body(message, "html")
    assert "<th>missing</th>" in html and "<td>40</td>" in html and 'href="http://ui.example:8050/topic?' in html
    # The log holds both, sent; a rerun (and a later one) sends nothing more.
    log = read_log(lake_of(settings))
    assert sorted(log["tier"]) == ["aggregate", "lake"] and set(log["state"]) == {"sent"}
    assert set(log["attempts"]) == {1} and log["sent_at"].notna().all()
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0
    assert len(inbox.messages) == 1


def test_the_loss_email_names_the_partitions_that_lost_messages_beside_the_hop(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    seed(settings, Loss("orders", "aggregate", 3, 40, partition=2), Loss("orders", "aggregate", 3, 5, partition=0))
    counts = read_frame(lake_of(settings), "tier_counts").query("topic == 'orders' and tier == 'aggregate'")
    lost = counts[counts["window_start"] == pd.Timestamp(window_starts(NOW, 12, 10)[3])]
    assert dict(lost["by_partition"].iloc[0]) == {0: 353, 1: 358, 2: 318}  # as the hops report by default

    run_alerts(AlertJob.of(settings), now=NOW)

    [message] = inbox.messages
    text, html = body(message, "plain"), body(message, "html")
    for tier in ("aggregate", "lake"):
        assert f"tier: {tier} | window: 2025-03-04 10:40 UTC" in text
        assert f"aggregate is short; {tier} misses 40 in partition 2, 5 in partition 0" in text
        assert f"{tier} misses 40 in partition 2, 5 in partition 0" in html
    assert "lost between dc1 -> aggregate (the replicator)" in text and "partition 1" not in text
    causes = read_log(lake_of(settings)).set_index("tier")["cause"]
    assert causes["aggregate"].startswith("lost between dc1 -> aggregate (the replicator): ")
    assert causes["aggregate"].endswith("aggregate misses 40 in partition 2, 5 in partition 0")


def test_a_lagging_tier_gets_no_loss_email_and_one_lag_email(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port, lag_minutes=120)
    frames = seed(settings, Lagging("clicks", "lake", behind_minutes=45, lag=5000))
    lagging = frames["completeness"].query("topic == 'clicks' and tier == 'lake' and status == 'lagging'")
    assert (lagging["missing"] > 0).all() and len(lagging) >= 4  # short, but not final: must not alert

    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0
    assert inbox.messages == []

    settings = settings.replace(alerts=settings.alerts.replace(lag_minutes=30))
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.new, report.emails) == (1, 1)
    [message] = inbox.messages
    assert subj(message) == "[kaudit] LAG dc1.clicks at lake: lake is 45 min behind (watermark 2025-03-04 11:18 UTC)"
    assert message["To"] == "audit@example.com"
    assert "lag 5,000 messages" in body(message, "plain")
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0 and len(inbox.messages) == 1


def test_one_recovery_email_when_an_alerted_window_becomes_complete(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    seed(settings, Duplicate("payments", "lake", 5, 7))
    run_alerts(AlertJob.of(settings), now=NOW)
    [over] = inbox.messages
    assert subj(over).startswith("[kaudit] DUPLICATES dc1.payments at lake: ")
    assert "duplicated: 7" in body(over, "plain")

    seed(settings)  # the reconciliation rewrote the window: complete now
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.new, report.emails) == (1, 1)
    recovery = inbox.messages[1]
    assert subj(recovery) == "[kaudit] RECOVERED dc1.payments at lake: 100.00% in 2025-03-04 11:00 UTC"
    assert "complete now" in body(recovery, "plain")
    assert run_alerts(AlertJob.of(settings), now=NOW).new == 0 and len(inbox.messages) == 2
    states = read_log(lake_of(settings)).set_index("kind")["state"].to_dict()
    assert states == {"over": "sent", "recovery": "sent"}


def test_smtp_down_keeps_the_alert_pending_then_sends_it_once(tmp_path, smtp_server):
    controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    seed(settings, Loss("payments", "lake", 2, 5))
    controller.stop()
    slept: list[float] = []

    report = run_alerts(AlertJob.of(settings), now=NOW, sleep=slept.append)

    assert (report.new, report.emails, report.pending, report.exit_code) == (1, 0, 1, 3)
    assert "unreachable after 2 attempt(s)" in report.errors[0]
    assert slept == [0.01]
    [row] = read_log(lake_of(settings)).itertuples()
    assert (row.state, row.attempts, row.kind) == ("pending", 2, "loss") and "unreachable" in row.last_error

    controller.start()  # back, on the same port
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.new, report.emails, report.sent, report.pending, report.exit_code) == (0, 1, 1, 0, 0)
    [message] = inbox.messages
    assert subj(message).startswith("[kaudit] LOSS dc1.payments at lake: ")
    [row] = read_log(lake_of(settings)).itertuples()
    assert (row.state, row.attempts, row.last_error) == ("sent", 3, None)
    assert run_alerts(AlertJob.of(settings), now=NOW).emails == 0 and len(inbox.messages) == 1


def test_a_pending_loss_that_recovered_before_delivery_is_resolved_not_sent(tmp_path, smtp_server):
    controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    seed(settings, Loss("payments", "lake", 2, 5))
    controller.stop()
    run_alerts(AlertJob.of(settings), now=NOW, sleep=lambda _s: None)
    controller.start()
    seed(settings)
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.resolved, report.emails) == (1, 0) and inbox.messages == []
    assert read_log(lake_of(settings))["state"].tolist() == ["resolved"]


def test_alerts_without_recipients_are_logged_as_failed(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port).replace(alerts=AlertSettings(ui_url=UI))
    seed(settings, Loss("clicks", "dc1", 1, 3))
    report = run_alerts(AlertJob.of(settings), now=NOW)
    assert (report.failed, report.exit_code, inbox.messages) == (3, 3, [])  # dc1, aggregate and lake are short
    assert set(read_log(lake_of(settings))["last_error"].str.slice(0, 13)) == {"no recipients"}


WEEK = 7 * 144 + 12  # windows: 7 days of history before the last 12 (the last final one: WEEK - 3)


def test_a_traffic_drop_to_5_percent_of_the_usual_sends_one_drop_email(tmp_path, smtp_server, caplog):
    """Seven days of history on real Delta tables: 5 % of the usual fires, 50 % does not, nor a topic with no
    traffic at that time before, nor a topic whose drop alerts are switched off."""
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port, drop_exclude=(r"^dc1\.clicks$",))
    last = WEEK - 3
    frames = sample_frames(
        SampleSpec(
            now=NOW,
            topics=("orders", "payments", "clicks"),
            windows=WEEK,
            faults=[Drop("orders", last, 0.05), Drop("payments", last, 0.5), Drop("clicks", last, 0.05)],
        )
    )
    # A topic that is new today: no history, so its drop is no alert either.
    new = sample_frames(SampleSpec(now=NOW, topics=("refunds",), faults=[Drop("refunds", 9, 0.05)]))
    frames = {name: pd.concat([frames[name], new[name]], ignore_index=True) for name in frames}
    write_frames(lake_of(settings), frames)
    producer = frames["completeness"].query("topic == 'orders' and tier == 'producer'").set_index("window_start")
    window = pd.Timestamp(window_starts(NOW, WEEK, 10)[last])
    usual = statistics.median(producer.loc[window - pd.Timedelta(days=k), "expected"] for k in range(1, 8))
    count = int(producer.loc[window, "expected"])
    assert 0.04 < count / usual < 0.06

    with caplog.at_level(logging.INFO, logger="audit.alerts.run"):
        report = run_alerts(AlertJob.of(settings), now=NOW)

    assert (report.new, report.emails, report.sent) == (1, 1, 1)
    [message] = inbox.messages
    pct = 100 * count / usual
    assert (
        subj(message)
        == f"[kaudit] DROP dc1.orders at producer: {pct:.2f}% of the usual traffic in 2025-03-04 11:40 UTC"
    )
    assert message["To"] == "orders-oncall@example.com"  # routed like every other alert
    text = body(message, "plain")
    assert f"expected: {round(usual):,} | observed: {count:,}" in text
    assert f"traffic dropped: producer counted {count:,} in this window, {pct:.1f}% of the median {usual:,.0f}" in text
    assert f"{UI}/topic?topic=dc1.orders&window=2025-03-04T11%3A40Z&tier=producer" in text
    [row] = read_log(lake_of(settings)).itertuples()
    assert (row.kind, row.status, row.state, row.tier) == ("drop", "drop", "sent", "producer")
    recorded = [r for r in caplog.records if r.getMessage() == "alert recorded"]
    assert [(r.kind, r.topic) for r in recorded] == [("drop", "dc1.orders")]
    assert (
        run_alerts(AlertJob.of(settings), now=NOW).new == 0 and len(inbox.messages) == 1
    )  # deduplicated like the others


# -- pure parts --------------------------------------------------------------------------------------


def test_the_alert_id_depends_on_kind_window_tier_and_status_only():
    start = datetime(2025, 3, 4, 10, 40, tzinfo=UTC)
    same = alert_id("loss", "dc1", "orders", pd.Timestamp(start), "lake", "incomplete")
    assert same == alert_id("loss", "dc1", "orders", start, "lake", "incomplete")
    others = {
        alert_id(*args)
        for args in [
            ("over", "dc1", "orders", start, "lake", "incomplete"),
            ("loss", "dc2", "orders", start, "lake", "incomplete"),
            ("loss", "dc1", "orders", start.replace(minute=50), "lake", "incomplete"),
            ("loss", "dc1", "orders", start, "aggregate", "incomplete"),
            ("loss", "dc1", "orders", start, "lake", "over"),
        ]
    }
    assert same not in others and len(others) == 5


@pytest.mark.parametrize(
    "watermark_minutes_ago, tier, expected",
    [
        (29, "lake", 0),  # within lag_minutes
        (31, "lake", 1),  # behind
        (300, "producer", 0),  # the reference tier is never lagging: a quiet producer is not lag
        (None, "lake", 0),  # no watermark yet
    ],
)
def test_lag_alerts(watermark_minutes_ago, tier, expected):
    watermark = (
        None if watermark_minutes_ago is None else pd.Timestamp(NOW) - pd.Timedelta(minutes=watermark_minutes_ago)
    )
    frame = pd.DataFrame(
        [
            dict(
                tier=tier,
                origin_cluster="dc1",
                topic="orders",
                watermark=watermark,
                lag=10,
                stalled=False,
                reporters="x",
            )
        ]
    )
    frame["watermark"] = pd.to_datetime(frame["watermark"], utc=True)
    assert len(lag_alerts(frame, now=NOW, lag_minutes=30, window_minutes=10, reference_tier="producer")) == expected


def _status_row(**row) -> pd.DataFrame:
    base = dict(tier="aggregate", origin_cluster="dc1", topic="orders", watermark=pd.Timestamp(0, tz="UTC"), lag=10)
    frame = pd.DataFrame([{**base, "stalled": False, "reporters": "kaudit-mirror@dc1", **row}])
    frame["watermark"] = pd.to_datetime(frame["watermark"], utc=True)
    return frame


def test_a_lag_alert_of_a_tier_with_no_watermark_yet_never_carries_a_1970_window():
    # issue 60: a status with lag and nothing delivered yet leaves the watermark at the epoch.
    (alert,) = lag_alerts(_status_row(), now=NOW, lag_minutes=30, window_minutes=10, reference_tier="producer")
    assert alert.window_start.year != 1970
    assert "1970" not in alert.cause and "received nothing yet" in alert.cause
    assert pd.Timestamp(alert.window_start) == pd.Timestamp(NOW).floor("10min")


def test_the_alerts_never_take_the_audit_topic_or_a_copy_of_it_for_a_data_topic(tmp_path):
    # issue 60: the replicator's status about dc1's `_audit` (copied to the aggregate as `dc1._audit`).
    from audit.alerts.run import BooksNow, decide

    settings = settings_for(tmp_path, 25)
    status = pd.concat([_status_row(), _status_row(topic="_audit")], ignore_index=True)
    empty = pd.DataFrame()
    books = BooksNow(
        completeness=empty,
        tier_status=status,
        tier_counts=empty,
        retention_gaps=empty,
        restatements=empty,
        alerts_log=empty,
    )
    alerts = decide(AlertJob.of(settings), books, now=NOW)
    assert [(a.kind, a.topic) for a in alerts] == [("lag", "orders")]


def test_the_subject_names_the_worst_window_and_counts_the_rest():
    start = datetime(2025, 3, 4, 10, 40, tzinfo=UTC)
    alerts = [
        Alert("loss", "dc1", "orders", start, "lake", "incomplete", completeness_pct=99.5),
        Alert("loss", "dc1", "orders", start.replace(minute=50), "aggregate", "incomplete", completeness_pct=90.0),
    ]
    assert subject(alerts) == "[kaudit] LOSS dc1.orders at aggregate: 90.00% in 2025-03-04 10:50 UTC (+1 more)"
    assert subject(alerts[:1]) == "[kaudit] LOSS dc1.orders at lake: 99.50% in 2025-03-04 10:40 UTC"


def test_kaudit_alert_exits_3_while_smtp_is_down_and_0_once_sent(tmp_path, smtp_server):
    import subprocess
    import sys

    server, inbox, port = smtp_server
    config = tmp_path / "kaudit.toml"
    config.write_text(
        f'state_dir = "{tmp_path}"\n[smtp]\nport = {port}\nretries = 1\n'
        '[alerts]\ndefault_recipients = ["audit@example.com"]\n'
    )
    seed(Settings(state_dir=tmp_path), Loss("orders", "lake", 4, 9))

    def kaudit_alert() -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "audit.cli",
                "--config",
                str(config),
                "alert",
                "--now",
                NOW.strftime("%Y-%m-%dT%H:%MZ"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    server.stop()
    down = kaudit_alert()
    assert down.returncode == 3, down.stderr
    assert "1 new, 0 email(s) sent carrying 0 alert(s), 1 pending" in down.stdout and "unreachable" in down.stdout
    server.start()
    back = kaudit_alert()
    assert back.returncode == 0, back.stderr
    assert "0 new, 1 email(s) sent carrying 1 alert(s), 0 pending" in back.stdout
    assert len(inbox.messages) == 1


def restate(settings: Settings, frames, topic: str, tier: str, window: int, before: str, at: pd.Timestamp) -> None:
    """Append a restatement of the (topic, tier, window) completeness row of `frames`: from `before` to what it holds."""
    from audit.contract.restatements import restatements
    from dashboards.sample import write_table

    [row] = frames["completeness"].query("topic == @topic and tier == @tier").iloc[[window]].to_dict("records")
    change = {
        **{name: row[name] for name in ("origin_cluster", "topic", "logical_topic", "window_start", "window_minutes")},
        **{name: row[name] for name in ("tier", "reference_tier")},
        "before_final": True,
        "before_updated_at": at - pd.Timedelta(minutes=1),
        "before_expected": row["expected"],
        "before_observed": row["expected"] if before == "complete" else row["expected"] - 5,
        "before_status": before,
        "after_expected": row["expected"],
        "after_observed": row["observed"],
        "after_status": row["status"],
        "after_final": True,
    }
    rows = restatements(pd.DataFrame([change])).drop(columns="reference_tier")
    rows = rows.assign(record_ids=[["late:1"]], restated_at=at, date=row["window_start"].date())
    write_table(lake_of(settings), "restatements", rows)


def test_a_window_that_flips_again_after_its_emails_sends_one_restated_email_per_flip(tmp_path, smtp_server):
    _controller, inbox, port = smtp_server
    settings = settings_for(tmp_path, port)
    minutes = [pd.Timestamp(NOW) + pd.Timedelta(minutes=m) for m in range(8)]
    seed(settings, Loss("payments", "lake", 2, 5))
    run_alerts(AlertJob.of(settings), now=minutes[0])  # the loss email
    frames = seed(settings)  # late counts fill the window: the recovery says so, no restated email
    restate(settings, frames, "payments", "lake", 2, "incomplete", minutes[1])
    run_alerts(AlertJob.of(settings), now=minutes[2])
    assert [subj(m).split()[1] for m in inbox.messages] == ["LOSS", "RECOVERED"]

    frames = seed(settings, Loss("payments", "lake", 2, 5))  # a recount: short again, the loss alert is known
    restate(settings, frames, "payments", "lake", 2, "complete", minutes[3])
    report = run_alerts(AlertJob.of(settings), now=minutes[4])
    assert (report.new, report.emails) == (1, 1)
    again = inbox.messages[-1]
    assert subj(again).startswith("[kaudit] RESTATED dc1.payments at lake: ") and "in 2025-03-04 10:30 UTC" in subj(
        again
    )
    text = body(again, "plain")
    assert "changed again after they were final" in text and "missing: 5" in text
    assert "restated complete -> incomplete at 2025-03-04 12:06 UTC" in text
    assert run_alerts(AlertJob.of(settings), now=minutes[5]).new == 0 and len(inbox.messages) == 3

    frames = seed(settings)  # and back: the recovery was sent already, so a restated email says it
    restate(settings, frames, "payments", "lake", 2, "incomplete", minutes[6])
    assert run_alerts(AlertJob.of(settings), now=minutes[7]).emails == 1
    assert "restated incomplete -> complete" in body(inbox.messages[-1], "plain")
    kinds = read_log(lake_of(settings)).groupby("kind")["state"].agg(list).to_dict()
    assert kinds == {"loss": ["sent"], "recovery": ["sent"], "restated": ["sent", "sent"]}
    assert run_alerts(AlertJob.of(settings), now=minutes[7]).new == 0 and len(inbox.messages) == 4
