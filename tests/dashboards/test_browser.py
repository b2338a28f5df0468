"""The UI in real headless Chromium (Debian's chromium + chromedriver via selenium) over sample Delta tables."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pandas as pd
import pytest

from audit.settings import Settings
from dashboards import ids
from dashboards.figures import STATUS_COLORS
from dashboards.sample import demo_frames, window_starts, write_frames
from dashboards.screenshots import recent_now

pytestmark = pytest.mark.browser

NOW = recent_now()
LOSS_WINDOW = pd.Timestamp(window_starts(NOW, 24, 10)[8])  # DEMO_FAULTS: 40 lost (28 in partition 2, 12 in 0)
MISMATCH_WINDOW = pd.Timestamp(window_starts(NOW, 24, 10)[16])  # DEMO_FAULTS: shipments' partition 1 differs
CLUSTER_READS = pd.DataFrame(
    {
        "cluster": ["dc1", "dc2", "aggregate"],
        "reachable": [True, False, True],
        "error": [None, "dc2: never started (no /x/clusters/dc2/cluster.json)", None],
        "since": [pd.Timestamp(NOW)] * 3,
    }
)

LONG_CAUSE = (
    "lake is 45 min behind (watermark {w}); lag 5,200 messages; reported by kaudit-lake@aggregate, "
    "kaudit-counter@aggregate, kaudit-mirror@dc1 and every other reporter of this tier: THE-END-OF-THE-CAUSE"
)


def alert_row(topic: str, window_start: pd.Timestamp, cause: str) -> dict:
    return dict(
        alert_id=f"id-{topic}",
        kind="lag",
        origin_cluster="dc1",
        topic=topic,
        logical_topic=f"dc1.{topic}",
        window_start=window_start,
        tier="lake",
        status="lagging",
        missing=5200,
        cause=cause,
        recipients="data-platform-oncall@example.com, audit-team@example.com",
        subject=f"[kaudit] LAG dc1.{topic}",
        state="sent",
        attempts=1,
        last_error=None,
        created_at=pd.Timestamp(NOW),
        sent_at=pd.Timestamp(NOW),
        date=pd.Timestamp(NOW).date(),
    )


EPOCH = pd.Timestamp(0, tz="UTC")
ALERTS_LOG = pd.DataFrame(
    [
        alert_row("clicks", pd.Timestamp(NOW).floor("10min"), LONG_CAUSE.format(w=f"{NOW:%Y-%m-%d %H:%M} UTC")),
        # issue 60: what the alerts wrote for the audit topic's copy before they kept it out
        alert_row("_audit", EPOCH, "aggregate has received nothing yet of what is waiting for it; lag 5 messages"),
    ]
)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from dashboards.app import create_app
    from dashboards.serve import chromium, serving

    lake = str(tmp_path_factory.mktemp("lake"))
    frames = demo_frames(NOW)
    # dc2 never started: its counter never reported, so its tier has a status row with no real watermark
    never = (
        frames["tier_status"]
        .iloc[[0]]
        .assign(
            tier="dc2",
            origin_cluster="dc2",
            topic="orders",
            logical_topic="dc2.orders",
            watermark=pd.Timestamp(0, tz="UTC"),
        )
    )
    # issue 60: the replicator's status about dc1's audit topic (copied to the aggregate as `dc1._audit`), with
    # nothing delivered yet: its watermark is the epoch. No page may show it as a data topic or show 1970.
    audit = never.assign(tier="aggregate", origin_cluster="dc1", topic="_audit", logical_topic="dc1._audit")
    frames["tier_status"] = pd.concat([frames["tier_status"], never, audit], ignore_index=True)
    write_frames(lake, {**frames, "cluster_reads": CLUSTER_READS, "alerts": ALERTS_LOG})
    app = create_app(Settings.default().replace(state_dir=Path(lake)), lake=lake)
    with serving(app) as base, chromium() as driver:
        driver.set_window_size(1400, 1200)
        yield base, driver


def wait(condition, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # noqa: BLE001 - the page is still rendering
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def plot_data(driver, graph_id: str):
    return driver.execute_script(
        f"const gd = document.querySelector('#{graph_id} .js-plotly-plot'); return gd && gd.data && gd.data.length ? "
        "gd.data.map(t => ({name: t.name, x: plain(t.x), y: plain(t.y), customdata: t.customdata})) : null;"
        # plotly.py 6 ships numbers as typed arrays: {dtype, bdata, _inputArray} once plotly.js decoded them
        "function plain(a) { return a && a._inputArray ? Array.from(a._inputArray) : a; }"
    )


def same_time(text: str, moment: pd.Timestamp) -> bool:
    return (
        pd.Timestamp(text).tz_localize("UTC") == moment
        if pd.Timestamp(text).tzinfo is None
        else pd.Timestamp(text) == moment
    )


def test_the_heatmap_shows_the_seeded_incomplete_window_and_a_click_opens_it(ui):
    base, driver = ui
    driver.get(base + "/?range=6h")
    [heatmap] = wait(lambda: plot_data(driver, ids.HEATMAP), what="the heatmap")
    row = heatmap["y"].index("dc1.orders")
    column = next(i for i, x in enumerate(heatmap["x"]) if same_time(x, LOSS_WINDOW))
    assert heatmap["customdata"][row][column] == "incomplete"
    assert heatmap["customdata"][heatmap["y"].index("dc1.users")][column] == "complete"

    # Click the cell where plotly draws it: data coordinates to pixels on the drag layer.
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    offset = driver.execute_script(
        f"const gd = document.querySelector('#{ids.HEATMAP} .js-plotly-plot'); const L = gd._fullLayout;"
        "const drag = gd.querySelector('.nsewdrag').getBoundingClientRect();"
        "const x = L.xaxis.l2p(L.xaxis.d2l(arguments[0])); const y = L.yaxis.l2p(L.yaxis.d2l(arguments[1]));"
        "return [x - drag.width / 2, y - drag.height / 2];",
        heatmap["x"][column],
        heatmap["y"][row],
    )
    drag = driver.find_element(By.CSS_SELECTOR, f"#{ids.HEATMAP} .nsewdrag")
    ActionChains(driver).move_to_element_with_offset(drag, int(offset[0]), int(offset[1])).click().perform()

    wait(lambda: urlparse(driver.current_url).path == "/topic", what="the topic page")
    query = parse_qs(urlparse(driver.current_url).query)
    assert query["topic"] == ["dc1.orders"]
    assert pd.Timestamp(query["window"][0]) == LOSS_WINDOW
    assert_the_correlation_graph_shows_the_gap(driver)


def assert_the_correlation_graph_shows_the_gap(driver) -> None:
    traces = wait(lambda: plot_data(driver, ids.CORRELATION), what="the correlation graph")
    counts = {t["name"]: dict(zip((pd.Timestamp(x) for x in t["x"]), t["y"])) for t in traces}
    at = {name: next(v for x, v in values.items() if same_time(str(x), LOSS_WINDOW)) for name, values in counts.items()}
    assert at["producer"] - at["aggregate"] == 40 and at["producer"] - at["lake"] == 40
    assert at["dc1"] == at["producer"]
    heading = wait(
        lambda: driver.execute_script("return document.querySelector('h3') && document.querySelector('h3').innerText")
    )
    assert heading.startswith(f"Window {LOSS_WINDOW:%Y-%m-%d %H:%M} UTC")


def test_an_email_deep_link_opens_the_topic_and_window(ui):
    base, driver = ui
    driver.get(f"{base}/topic?topic=dc1.orders&window={LOSS_WINDOW:%Y-%m-%dT%H:%M}Z&tier=aggregate")
    assert_the_correlation_graph_shows_the_gap(driver)
    cells = wait(
        lambda: driver.execute_script(
            f"return Array.from(document.querySelectorAll('#{ids.WINDOW_TABLE} td')).map(td => td.innerText)"
        ),
        what="the window table",
    )
    assert "aggregate" in cells and "incomplete" in cells and "40" in cells


def test_the_topic_page_names_the_partitions_that_lost_messages_and_how_many_each(ui):
    base, driver = ui
    driver.get(f"{base}/topic?topic=dc1.orders&window={LOSS_WINDOW:%Y-%m-%dT%H:%M}Z&tier=aggregate")
    rows = wait(
        lambda: driver.execute_script(
            f"const table = document.querySelector('#{ids.WINDOW_TABLE}'); if (!table) return null;"
            "const head = Array.from(table.querySelectorAll('th')).map(th => th.innerText.trim());"
            "return Array.from(table.querySelectorAll('tr')).map(tr => Array.from(tr.querySelectorAll('td')))"
            ".filter(tds => tds.length).map(tds => Object.fromEntries(tds.map((td, i) => [head[i], td.innerText])));"
        ),
        what="the window table",
    )
    by_tier = {row["tier"]: row for row in rows}
    for tier in ("aggregate", "lake"):
        assert by_tier[tier]["missing"] == "40"
        assert by_tier[tier]["missing_by_partition"] == "28 in partition 2, 12 in partition 0"
    assert by_tier["dc1"]["missing_by_partition"] == ""


def test_the_deep_link_keeps_its_window_and_picking_another_topic_navigates(ui):
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/topic?topic=dc1.orders&window={LOSS_WINDOW:%Y-%m-%dT%H:%M}Z")
    wait(lambda: plot_data(driver, ids.CORRELATION), what="the correlation graph")
    time.sleep(2)  # the dropdown has mounted and reported its value: the window must still be there
    assert parse_qs(urlparse(driver.current_url).query).get("window"), driver.current_url
    driver.find_element(By.ID, ids.TOPIC).click()  # opens the list of topics
    option = wait(
        lambda: next(o for o in driver.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text == "dc1.payments"),
        what="the dc1.payments option",
    )
    option.click()
    wait(
        lambda: parse_qs(urlparse(driver.current_url).query).get("topic") == ["dc1.payments"], what="topic=dc1.payments"
    )
    wait(lambda: driver.find_element(By.TAG_NAME, "h2").text == "Topic dc1.payments", what="the payments page")


def test_the_topic_search_filters_the_heatmap_and_stays_in_the_url(ui):
    base, driver = ui
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(base + "/?range=6h")
    wait(lambda: plot_data(driver, ids.HEATMAP), what="the heatmap")

    def search_for_pay() -> bool:
        # Typed again when lost: on a loaded machine the page can still be re-rendering the box when typed in.
        if parse_qs(urlparse(driver.current_url).query).get("q") == ["pay"]:
            return True
        box = driver.find_element(By.ID, ids.SEARCH)
        if box.get_attribute("value") != "pay":
            box.clear()
            box.send_keys("pay")
        box.send_keys(Keys.ENTER)
        return False

    wait(search_for_pay, what="q=pay in the URL")
    wait(lambda: plot_data(driver, ids.HEATMAP)[0]["y"] == ["dc1.payments"], what="only dc1.payments")
    driver.refresh()  # the state survives a reload: it is in the URL
    wait(lambda: plot_data(driver, ids.HEATMAP)[0]["y"] == ["dc1.payments"], what="dc1.payments after reload")
    assert driver.find_element(By.ID, ids.SEARCH).get_attribute("value") == "pay"


def test_the_lag_and_alert_pages_render(ui):
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.get(base + "/lag?range=6h")
    traces = wait(lambda: plot_data(driver, ids.WATERMARKS), what="the watermark graph")
    lake = next(t for t in traces if t["name"] == "lake")
    assert max(lake["y"]) > 30 and max(next(t for t in traces if t["name"] == "dc1")["y"]) < 1
    notice = driver.find_element(By.ID, ids.UNREACHABLE).text
    assert "dc2" in notice and "never started" in notice and "dc1" not in notice
    driver.get(base + "/alerts")
    wait(
        lambda: driver.execute_script(f"return document.querySelector('#{ids.ALERTS_TABLE}') !== null"),
        what="the alert table",
    )


def test_the_overview_is_honest_about_tiers_without_a_watermark_and_windows_in_flight(ui):
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.get(base + "/?range=24h")
    health = wait(lambda: driver.find_element(By.ID, ids.HEALTH).text, what="the tier health table")
    assert "1970" not in health and "no watermark yet" in health, health
    dc2 = next(line for line in health.splitlines() if line.startswith("dc2"))
    assert "no watermark yet" in dc2, dc2
    worst = driver.find_element(By.ID, ids.WORST).text
    assert "in_flight" in worst, worst
    clicks = next(line for line in worst.splitlines() if line.startswith("dc1.clicks"))
    assert " 100 " in f" {clicks} ", f"clicks' lake is only behind, its worst final window is whole: {clicks}"


def test_the_topic_page_shades_the_windows_not_final_yet(ui):
    base, driver = ui
    driver.get(base + "/topic?topic=dc1.clicks&range=24h")
    shaded = wait(
        lambda: driver.execute_script(
            f"const gd = document.querySelector('#{ids.COMPLETENESS} .js-plotly-plot');"
            "return gd && gd.layout && (gd.layout.shapes || []).filter(s => s.name === 'in flight').length;"
        ),
        what="shaded windows on the completeness graph",
    )
    assert shaded >= 5


def test_the_topic_page_marks_a_restated_window(ui):
    """DEMO_FAULTS: Restated("payments", "aggregate", 6, 5): final with 5 messages short, then counted late."""
    base, driver = ui
    restated = pd.Timestamp(window_starts(NOW, 24, 10)[6])
    driver.get(f"{base}/topic?topic=dc1.payments&window={restated:%Y-%m-%dT%H:%M}Z&range=6h")
    traces = wait(lambda: plot_data(driver, ids.COMPLETENESS), what="the completeness graph")
    [star] = [t for t in traces if t["name"] == "restated"]
    assert [pd.Timestamp(x).tz_localize("UTC") for x in star["x"]] == [restated]
    assert star["customdata"][0].startswith("aggregate: incomplete -> complete, observed ")
    cells = wait(
        lambda: driver.execute_script(
            f"return Array.from(document.querySelectorAll('#{ids.WINDOW_TABLE} td')).map(td => td.innerText)"
        ),
        what="the window table",
    )
    assert any(cell.startswith("incomplete -> complete, observed ") for cell in cells), cells


def tick_texts(driver, graph_id: str, axis: str = "ytick") -> list[str]:
    return driver.execute_script(
        f"return Array.from(document.querySelectorAll('#{graph_id} .{axis} text')).map(t => t.textContent)"
    )


def test_the_lag_axes_read_plain_minutes_and_messages_from_0(ui):
    """issue 60: 'minutes behind' read `80µ` (plotly's SI suffix) when every tier was nearly caught up."""
    base, driver = ui
    for query in ("range=6h", "range=6h&q=users"):
        driver.get(f"{base}/lag?{query}")
        wait(lambda: plot_data(driver, ids.WATERMARKS), what="the watermark graph")
        for graph in (ids.WATERMARKS, ids.LAG):
            ticks = wait(lambda graph=graph: tick_texts(driver, graph), what=f"the ticks of {graph}")
            assert not any("µ" in t or "m" == t[-1:] for t in ticks), (graph, query, ticks)
            assert ticks[0] == "0", (graph, query, ticks)


def test_the_lag_page_never_shows_the_audit_topic_or_1970(ui):
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.get(base + "/lag?range=24h&q=dc2")  # the table pages by 15 rows: search for the rows in question
    status = wait(lambda: driver.find_element(By.ID, ids.STATUS_TABLE).text, what="the tier status table")
    assert "dc2.orders" in status and "no watermark yet" in status and "1970" not in status, status
    driver.get(base + "/lag?range=24h&q=audit")
    status = wait(lambda: driver.find_element(By.ID, ids.STATUS_TABLE).text, what="the tier status table")
    assert "_audit" not in status and "1970" not in status, status


def test_the_completeness_chart_carries_no_stray_new_text_annotation(ui):
    """issue 60: each unlabelled 'in flight' band got plotly's placeholder annotation 'new text'."""
    base, driver = ui
    driver.get(base + "/topic?topic=dc1.clicks&range=24h")
    wait(lambda: plot_data(driver, ids.COMPLETENESS), what="the completeness graph")
    texts = wait(
        lambda: driver.execute_script(
            f"const gd = document.querySelector('#{ids.COMPLETENESS} .js-plotly-plot');"
            "return gd && gd._fullLayout && Array.from(gd.querySelectorAll('.annotation-text')).map(t => t.textContent);"
        ),
        what="the annotations",
    )
    assert "not final yet" in texts and "new text" not in texts, texts
    assert "new text" not in driver.find_element("tag name", "body").text


def test_the_alert_log_fits_the_page_and_never_shows_the_audit_topic_or_1970(ui):
    """issue 60: the alert log was wider than the page and its cause column cut off."""
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.get(base + "/alerts")
    text = wait(lambda: driver.find_element(By.ID, ids.ALERTS_TABLE).text, what="the alert table")
    assert "dc1.clicks" in text and "_audit" not in text and "1970" not in text, text
    fit = driver.execute_script(
        f"const t = document.querySelector('#{ids.ALERTS_TABLE}');"
        "const table = t.querySelector('table'); const box = t.getBoundingClientRect();"
        "const cause = Array.from(t.querySelectorAll('td')).find(td => td.innerText.includes('THE-END-OF-THE-CAUSE'));"
        "const c = cause.getBoundingClientRect();"
        "return {page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth,"
        " table: table.getBoundingClientRect().width, box: box.width, cause_right: c.right, box_right: box.right,"
        " cause_text: cause.innerText, cause_scroll: cause.scrollWidth, cause_client: cause.clientWidth};"
    )
    assert fit["page"] <= fit["view"], f"the page scrolls sideways: {fit}"
    assert fit["table"] <= fit["box"] + 1 and fit["cause_right"] <= fit["box_right"] + 1, f"the cause is cut: {fit}"
    assert fit["cause_scroll"] <= fit["cause_client"] + 1 and fit["cause_text"].endswith("THE-END-OF-THE-CAUSE"), fit


def test_a_mismatch_window_has_its_own_colour_and_legend_entry(ui):
    """DEMO_FAULTS: Mismatch("shipments", "aggregate", 16, partition=1): the counts balance, the content differs."""
    base, driver = ui
    driver.get(base + "/?range=6h")
    [heatmap] = wait(lambda: plot_data(driver, ids.HEATMAP), what="the heatmap")
    column = next(i for i, x in enumerate(heatmap["x"]) if same_time(x, MISMATCH_WINDOW))
    assert heatmap["customdata"][heatmap["y"].index("dc1.shipments")][column] == "mismatch"
    legend = driver.execute_script(
        f"const gd = document.querySelector('#{ids.HEATMAP} .js-plotly-plot'); const t = gd.data[0];"
        "return {ticks: t.colorbar.ticktext, scale: t.colorscale,"
        " drawn: Array.from(gd.querySelectorAll('.colorbar .cbaxis text, .colorbar text')).map(e => e.textContent)};"
    )
    assert "mismatch" in legend["ticks"] and "mismatch" in legend["drawn"], legend
    colours = {colour for _stop, colour in legend["scale"]}
    assert STATUS_COLORS["mismatch"] in colours and len(set(STATUS_COLORS.values())) == len(STATUS_COLORS)

    driver.get(f"{base}/topic?topic=dc1.shipments&window={MISMATCH_WINDOW:%Y-%m-%dT%H:%M}Z&tier=aggregate")
    traces = wait(lambda: plot_data(driver, ids.COMPLETENESS), what="the completeness graph")
    [marks] = [t for t in traces if t["name"] == "mismatch"]
    assert {pd.Timestamp(x).tz_localize("UTC") for x in marks["x"]} == {MISMATCH_WINDOW}
    assert "aggregate: content differs in partition 1" in marks["customdata"]
    drawn = driver.execute_script(
        f"const gd = document.querySelector('#{ids.COMPLETENESS} .js-plotly-plot');"
        "const entry = Array.from(gd.querySelectorAll('.legend .traces')).find(e => e.textContent === 'mismatch');"
        "return entry && getComputedStyle(entry.querySelector('.scatterpts, path.point')).fill;"
    )
    assert drawn == "rgb(227, 119, 194)", drawn  # STATUS_COLORS["mismatch"] in the legend
    cells = wait(
        lambda: driver.execute_script(
            f"return Array.from(document.querySelectorAll('#{ids.WINDOW_TABLE} tr')).map(tr =>"
            " Array.from(tr.querySelectorAll('td')).map(td => [td.innerText, getComputedStyle(td).backgroundColor]))"
            ".filter(r => r.length)"
        ),
        what="the window table",
    )
    statuses = {row[1][0]: row[1][1] for row in cells}
    assert statuses["mismatch"] == "rgb(227, 119, 194)", statuses
    aggregate = next(row for row in cells if row[0][0] == "aggregate")
    assert any(text == "1" for text, _background in aggregate), aggregate


def test_the_alert_log_is_readable_whole_in_a_1280_pixel_window(ui):
    """issue 70: at 1280 px the log was wider than the page, its cause column cut off behind a scrollbar."""
    base, driver = ui
    from selenium.webdriver.common.by import By

    driver.set_window_size(1280, 1000)
    try:
        driver.get(base + "/alerts")
        wait(lambda: "dc1.clicks" in driver.find_element(By.ID, ids.ALERTS_TABLE).text, what="the alert table")
        fit = driver.execute_script(
            f"const t = document.querySelector('#{ids.ALERTS_TABLE}');"
            "const cause = Array.from(t.querySelectorAll('td')).find(td => td.innerText.includes('THE-END-OF'));"
            "const c = cause.getBoundingClientRect(), box = t.getBoundingClientRect();"
            "return {view: document.documentElement.clientWidth, page: document.documentElement.scrollWidth,"
            " cause_right: c.right, box_right: box.right, box: box.width,"
            " table: t.querySelector('table').getBoundingClientRect().width, cause_text: cause.innerText,"
            " cause_scroll: cause.scrollWidth, cause_client: cause.clientWidth,"
            " wraps: c.height > 2 * parseFloat(getComputedStyle(cause).fontSize)};"
        )
    finally:
        driver.set_window_size(1400, 1200)
    assert fit["view"] <= 1280 and fit["page"] <= fit["view"], f"the page scrolls sideways: {fit}"
    assert fit["cause_right"] <= fit["view"] and fit["cause_right"] <= fit["box_right"] + 1, f"the cause is cut: {fit}"
    assert fit["table"] <= fit["box"] + 1, f"the table scrolls inside its box: {fit}"
    assert fit["cause_scroll"] <= fit["cause_client"] + 1 and fit["wraps"], f"the cause is clipped, not wrapped: {fit}"
    assert fit["cause_text"].endswith("THE-END-OF-THE-CAUSE"), fit
