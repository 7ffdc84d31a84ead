"""What the CUDA variant adds, and that the default one does not carry it (VRAMPILOT_BUNDLE;
`make package-test` for the default bundle, `make package-cuda-test` for dist/cuda/vrampilot).

No machine here has an NVIDIA driver, so the CUDA variant's smoke test is the case of a user who
installed it on a machine without one (or before installing the driver): the module is there, it
cannot load, doctor says so in one line and every command runs on Vulkan or the CPU. The rest of
tests/packaging runs on the CUDA bundle too (chat, serve, GUI, older CPUs, the .deb and AppImage).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.packaging.conftest import REPO, Runner

sys.path.insert(0, str(REPO / "packaging" / "engine"))
import cuda as recipe

CUDA_NAMES = (recipe.MODULE_FILE, recipe.MANIFEST_NAME, *recipe.RUNTIME_LIBRARIES)


def lib(bundle_dir: Path) -> Path:
    return bundle_dir / "_internal" / "llama_cpp" / "lib"


def test_the_cuda_files_are_in_the_cuda_variant_only(bundle_dir: Path, bundle_variant: str) -> None:
    present = sorted(p.name for p in bundle_dir.rglob("*") if p.name in CUDA_NAMES or p.name.startswith("libcublas"))
    if bundle_variant == "default":
        assert present == [], "the default bundle must stay Vulkan-only and small"
        return
    assert sorted(set(present)) == sorted(CUDA_NAMES)
    assert all((lib(bundle_dir) / name).is_file() for name in CUDA_NAMES)
    manifest = json.loads((lib(bundle_dir) / recipe.MANIFEST_NAME).read_text(encoding="utf-8"))
    # Built from the sources this checkout pins, with the architectures it promises.
    assert manifest["module_key"] == recipe.module_key()
    assert manifest["architectures"] == recipe.CUDA_ARCHITECTURES
    assert not list(bundle_dir.rglob("libcuda.so*")), "the driver's library is never shipped"


def test_doctor_says_cuda_is_present_without_a_driver_and_runs_on(
    bundle_dir: Path, bundle_variant: str, run_exe: Runner
) -> None:
    result = run_exe(bundle_dir / "vrampilot", "doctor", "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    llama = json.loads(result.stdout)["llama_cpp"]
    if bundle_variant == "default":
        assert llama["cuda_status"] is None
        return
    assert llama["cuda_status"].startswith("CUDA backend present, no NVIDIA driver (libcuda.so.1 not found)")
    assert "CPU" in llama["backends"] and "CUDA" not in llama["backends"]
    assert not llama["backend_failures"]
