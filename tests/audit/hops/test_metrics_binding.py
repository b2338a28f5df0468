"""Metrics endpoints bind to loopback unless a setting says otherwise (issue 8, part 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from audit.local.processes import free_port

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[3]


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) of sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.parametrize(("metrics_host", "expected"), [(None, {"0100007F"}), ("0.0.0.0", {"00000000"})])
def test_counter_metrics_listen_on_loopback_unless_exposed(tmp_path, local_clusters, metrics_host, expected):
    config = tmp_path / "kaudit.toml"
    config.write_text(
        (f'metrics_host = "{metrics_host}"\n' if metrics_host else "")
        + f'[[clusters]]\nname = "dc1"\nbootstrap_servers = "{local_clusters["dc1"].bootstrap_servers}"\n'
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "audit.cli",
            "--config",
            str(config),
            "count",
            "--cluster",
            "dc1",
            "--group-id",
            f"metrics-{port}",
            "--metrics-port",
            str(port),
            "--max-seconds",
            "60",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not listening_addresses(port):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the metrics endpoint never listened"
            time.sleep(0.2)
        assert listening_addresses(port) == expected
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "kaudit_counter" in body
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        process.stderr.close()
