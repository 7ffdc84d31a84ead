"""The installed engine is the one the recipe builds: same key, every variant file present."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import cast

import pytest

from vrampilot.llamacpp import backends

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging" / "engine"))
import build as recipe

LIB = Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib"  # type: ignore[arg-type,union-attr]  # llama_cpp is installed: it has a spec and an origin


def test_installed_engine_carries_this_recipes_key() -> None:
    manifest = backends.read_manifest(LIB)
    assert manifest is not None, f"no {recipe.MANIFEST_NAME} in {LIB}: llama-cpp-python was not built by the recipe"
    assert recipe.MANIFEST_NAME == backends.MANIFEST_NAME
    assert manifest["recipe_key"] == recipe.recipe_key(), (
        "a stale engine: run python packaging/engine/build.py --install"
    )
    assert manifest["recipe"] == recipe.recipe()


def test_never_native_and_every_module_where_the_app_looks() -> None:
    manifest = backends.read_manifest(LIB)
    assert manifest is not None
    args = cast(dict[str, list[str]], manifest["recipe"])["cmake_args"]  # JSON, as the recipe writes it
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_CPU_ALL_VARIANTS=ON" in args and "-DGGML_BACKEND_DL=ON" in args
    for name in cast(list[str], manifest["backend_files"]):  # JSON, as the recipe writes it
        assert (LIB / name).is_file(), name
    if sys.platform.startswith("linux"):
        # Nothing left where pip would have put ggml's own install (site-packages/bin, /lib).
        site = Path(sysconfig.get_paths()["platlib"])
        assert not list((site / "bin").glob("libggml-*")), "backend modules outside llama_cpp/lib"
        assert not (site / "lib" / "libllama.so").exists()


def _vulkan_sdk(root: Path) -> Path:
    """A Vulkan SDK that passes the recipe's checks (headers with VK_EXT_layer_settings, SPIR-V
    headers, a glslc on PATH) without being one: what a broken SDK looks like to it."""
    (root / "include" / "vulkan").mkdir(parents=True)
    (root / "include" / "vulkan" / "vulkan_core.h").write_text(
        "#define VK_HEADER_VERSION 290\n#define VK_EXT_layer_settings 1\n"
    )
    (root / "include" / "spirv" / "unified1").mkdir(parents=True)
    (root / "include" / "spirv" / "unified1" / "spirv.hpp").write_text("")
    (root / "share" / "cmake" / "SPIRV-Headers").mkdir(parents=True)
    (root / "share" / "cmake" / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake").write_text("")
    (root / "bin").mkdir()
    (root / "bin" / "glslc").write_text("#!/bin/sh\nexit 1\n")
    (root / "bin" / "glslc").chmod(0o755)
    return root


def test_a_gpu_build_that_failed_here_is_not_retried_unless_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = _vulkan_sdk(tmp_path / "sdk")
    monkeypatch.setenv("VULKAN_SDK", str(sdk))
    monkeypatch.setenv("PATH", f"{sdk / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VRAMPILOT_ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(recipe.GPU_ENV, raising=False)
    built, _ = recipe.gpu_backends()
    assert "vulkan" in built and "-DGGML_VULKAN=ON" in recipe.cmake_args()
    with_vulkan = recipe.compile_key()

    recipe.record_gpu_build_failure(with_vulkan, "the build with vulkan failed here on 2026-12-01")
    built, skipped = recipe.gpu_backends()
    assert "vulkan" not in built and "-DGGML_VULKAN=OFF" in recipe.cmake_args()
    assert "failed here" in skipped["vulkan"] and "gpu-build-failures.json" in skipped["vulkan"]
    assert recipe.compile_key() != with_vulkan  # the CPU engine is cached under its own key

    monkeypatch.setenv(recipe.GPU_ENV, "vulkan")  # asked for by name: tried again, and fails loudly
    assert recipe.gpu_backends()[0] == ["vulkan"]


def test_vulkan_headers_without_the_spirv_cmake_package_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = _vulkan_sdk(tmp_path / "sdk")
    (sdk / "share" / "cmake" / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake").unlink()
    monkeypatch.setenv("VULKAN_SDK", str(sdk))
    monkeypatch.setenv("PATH", f"{sdk / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CMAKE_PREFIX_PATH", raising=False)
    why = recipe.vulkan_problem()
    if Path("/usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake").is_file():
        assert why is None  # the system's package (Debian 13's spirv-headers) serves
    else:
        assert why is not None and "SPIRV-HeadersConfig.cmake" in why


def test_no_engine_file_points_into_the_build_machines_cache() -> None:
    """libggml-vulkan is linked against Debian 13's libvulkan in the engine cache; its RUNPATH must
    not keep that folder, or the module would load that loader (built for a newer glibc) instead
    of the system's."""
    root = str(recipe.cache_root()).encode()
    named = [p.name for p in [*LIB.iterdir(), *(LIB / "cpu").glob("*")] if p.is_file() and root in p.read_bytes()]
    assert not named


