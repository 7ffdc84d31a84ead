"""The installed engine is the one the recipe builds: same key, every variant file present."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path

from vrampilot.llamacpp import backends

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging" / "engine"))
import build as recipe

LIB = Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib"  # type: ignore[arg-type,union-attr]


def test_installed_engine_carries_this_recipes_key() -> None:
    manifest = backends.read_manifest(LIB)
    assert manifest is not None, f"no {recipe.MANIFEST_NAME} in {LIB}: llama-cpp-python was not built by the recipe"
    assert recipe.MANIFEST_NAME == backends.MANIFEST_NAME
    assert manifest["recipe_key"] == recipe.recipe_key(), "a stale engine: run python packaging/engine/build.py --install"
    assert manifest["recipe"] == recipe.recipe()


def test_never_native_and_every_module_where_the_app_looks() -> None:
    manifest = backends.read_manifest(LIB)
    assert manifest is not None
    args = manifest["recipe"]["cmake_args"]  # type: ignore[index]
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_CPU_ALL_VARIANTS=ON" in args and "-DGGML_BACKEND_DL=ON" in args
    for name in manifest["backend_files"]:  # type: ignore[union-attr]
        assert (LIB / name).is_file(), name
    if sys.platform.startswith("linux"):
        # Nothing left where pip would have put ggml's own install (site-packages/bin, /lib).
        site = Path(sysconfig.get_paths()["platlib"])
        assert not list((site / "bin").glob("libggml-*")), "backend modules outside llama_cpp/lib"
        assert not (site / "lib" / "libllama.so").exists()
