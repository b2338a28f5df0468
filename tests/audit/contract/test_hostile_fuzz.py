"""A short coverage-guided fuzz run (atheris) of each untrusted-input parser; `make fuzz` runs longer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

ROOT = Path(__file__).resolve().parents[3]
SECONDS_PER_TARGET = 3


@pytest.mark.parametrize("target", ["record", "settings", "headers"])
def test_a_bounded_fuzz_run_finds_nothing(tmp_path, target):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / "fuzz_inputs.py"),
            "--target",
            target,
            str(corpus),
            str(ROOT / "fuzz" / "seeds" / target),
            f"-max_total_time={SECONDS_PER_TARGET}",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(tmp_path.glob("crash-*"))
    runs = next(
        int(line.split(":")[-1])
        for line in result.stderr.splitlines()
        if line.startswith("stat::number_of_executed_units")
    )
    assert runs > 1000, f"only {runs} inputs tried"
