"""issue 70, in headless Chromium: a UI started before the books' first run shows the waiting page naming the lake,
then the overview once the tables exist, in the same tab, with no reload and no restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.settings import Settings
from dashboards import ids
from dashboards.sample import demo_frames, write_frames
from dashboards.screenshots import recent_now
from tests.dashboards.test_browser import plot_data, wait

pytestmark = pytest.mark.browser


def test_the_ui_waits_for_the_books_first_run_then_shows_the_overview(tmp_path):
    from selenium.webdriver.common.by import By

    from dashboards.app import create_app
    from dashboards.serve import chromium, serving

    lake = tmp_path / "lake"
    app = create_app(Settings.default().replace(state_dir=Path(tmp_path)), lake=str(lake))
    with serving(app) as base, chromium() as driver:
        driver.get(base + "/?range=6h")
        waiting = wait(lambda: driver.find_element(By.ID, ids.WAITING).text, what="the waiting page")
        assert f"waiting for the books' first run at {lake}" in waiting, waiting
        driver.execute_script("window.before_the_books = true")  # gone if the page were reloaded

        write_frames(str(lake), demo_frames(recent_now()))
        [heatmap] = wait(lambda: plot_data(driver, ids.HEATMAP), timeout_s=60, what="the overview's heatmap")
        assert "dc1.orders" in heatmap["y"]
        assert driver.execute_script("return window.before_the_books === true"), "shown without a reload"
        assert "waiting for" not in driver.find_element(By.TAG_NAME, "body").text
