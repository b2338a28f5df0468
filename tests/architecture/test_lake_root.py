"""The lake root is one setting, bound once (invariant 13 in docs/reliability.md): only audit/io/lake.py reads
`lake_path` and builds table locations, and only it and delta_io (its table creation) call `deltalake`, so no read
or write can leave out the storage settings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINDS_THE_ROOT = {"audit/io/lake.py"}
CALLS_DELTALAKE = {"audit/io/lake.py", "audit/io/delta_io.py"}


def sources() -> list[Path]:
    return [path for top in ("audit", "dashboards", "producers") for path in sorted((ROOT / top).rglob("*.py"))]


def offences(source: str, relative: str) -> list[str]:
    """`.lake_path` read, `table_path(...)` called, or `deltalake` imported where it must not be."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "lake_path" and relative not in BINDS_THE_ROOT:
            found.append(f"{relative}:{node.lineno} reads .lake_path")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "table_path":
            if relative not in BINDS_THE_ROOT:
                found.append(f"{relative}:{node.lineno} builds a table path itself")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "deltalake":
            names = {alias.name for alias in node.names}
            if relative not in CALLS_DELTALAKE and not names <= {"exceptions"} and node.module == "deltalake":
                found.append(f"{relative}:{node.lineno} imports {sorted(names)} from deltalake")
    return found


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_lake_object_binds_the_root_and_reaches_deltalake(path):
    assert offences(path.read_text(), str(path.relative_to(ROOT))) == []


def test_the_check_finds_a_module_that_reads_the_root_itself():
    rogue = "from deltalake import DeltaTable\n\ndef f(settings):\n    return DeltaTable(settings.lake_path)\n"
    assert len(offences(rogue, "audit/books/rogue.py")) == 2
    assert offences(rogue, "audit/io/lake.py") == []
