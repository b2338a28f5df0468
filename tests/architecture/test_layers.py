"""The packages import only downward (docs/architecture.md): the contract imports nothing of ours, the
CLI sits on top. Every import counts, lazy ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BELOW_HOPS = {"audit.contract", "audit.settings", "audit.io"}
MAY_IMPORT: dict[str, set[str]] = {
    "audit.contract": set(),
    "audit.settings": {"audit.contract"},
    "audit.io": {"audit.contract", "audit.settings"},
    "audit.hops": BELOW_HOPS,
    "audit.books": BELOW_HOPS,
    "audit.alerts": BELOW_HOPS,
    "producers": BELOW_HOPS,
    "dashboards": BELOW_HOPS | {"audit.alerts"},
    "audit.local": BELOW_HOPS | {"audit.hops", "audit.books", "audit.alerts", "producers", "dashboards"},
    "audit.cli": BELOW_HOPS | {"audit.hops", "audit.books", "audit.alerts", "audit.local", "producers", "dashboards"},
}


def package_of(module: str) -> str | None:
    for package in sorted(MAY_IMPORT, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package
    return None


def modules() -> list[tuple[str, Path]]:
    found = []
    for top in ("audit", "producers", "dashboards"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found.append((name, path))
    return found


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_every_module_belongs_to_a_layer():
    orphans = [name for name, _ in modules() if package_of(name) is None and name not in ("audit", "audit.cli")]
    assert orphans == [], f"modules outside every layer of docs/architecture.md: {orphans}"


@pytest.mark.parametrize("name, path", modules(), ids=[name for name, _ in modules()])
def test_imports_only_go_down(name, path):
    own = package_of(name)
    if own is None:
        return
    upward = sorted(
        {
            target
            for target in imported(path)
            if (package_of(target) or own) != own and package_of(target) not in MAY_IMPORT[own]
        }
    )
    assert upward == [], f"{name} ({own}) imports {upward}; it may import only {sorted(MAY_IMPORT[own])}"


def test_the_ui_pages_never_import_the_app_shell():
    """The app imports the pages; a page reads the running context and builds links from modules of their own."""
    pages = [(name, path) for name, path in modules() if name.startswith("dashboards.pages.")]
    importers = [name for name, path in pages if any(is_the_app_shell(t) for t in imported(path))]
    assert pages and importers == [], f"pages that import dashboards.app: {importers}"


def is_the_app_shell(module: str) -> bool:
    return module == "dashboards.app" or module.startswith("dashboards.app.")


def import_graph() -> dict[str, set[str]]:
    """Each module of ours and the modules of ours it imports (lazy and TYPE_CHECKING imports too); `from a
    import b` of a module b depends on a.b, not on the package a."""
    found = dict(modules())
    graph = {}
    for name, path in found.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & found.keys()
                targets.update(submodules or {node.module})
        graph[name] = {target for target in targets if target in found and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while not group or group[-1] != node:
                        group.append(stack.pop())
                    if len(group) > 1:
                        found.append(sorted(group))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found


def test_no_module_imports_itself_through_others():
    """A circle, even one a TYPE_CHECKING import makes, means two modules are one concept or share a third."""
    assert circles(import_graph()) == []


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


HOPS = ("audit.hops.counter", "audit.hops.replicator", "audit.hops.lake")


def test_each_hop_imports_no_other_hop():
    """The hops share what sits beside them in audit/hops, never one another's modules."""
    crossing = sorted(
        (name, target)
        for name, targets in import_graph().items()
        for target in targets
        for own in HOPS
        for other in HOPS
        if own != other and package_of_hop(name) == own and package_of_hop(target) == other
    )
    assert crossing == []


def package_of_hop(module: str) -> str | None:
    return next((hop for hop in HOPS if module == hop or module.startswith(hop + ".")), None)
