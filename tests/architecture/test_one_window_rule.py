"""Minutes to milliseconds, window lengths and window ends are computed in one place, audit/contract/windows.py
(its constants generated into the C header and the Java interceptor's constants): a literal for a minute in
milliseconds, a 10-minute window or a day in minutes anywhere else fails here with its file and line.

The contract's own tests and the table of cases (tests/contract_cases.py) keep their literals: they are the
independent statement the contract is held to."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("audit", "producers", "dashboards", "bench", "notebooks", "tests", "native", "jvm")
SUFFIXES = {".py", ".c", ".h", ".java", ".ipynb"}
# The rule's own home, the oracles held against it, and files generated from it.
EXEMPT = (
    "audit/contract/",
    "tests/audit/contract/",
    "tests/contract_cases.py",
    "tests/architecture/",
    "jvm/interceptor/src/main/java/io/kaudit/Contract.java",
)
WINDOW_LITERAL = re.compile(r"[*/]\s*60_?000(?![_0-9])|(?<![_0-9])600_?000(?![_0-9])|(?<![_0-9])1_?440(?![_0-9])")


def offending_lines(text: str) -> list[tuple[int, str]]:
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if WINDOW_LITERAL.search(line)]


def scanned_files() -> list[Path]:
    files = [p for top in SCANNED for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if not str(p.relative_to(ROOT)).startswith(EXEMPT)]


def test_no_window_arithmetic_outside_the_contract():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in scanned_files()
        for number, line in offending_lines(path.read_text(errors="replace"))
    ]
    assert found == [], "window arithmetic outside audit/contract/windows.py (use its functions):\n" + "\n".join(found)


def test_the_pattern_finds_each_form_and_nothing_else():
    found = ["m * 60_000", "ms / 60000", "600_000", "start + 600000", "1440 // m", "1_440"]
    left = ["3_600_000", "60_000_000_000", "TIMEOUT_MS = 60_000", "16000000", "14400"]
    assert all(offending_lines(text) for text in found)
    assert not any(offending_lines(text) for text in left)
