"""`kaudit demo --short`: the whole pipeline as the demo runs it, both injected faults found, and its UI served
from start to end (the waiting page before the books' first run, then the overview of the demo's topics)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from audit.local.processes import free_port
from dashboards import ids
from tests.conftest import cache_dir
from tests.dashboards.test_browser import plot_data, wait

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.browser]

WAITING = "waiting for the books' first run at "


class Demo:
    """`kaudit demo` running in the background, its stdout and stderr collected line by line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout_s: float) -> int:
        code = self.process.wait(timeout_s)
        for reader in self.readers:
            reader.join(10)
        return code

    def output(self) -> str:
        """The end of both streams: the demo's progress (stdout) and its services' logs (stderr)."""
        return "".join(self.stdout)[-4000:] + "\n--- stderr ---\n" + "".join(self.stderr)[-3000:]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def the_demo_ui_serves_the_waiting_page_then_the_overview(demo: Demo, port: int, lake: Path) -> str:
    """What the demo's own UI showed first (`waiting` or `overview`); fails if nothing listens while the demo runs."""
    from selenium.webdriver.common.by import By

    from dashboards.serve import chromium

    wait(lambda: listening(port) or not demo.running(), timeout_s=300, what="the demo's UI to listen")
    assert demo.running() and listening(port), "nothing listens where the demo serves its UI:\n" + demo.output()
    with chromium() as driver:
        driver.set_window_size(1400, 1000)
        driver.get(f"http://127.0.0.1:{port}/?range=24h")
        first = wait(
            lambda: (
                (WAITING in (text := driver.find_element(By.TAG_NAME, "body").text) and text)
                or (driver.find_elements(By.ID, ids.HEATMAP) and "overview")
            ),
            what="the waiting page or the overview",
        )
        if first != "overview":
            assert f"{WAITING}{lake}" in first, first
        else:  # the books ran before the UI answered: the overview is what it must show
            assert (lake / "completeness").exists()
        # The overview redraws its heatmap every ui.refresh_s; a reload now and then only makes it sooner.
        began = reloaded = time.monotonic()
        while not (heatmap := plot_data(driver, ids.HEATMAP)) or "dc1.orders" not in heatmap[0]["y"]:
            ended = "" if demo.running() and listening(port) else "the demo's UI went away before it showed its topics"
            assert not ended and time.monotonic() < began + 600, (ended or "no topics shown") + "\n" + demo.output()
            time.sleep(2)
            if time.monotonic() - reloaded > 30 and WAITING not in driver.find_element(By.TAG_NAME, "body").text:
                driver.refresh()
                reloaded = time.monotonic()
    return "waiting" if first != "overview" else "overview"


@pytest.mark.slow(minutes=3)
@pytest.mark.timeout(1200)
def test_short_demo_finds_the_loss_exactly_and_shows_the_stall_as_lag(tmp_path):
    ui_port = free_port()
    env = {
        **os.environ,
        "KAUDIT_STATE_DIR": str(tmp_path / "state"),
        "KAUDIT_CACHE_DIR": str(cache_dir()),
        "KAUDIT_SMTP_PORT": str(free_port()),
        "KAUDIT_UI_PORT": str(ui_port),
    }
    env.pop("KAUDIT_CONFIG", None)
    argv = [sys.executable, "-m", "audit.cli", "demo", "--short", "--exit-when-found", "--drop-count", "17"]
    demo = Demo([*argv, "--timeout-s", "600"], env)
    try:
        first = the_demo_ui_serves_the_waiting_page_then_the_overview(demo, ui_port, tmp_path / "state" / "lake")
        returncode = demo.wait(timeout_s=900)
    finally:
        if demo.running():
            demo.process.terminate()  # the demo stops its services and clusters on SIGTERM
            demo.wait(timeout_s=120)
    stdout = "".join(demo.stdout)
    assert returncode == 0, demo.output()
    found = re.search(r"lost in the window .* -> found: (.*)", stdout).group(1)
    assert "aggregate missing 17 of" in found and "lake missing 17 of" in found, found
    assert re.search(
        r"replicator dc2 -> aggregate stalled until the tables showed it \(\d+ s\) -> shown as lag, then recovered, "
        r"never as loss",
        stdout,
    )
    assert re.search(r"email \S+\.eml: .*dc1\.orders", stdout), "the loss email is in the mailbox"
    judged = [line for line in stdout.splitlines() if "] windows: " in line]
    assert judged and not [line for line in judged if "mismatch" in line], "no content mismatch where none was made"
    assert re.search(r"service ui +pid \d+ +running", stdout) and f"UI:        http://127.0.0.1:{ui_port}" in stdout
    print(f"the demo's UI showed first: {first}")
    assert not list((tmp_path / "state" / "run").glob("*.pid")), "every service was stopped"
