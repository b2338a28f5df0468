"""docs/architecture.md's module tree names every module of the code, and nothing that is gone: a module added
without its line, or moved without the tree, fails here with its path."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
LISTED_SUFFIXES = (".py", ".c", ".h", ".toml")


def tree_block() -> list[str]:
    text = DOC.read_text()
    start = text.index("```", text.index("### The modules"))
    return text[start + 3 : text.index("```", start + 3)].splitlines()


def listed_paths() -> set[str]:
    """The files the tree names: a line's first column is a folder (ending in /) or files (a, b), nested by indent."""
    folders: list[tuple[int, str]] = []
    paths = set()
    for line in tree_block():
        first = re.split(r"\s{2,}", line.strip())[0]
        if not first:
            continue
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        under = folders[-1][1] if folders else ""
        if first.endswith("/"):
            folders.append((indent, under + first))
        elif first.endswith(LISTED_SUFFIXES):
            paths.update(under + name.strip() for name in first.split(","))
    return paths


def code_paths() -> set[str]:
    python = [p for top in ("audit", "producers", "dashboards") for p in (ROOT / top).rglob("*.py")]
    native = [*(ROOT / "native").glob("*.[ch]"), ROOT / "native" / "build.py", *(ROOT / "native/plugin").glob("*.c")]
    return {str(p.relative_to(ROOT)) for p in [*python, *native] if p.name != "__init__.py"}


def test_the_tree_names_every_module():
    missing = sorted(code_paths() - listed_paths())
    assert missing == [], f"modules docs/architecture.md's tree does not name (add a line each): {missing}"


def test_the_tree_names_nothing_that_is_gone():
    gone = sorted(path for path in listed_paths() if not (ROOT / path).exists())
    assert gone == [], f"docs/architecture.md's tree names files that do not exist: {gone}"
