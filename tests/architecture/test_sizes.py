"""Modules stay under 500 lines and functions under 60 (docs/architecture.md): a module that grows past that
holds more than one concept, a function more than one step."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_FOLDERS = ("audit", "producers", "dashboards", "bench", "native")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def sources(*suffixes: str) -> list[Path]:
    return sorted(path for top in SOURCE_FOLDERS for suffix in suffixes for path in (ROOT / top).rglob(f"*{suffix}"))


def test_every_module_is_under_500_lines():
    long_modules = {
        str(path.relative_to(ROOT)): lines
        for path in sources(".py", ".c", ".h")
        if (lines := len(path.read_text().splitlines())) >= MAX_MODULE_LINES
    }
    assert long_modules == {}, f"modules of {MAX_MODULE_LINES} lines or more: split them by concept"


def test_every_python_function_is_under_60_lines():
    long_functions = {}
    for path in sources(".py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    long_functions[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long_functions == {}, f"functions of {MAX_FUNCTION_LINES} lines or more: break them into steps"
