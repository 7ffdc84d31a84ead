"""The CUDA module built from PyPI's wheels (packaging/engine/cuda.py), beside the real engine.

No machine here has an NVIDIA driver, which is the first case a user of the CUDA variant can be
in: the module is present, libcuda.so.1 is not, and the app runs on Vulkan or the CPU saying so in
one line. The second, a driver too old for CUDA 13, goes through the CUDA runtime's own check: a
libcuda.so.1 written for the test (the same stub generator the build links against) answers
cuDriverGetVersion with 12.4, so the module loads into llama.cpp's registry (which also proves it
fits the engine's libggml-base) and finds no device, as under a real old driver.

Each case runs `vrampilot doctor --json` in a child whose llama_cpp is the installed engine with
the cached module linked in (a folder of links, nothing copied), so the venv's engine is untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from testkit.fake_nvml import FakeGpu, FakeNvml
from tests import waits
from vrampilot.hardware import NO_CUDA_NOTE, LlamaBackendInfo, LlamaDevice, Machine, detect_machine, machine_warnings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging" / "engine"))
import cuda as recipe

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cuda_module

REQUIRE_ENV = "VRAMPILOT_REQUIRE_CUDA_MODULE"  # .ci/run: the module is cached there (cuda.py --check)


def _module() -> Path:
    found = recipe.cached_module()
    if found is None:
        why = f"no CUDA module cached for key {recipe.module_key()} (make cuda builds it, about an hour)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1: {why}")
        pytest.skip(why)
    return found.parent


def _engine_with_cuda(site: Path, module: Path, *, manifest: dict[str, Any] | None = None) -> Path:
    """site/llama_cpp: the installed engine's files linked, plus the module, its CUDA libraries
    and its manifest (or `manifest` instead)."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    dest = site / "llama_cpp"
    for path in package.rglob("*"):
        if "__pycache__" in path.parts:
            continue
        target = dest / path.relative_to(package)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path.resolve())
    lib = dest / "lib"
    for name in recipe.RUNTIME_LIBRARIES:
        (lib / name).symlink_to(recipe.toolkit_root() / "lib" / name)
    (lib / recipe.MODULE_FILE).symlink_to(module / recipe.MODULE_FILE)
    if manifest is None:
        (lib / recipe.MANIFEST_NAME).symlink_to(module / recipe.MANIFEST_NAME)
    else:
        (lib / recipe.MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    return site


def _doctor(site: Path, tmp_path: Path, **env: str) -> dict[str, Any]:
    child_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "VRAMPILOT_DATA_DIR": str(tmp_path / "data"),
        "VRAMPILOT_CONFIG_DIR": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        **env,
    }
    r = waits.run([sys.executable, "-m", "vrampilot", "doctor", "--json"], cpu_s=300, env=child_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout)["llama_cpp"])


@pytest.mark.slow
def test_module_present_without_a_driver_says_so_in_one_line_and_runs_on(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") or Path("/dev/nvidia0").exists():
        pytest.skip("this machine has an NVIDIA driver: the no-driver case is not this machine's")
    site = _engine_with_cuda(tmp_path / "site", _module())
    llama = _doctor(site, tmp_path)
    assert llama["cuda_status"].startswith("CUDA backend present, no NVIDIA driver"), llama["cuda_status"]
    assert "CUDA 13.0 needs driver 580.65 or newer" in llama["cuda_status"]
    assert "CUDA" not in llama["backends"] and "CPU" in llama["backends"]
    # Not counted as a failure of the engine, and the build note no longer sends the user to build CUDA.
    assert not any("cuda" in f for f in llama["backend_failures"]), llama["backend_failures"]
    assert "cuda" not in (llama["gpu_build_note"] or "")


@pytest.mark.slow
def test_a_driver_too_old_for_cuda_13_is_named_with_the_version_needed(tmp_path: Path) -> None:
    module = _module()
    driver = tmp_path / "driver"
    stub = recipe.write_driver_stub(recipe.toolkit_root() / "include" / "cuda.h", driver, driver_version=12040)
    (driver / "libcuda.so.1").symlink_to(stub.name)
    site = _engine_with_cuda(tmp_path / "site", module)
    llama = _doctor(site, tmp_path, LD_LIBRARY_PATH=str(driver))
    # The module loaded into llama.cpp's registry (so it fits the engine's libggml-base), and the
    # CUDA runtime found the driver too old: no device.
    assert "CUDA" in llama["backends"]
    assert not any(d["backend"] == "CUDA" for d in llama["devices"])
    assert llama["cuda_status"] == (
        "CUDA backend present, NVIDIA driver too old: it supports CUDA 12.4, this build needs CUDA 13.0 "
        "(driver 580.65 or newer); running without CUDA"
    )


@pytest.mark.slow
def test_a_module_built_for_other_sources_is_not_loaded(tmp_path: Path) -> None:
    module = _module()
    manifest = json.loads((module / recipe.MANIFEST_NAME).read_text(encoding="utf-8"))
    manifest["recipe"]["llama_cpp_python"] = "0.3.1"
    site = _engine_with_cuda(tmp_path / "site", module, manifest=manifest)
    llama = _doctor(site, tmp_path)
    assert llama["cuda_status"].startswith("the CUDA module was built for llama-cpp-python 0.3.1, this engine is ")
    assert "not loaded (rebuild it: make cuda)" in llama["cuda_status"]
    assert "CUDA" not in llama["backends"]


def test_an_nvidia_gpu_under_a_build_without_cuda_names_the_cuda_variant() -> None:
    vulkan = LlamaDevice("Vulkan0", "NVIDIA GeForce RTX 4090", "gpu", "Vulkan", 23 << 30, 24 << 30, "0000:01:00.0")
    machine = detect_machine(FakeNvml([FakeGpu()]), llama_loader=_no_engine)
    without = machine_warnings(
        _with_llama(
            machine, LlamaBackendInfo("0.3.36", True, None, None, backends=("Vulkan", "CPU"), devices=(vulkan,))
        )
    )
    assert NO_CUDA_NOTE in without
    assert "VRAM_Pilot-CUDA-" in NO_CUDA_NOTE and "make cuda" in NO_CUDA_NOTE
    cuda = LlamaDevice("CUDA0", "NVIDIA GeForce RTX 4090", "gpu", "CUDA", 23 << 30, 24 << 30, "0000:01:00.0")
    status = "CUDA backend (CUDA 13.0, 75-real;80-virtual;86-real;120a-real): 1 device"
    with_cuda = machine_warnings(
        _with_llama(
            machine,
            LlamaBackendInfo("0.3.36", True, None, None, backends=("CUDA", "CPU"), devices=(cuda,), cuda_status=status),
        )
    )
    assert NO_CUDA_NOTE not in with_cuda and status not in with_cuda
    old = "CUDA backend present, NVIDIA driver too old: it supports CUDA 12.4, this build needs CUDA 13.0"
    broken = machine_warnings(
        _with_llama(
            machine,
            LlamaBackendInfo(
                "0.3.36", True, None, None, backends=("CUDA", "Vulkan", "CPU"), devices=(vulkan,), cuda_status=old
            ),
        )
    )
    assert old in broken and NO_CUDA_NOTE not in broken


def _no_engine() -> object:
    raise ImportError("replaced below")


def _with_llama(machine: Machine, llama: LlamaBackendInfo) -> Machine:
    return replace(machine, llama=llama)
