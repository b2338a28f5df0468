"""The UI in real headless Chromium (Debian's chromium + chromedriver via selenium) over sample Delta tables."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pandas as pd
import pytest

from audit.settings import Settings
from dashboards import ids
from dashboards.sample import demo_frames, window_starts, write_frames
from dashboards.screenshots import recent_now

pytestmark = pytest.mark.browser

NOW = recent_now()
LOSS_WINDOW = pd.Timestamp(window_starts(NOW, 24, 10)[8])  # DEMO_FAULTS: 40 lost (28 in partition 2, 12 in 0)
CLUSTER_READS = pd.DataFrame(
    {
        "cluster": ["dc1", "dc2", "aggregate"],
        "reachable": [True, False, True],
        "error": [None, "dc2: never started (no /x/clusters/dc2/cluster.json)", None],
        "since": [pd.Timestamp(NOW)] * 3,
    }
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
    frames["tier_status"] = pd.concat([frames["tier_status"], never], ignore_index=True)
    write_frames(lake, {**frames, "cluster_reads": CLUSTER_READS})
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
    box = driver.find_element(By.ID, ids.SEARCH)
    box.send_keys("pay", Keys.ENTER)
    wait(lambda: parse_qs(urlparse(driver.current_url).query).get("q") == ["pay"], what="q=pay in the URL")
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
