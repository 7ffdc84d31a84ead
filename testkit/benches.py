"""The benchmark scripts under bench/ as modules, for the tests of their report code (a script is
not a package: it is loaded from its file, under a name of its own)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as the module `bench_<name>` (loaded once per process)."""
    key = f"bench_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module
