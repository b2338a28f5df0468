"""`python -m dashboards.screenshots docs/img`: a PNG of every page over the sample tables (for README.md)."""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from audit.contract.windows import DEFAULT_WINDOW_MINUTES
from audit.settings import Settings
from dashboards.sample import demo_frames, window_starts, write_frames


def recent_now() -> datetime:
    """Three minutes into the current window: the UI keeps only the last ui.days of partitions."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now.replace(minute=now.minute - now.minute % DEFAULT_WINDOW_MINUTES + 3)


NOW = recent_now()
LOSS_WINDOW = window_starts(NOW, 24, DEFAULT_WINDOW_MINUTES)[8]  # DEMO_FAULTS: 40 of dc1.orders lost into aggregate
PAGES = {
    "overview": "/?range=6h",
    "topic": f"/topic?topic=dc1.orders&window={LOSS_WINDOW:%Y-%m-%dT%H:%M}Z&range=6h",
    "lag": "/lag?range=6h",
    "alerts": "/alerts",
}


def sample_lake(now: datetime = NOW) -> str:
    lake = tempfile.mkdtemp(prefix="kaudit-sample-lake-")
    write_frames(lake, demo_frames(now))
    return lake


def wait_for_graphs(driver, timeout_s: float = 30.0) -> None:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.find_elements(By.CSS_SELECTOR, ".main-svg") or driver.find_elements(
            By.CSS_SELECTOR, ".dash-spreadsheet"
        ):
            time.sleep(1.0)  # let plotly finish drawing
            return
        time.sleep(0.2)
    raise TimeoutError(f"no graph or table rendered at {driver.current_url}")


def main(out: str = "docs/img") -> int:
    from dashboards.app import create_app
    from dashboards.serve import chromium, serving

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    lake = sample_lake()
    if "alerts" in PAGES:
        _sample_alerts(lake)
    app = create_app(Settings.default().replace(state_dir=Path(lake)), lake=lake)
    with serving(app) as base, chromium() as driver:
        for name, path in PAGES.items():
            driver.set_window_size(1400, 1800 if name == "topic" else 1100)
            driver.get(base + path)
            wait_for_graphs(driver)
            driver.save_screenshot(str(folder / f"ui-{name}.png"))
            print(f"wrote {folder / f'ui-{name}.png'}")
    return 0


def _sample_alerts(lake: str) -> None:
    """Fill the alert log by a real alert run with no SMTP server: the alerts are recorded, then pending."""
    from audit.alerts.run import AlertJob, run_alerts
    from audit.settings import AlertSettings, SmtpSettings

    settings = Settings.default().replace(
        state_dir=Path(lake),
        lake_path=lake,
        smtp=SmtpSettings(port=1, retries=1, timeout_s=1),
        alerts=AlertSettings(default_recipients=("oncall@example.com",)),
    )
    run_alerts(AlertJob.of(settings), now=NOW, sleep=lambda _s: None)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
