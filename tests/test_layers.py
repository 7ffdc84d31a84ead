"""The package's structure: no module imports another that imports it back (directly or around
a longer loop), and nothing outside a stated package imports its private modules. The layers
themselves are the import-linter contracts in pyproject.toml (make lint)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vrampilot.lazy_api import where

if TYPE_CHECKING:
    import grimp
else:
    grimp = pytest.importorskip("grimp")

_ROOT = Path(__file__).resolve().parents[1]


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
    found = []
    for path in sorted((_ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == package or name.startswith(package + ".") for name in names):
                found.append(str(path.relative_to(_ROOT)))
                break
    return found


def test_bench_and_tests_do_not_import_each_other() -> None:
    # What both need (GGUF fixtures, the NVML double, machines) lives in testkit/.
    assert _imports_of("bench", "tests") == []
    assert _imports_of("tests", "bench") == []


def _stated_packages() -> tuple[str, ...]:
    """The packages whose modules are private (the protected contracts in pyproject.toml)."""
    config = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return tuple(c["allowed_importers"][0].split(".")[1] for c in contracts if c["type"] == "protected")


def _module_imports(path: Path, rel: tuple[str, ...]) -> Iterator[tuple[int, str]]:
    """Each module the file `path` (at `rel` in the repository) imports, absolute, with its line:
    `from a.b import c` gives a.b.c (a module or a name in a.b, told apart by the caller), relative
    imports resolved against the file's package. Imports in functions and for the type checker
    count: they reach in all the same."""
    package = rel[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def private_imports(paths: Iterable[Path], packages: Sequence[str], root: Path = _ROOT) -> list[str]:
    """`file:line module` for each import of a stated package's module from outside the package
    (files under `root`): only vrampilot/<package>/ and its tests (tests/<package>/) may import
    vrampilot.<package>.<module>."""
    found = []
    for path in paths:
        rel = path.relative_to(root).parts
        for line, name in _module_imports(path, rel):
            parts = name.split(".")
            if len(parts) < 3 or parts[0] != "vrampilot" or parts[1] not in packages:
                continue
            if rel[0] in ("vrampilot", "tests") and len(rel) > 2 and rel[1] == parts[1]:
                continue  # the package itself, or its own tests
            module = _ROOT.joinpath(*parts[:3])
            if module.with_suffix(".py").is_file() or module.is_dir():  # a module, not a name of the API
                found.append(f"{'/'.join(rel)}:{line} {'.'.join(parts[:3])}")
    return found


def _python_files() -> list[Path]:
    folders = ("vrampilot", "bench", "packaging", "testkit", "tests")
    return sorted(path for folder in folders for path in (_ROOT / folder).rglob("*.py"))


def test_stated_packages_are_imported_through_their_api() -> None:
    # pyproject.toml's protected contracts check the package in `make lint`; this also covers the
    # scripts around it and the imports made only for the type checker (which the linter skips).
    packages = _stated_packages()
    assert set(packages) == {"gguf", "hardware", "storage", "llamacpp", "export", "engine", "speed"}
    assert private_imports(_python_files(), packages) == []


def test_the_check_finds_a_private_import(tmp_path: Path) -> None:
    planted = tmp_path / "bench" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from typing import TYPE_CHECKING\n"
        "from vrampilot.gguf import ModelSpec\n"  # the API: allowed
        "from vrampilot.speed.measured import MachineSpeed\n"
        "if TYPE_CHECKING:\n"
        "    from vrampilot.llamacpp import log\n"
        "def f():\n"
        "    import vrampilot.engine.session\n",
        encoding="utf-8",
    )
    own_test = tmp_path / "tests" / "speed" / "test_own.py"  # a package's own tests may reach in
    own_test.parent.mkdir(parents=True)
    own_test.write_text("from vrampilot.speed.measured import MachineSpeed\n", encoding="utf-8")
    assert private_imports([planted, own_test], _stated_packages(), root=tmp_path) == [
        "bench/planted.py:3 vrampilot.speed.measured",
        "bench/planted.py:5 vrampilot.llamacpp.log",
        "bench/planted.py:7 vrampilot.engine.session",
    ]


def _type_checking_imports(package: str) -> dict[str, tuple[str, str]]:
    """What the type checker is told `vrampilot.<package>` holds: API name -> (module, name there)."""
    tree = ast.parse((_ROOT / "vrampilot" / package / "__init__.py").read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    for alias in sub.names:
                        found[alias.asname or alias.name] = (sub.module.rsplit(".", 1)[1], alias.name)
    return found


_LAZY = ("gguf", "hardware", "storage", "llamacpp", "speed", "documents")


@pytest.mark.parametrize("package", _LAZY)
def test_a_lazy_api_gives_what_the_type_checker_reads(package: str) -> None:
    # A lazy package names each of its API's names three times (the type checker's imports,
    # `__all__`, the table `__getattr__` imports from); the three must agree.
    module = importlib.import_module(f"vrampilot.{package}")
    told = _type_checking_imports(package)
    table = where(module._HOLDERS)
    assert table == told
    eager = {"load", "loaded", "load_mtmd"}  # llamacpp's own, imported from binding.py with the package
    assert set(module.__all__) - eager == set(told)
    for name, (holder, attr) in table.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"vrampilot.{package}.{holder}"), attr)


@pytest.mark.parametrize("package", ["export", "engine"])
def test_an_eager_api_holds_what_it_states(package: str) -> None:
    module = importlib.import_module(f"vrampilot.{package}")
    assert all(hasattr(module, name) for name in module.__all__)


def test_importing_a_lazy_package_loads_none_of_its_modules() -> None:
    # Importing a stated package loads none of its modules; a reply that reads its CPU share loads
    # that module alone; llama.cpp (which llamacpp/log.py imports) only when something asks for it.
    packages = [f"vrampilot.{p}" for p in _LAZY]
    prefixes = (*(f"{p}." for p in packages), "llama_cpp")
    code = (
        f"import sys, {', '.join(packages)}\n"
        "from vrampilot.speed import cpu_snapshot\n"
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_ROOT).stdout
    # binding.py (load(), which imports llama.cpp only when called) is the package itself.
    assert out.strip() == "['vrampilot.llamacpp.binding', 'vrampilot.speed.cpu_load']"
