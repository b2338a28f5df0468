"""`kaudit demo --short`: the whole pipeline as the demo runs it, both injected faults found."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from audit.local.processes import free_port
from tests.conftest import cache_dir

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_short_demo_finds_the_loss_exactly_and_shows_the_stall_as_lag(tmp_path):
    env = {
        **os.environ,
        "KAUDIT_STATE_DIR": str(tmp_path / "state"),
        "KAUDIT_CACHE_DIR": str(cache_dir()),
        "KAUDIT_SMTP_PORT": str(free_port()),
    }
    env.pop("KAUDIT_CONFIG", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.cli",
            "demo",
            "--short",
            "--exit-when-found",
            "--no-ui",
            "--drop-count",
            "17",
            "--timeout-s",
            "600",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    # The demo's progress is on stdout, its services' logs on stderr: a failure shows the end of both.
    assert result.returncode == 0, result.stdout[-4000:] + "\n--- stderr ---\n" + result.stderr[-3000:]
    found = re.search(r"lost in the window .* -> found: (.*)", result.stdout).group(1)
    assert "aggregate missing 17 of" in found and "lake missing 17 of" in found, found
    assert re.search(
        r"replicator dc2 -> aggregate stalled until the tables showed it \(\d+ s\) -> shown as lag, then recovered, "
        r"never as loss",
        result.stdout,
    )
    assert re.search(r"email \S+\.eml: .*dc1\.orders", result.stdout), "the loss email is in the mailbox"
    judged = [line for line in result.stdout.splitlines() if "] windows: " in line]
    assert judged and not [line for line in judged if "mismatch" in line], "no content mismatch where none was made"
    assert not list((tmp_path / "state" / "run").glob("*.pid")), "every service was stopped"
