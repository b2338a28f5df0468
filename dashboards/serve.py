"""Serve the UI in a background thread and drive it with headless Chromium: for the browser tests and
`python -m dashboards.screenshots`. Chromium and chromedriver are Debian's (`make setup` installs them)."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(app, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """The Dash app's Flask server on a loopback port in a thread; yields its base URL, stops on exit."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        # One line per request is noise here, and werkzeug's logger writes it to a stderr that
        # pytest may already have closed when a late request of the browser arrives.
        def log_request(self, *args, **kwargs) -> None:
            pass

    server = make_server(host, port or free_port(), app.server, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="kaudit-ui", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium driven by selenium through Debian's chromedriver, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    browser_path = shutil.which("chromium") or "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="kaudit-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
