"""The package's structure: no module imports another that imports it back (directly or around
a longer loop). The layers themselves are the import-linter contract in pyproject.toml (make lint)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import grimp
else:
    grimp = pytest.importorskip("grimp")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_cycles() -> None:
    # Imports made only for the type checker count too: a cycle of types is still a knot.
    graph = grimp.build_graph("vrampilot", cache_dir=None)
    assert _cycles(graph) == []


def _imports_of(folder: str, package: str) -> list[str]:
    """Files under `folder` (relative to the repository) that import `package` or a module in it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == package or name.startswith(package + ".") for name in names):
                found.append(str(path.relative_to(root)))
                break
    return found


def test_bench_and_tests_do_not_import_each_other() -> None:
    # What both need (GGUF fixtures, the NVML double, machines) lives in testkit/.
    assert _imports_of("bench", "tests") == []
    assert _imports_of("tests", "bench") == []
