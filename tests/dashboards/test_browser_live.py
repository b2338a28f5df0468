"""A live pipeline, on real brokers, Spark, SMTP and headless Chromium: a declared flow whose replicator never
started, then started. The books, the LAG email and every page are read as a user would, at both moments."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from audit.alerts.run import AlertJob, run_alerts
from audit.books.run import reconcile
from audit.contract.flows import silent_cause
from audit.contract.tables import TIER_STATUS
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.settings import AlertSettings, FlowSettings, SmtpSettings
from dashboards import ids
from tests.audit.alerts.test_alerts import smtp_server, subj  # noqa: F401 (a fixture)
from tests.audit.local.test_pipeline_e2e import books, count_cluster, mirror, produce
from tests.dashboards.test_browser import plot_data, tick_texts, wait

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.browser]


@contextmanager
def browsing(settings):
    """The UI over the lake as it stands now, in a new app, and a headless Chromium."""
    from dashboards.app import create_app
    from dashboards.serve import chromium, serving

    with serving(create_app(settings, lake=lake_of(settings))) as base, chromium() as driver:
        driver.set_window_size(1400, 1200)
        yield base, driver


def page_text(driver, url: str, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    driver.get(url)
    return wait(lambda: driver.find_element(By.ID, element_id).text, what=element_id)


def fits_the_page(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_a_flow_that_never_started_lags_with_its_cause_everywhere_then_completes(
    spark,
    settings_factory,
    topic_factory,
    smtp_server,  # noqa: F811 (the fixture)
):
    _server, inbox, port = smtp_server
    settings = settings_factory(
        flows=(FlowSettings(source="dc1", target="aggregate"),),
        smtp=SmtpSettings(host="127.0.0.1", port=port, retries=2, backoff_s=0.01, timeout_s=5),
        alerts=AlertSettings(default_recipients=("audit@example.com",), lag_minutes=30),
    )
    topic = topic_factory("dc1", partitions=3)
    logical, cause = f"dc1.{topic}", silent_cause("aggregate", f"dc1.{topic}")
    ensure_topics({"bootstrap.servers": settings.cluster("dc1").bootstrap_servers}, {settings.audit_topic: 1})
    produce(settings, [topic], 600)
    count_cluster(settings, "dc1", [topic])
    count_cluster(settings, "aggregate", [logical])  # the aggregate's counter runs; no replicator does
    reconcile(spark, settings)

    verdicts = books(spark, settings, logical)
    at_aggregate = [verdict for (_window, tier), verdict in verdicts.items() if tier == "aggregate"]
    assert len(at_aggregate) == 3, verdicts
    for status, expected, observed, _missing, _duplicated in at_aggregate:
        assert (status, observed) == ("lagging", 0) and expected > 0, "expected at the target: lagging, not complete"
    status = read_frame(lake_of(settings), TIER_STATUS.name).query("tier == 'aggregate' and topic == @topic")
    assert status["reporters"].tolist() == [""], "listed as a tier with no reporter yet"

    assert run_alerts(AlertJob.of(settings)).emails >= 1
    [message] = [m for m in inbox.messages if logical in subj(m)]
    assert subj(message).startswith(f"[kaudit] LAG {logical} at aggregate"), subj(message)
    assert cause in message.get_body(preferencelist=("plain",)).get_content() and "1970" not in str(message)

    with browsing(settings) as (base, driver):
        health = page_text(driver, f"{base}/?range=6h", ids.HEALTH)
        aggregate = next(line for line in health.splitlines() if line.startswith("aggregate"))
        assert "no watermark yet" in aggregate and cause in aggregate, health
        status = page_text(driver, f"{base}/lag?range=6h&q={topic}", ids.STATUS_TABLE)
        assert cause in status and "1970" not in status, status
        alerts = page_text(driver, f"{base}/alerts", ids.ALERTS_TABLE)
        assert cause in alerts and "1970" not in alerts and fits_the_page(driver), alerts

    mirror(settings, [topic], group=f"mirror-{settings.audit_topic}")  # copies dc1's audit topic too
    count_cluster(settings, "aggregate", [logical])
    reconcile(spark, settings)
    verdicts = books(spark, settings, logical)
    assert {(tier, verdict[0]) for (_w, tier), verdict in verdicts.items()} == {
        ("dc1", "complete"),
        ("aggregate", "complete"),
    }
    status = read_frame(lake_of(settings), TIER_STATUS.name).query("tier == 'aggregate' and topic == @topic")
    assert len(status) == 1 and status["reporters"].iloc[0], "its own status replaced the placeholder"
    run_alerts(AlertJob.of(settings))

    with browsing(settings) as (base, driver):
        health = page_text(driver, f"{base}/?range=6h", ids.HEALTH)
        assert cause not in health and "1970" not in health, health
        for query in ("", "&q=audit"):
            status = page_text(driver, f"{base}/lag?range=6h{query}", ids.STATUS_TABLE)
            assert "_audit" not in status and "1970" not in status, (query, status)
        driver.get(f"{base}/lag?range=6h")
        wait(lambda: plot_data(driver, ids.WATERMARKS), what="the watermark graph")
        for graph in (ids.WATERMARKS, ids.LAG):
            ticks = wait(lambda graph=graph: tick_texts(driver, graph), what=f"the ticks of {graph}")
            assert not any("µ" in t for t in ticks) and ticks[0] == "0", (graph, ticks)
        driver.get(f"{base}/topic?topic={logical}&range=6h")
        wait(lambda: plot_data(driver, ids.COMPLETENESS), what="the completeness graph")
        assert "new text" not in driver.find_element("tag name", "body").text
        alerts = page_text(driver, f"{base}/alerts", ids.ALERTS_TABLE)
        assert "_audit" not in alerts and "1970" not in alerts and fits_the_page(driver), alerts