def test_the_cache_entry_is_cut_from_a_runpath_and_nothing_else_is_touched(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VRAMPILOT_ENGINE_CACHE", str(tmp_path))
    lib = f"{tmp_path}/vulkan-build/root/usr/lib".encode()
    elf = b"\x7fELF" + b"\0" * 12 + b"libvulkan.so.1\0$ORIGIN:" + lib + b"\0tail"
    cut = recipe.strip_cache_runpath(elf, "libggml-vulkan.so")
    assert len(cut) == len(elf) and b"$ORIGIN\0" in cut and lib not in cut and cut.endswith(b"\0tail")
    assert recipe.strip_cache_runpath(b"not an elf " + lib, "x") == b"not an elf " + lib
    with pytest.raises(SystemExit, match="outside its RUNPATH"):
        recipe.strip_cache_runpath(b"\x7fELF\0" + lib + b"\0", "libx.so")


# ggml-cpu/amx/mmq.cpp's tile configuration, as small: zeroed on the stack, three fields set, loaded.
_TILE_CONFIG_SOURCE = """\
#include <immintrin.h>
struct config { unsigned char palette_id = 0, start_row = 0; unsigned char reserved[14] = {0};
                unsigned short colsb[16] = {0}; unsigned char rows[16] = {0}; };
void configure() {
    alignas(64) config c = {};
    c.palette_id = 1;
    c.colsb[0] = 4660;
    c.rows[0] = 86;
    _tile_loadconfig(&c);
}
"""


def test_the_amx_header_keeps_the_tile_configuration_the_kernels_load(tmp_path: Path) -> None:
    """GCC 12 drops the stores of a tile configuration before `ldtilecfg` (its intrinsic says it
    reads 8 of the 64 bytes), and the sapphirerapids variant then dies with SIGILL on the first
    batched prompt; the recipe's header makes the whole configuration an input of the instruction."""
    source, header = tmp_path / "config.cpp", tmp_path / "amx-compat.h"
    source.write_text(_TILE_CONFIG_SOURCE)
    header.write_text(recipe.AMX_COMPAT_HEADER)

    def assembly(*flags: str) -> str:
        out = tmp_path / "config.s"
        subprocess.run(["g++", "-O2", "-mamx-tile", *flags, "-S", str(source), "-o", str(out)], check=True)
        return out.read_text()

    fixed = assembly("-include", str(header))
    assert "$4660" in fixed and "$86" in fixed, fixed
    assert recipe.AMX_COMPAT_HEADER.removeprefix("#pragma once\n") in recipe.MINGW_COMPAT_HEADER
    version = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True, check=True).stdout
    if version.split(".")[0] == "12":  # the compiler the fix is for: without it, the stores are gone
        assert "$4660" not in assembly()
