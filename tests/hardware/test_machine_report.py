"""`vrampilot doctor` output: JSON shape and text, and the llama.cpp backend probe."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testkit.fake_nvml import FakeGpu, FakeNvml
from vrampilot.hardware import detect_llama_backend, detect_machine, format_machine, machine_to_dict
from vrampilot.hardware.llama_backend import CUDA_MODULE_HINT, _gpu_build_note
from vrampilot.hardware.report import CUDA_REBUILD_HINT
from vrampilot.hardware.types import GpuInfo
from vrampilot.llamacpp import MANIFEST_NAME


def _cpu_build() -> SimpleNamespace:
    return SimpleNamespace(
        __version__="0.3.36",
        llama_supports_gpu_offload=lambda: False,
        llama_print_system_info=lambda: b"CPU : SSE3 = 1 | AVX2 = 1 | ",
    )


def test_machine_to_dict_has_the_documented_keys_and_is_json() -> None:
    machine = detect_machine(FakeNvml([FakeGpu(display_active=True)]), llama_loader=_cpu_build)
    d = machine_to_dict(machine)
    json.dumps(d)
    assert set(d) == {"gpus", "cpu", "ram", "nvml", "dxgi", "llama_cpp", "cards", "warnings"}
    assert d["dxgi"] == {"status": "", "adapters": []}  # Windows only
    assert set(d["gpus"][0]) == set(GpuInfo.__dataclass_fields__)
    assert set(d["cpu"]) == {"model_name", "architecture", "physical_cores", "logical_cores", "features"}
    assert set(d["ram"]) == {"total_bytes", "available_bytes"}
    assert d["nvml"] == {"available": True, "status": "NVML: driver 550.54.15, CUDA 12.4, 1 GPU"}
    assert d["llama_cpp"] == {
        "version": "0.3.36",
        "supports_gpu_offload": False,
        "system_info": "CPU : SSE3 = 1 | AVX2 = 1 |",
        "error": None,
        # Not the real llama_cpp: nothing was loaded by vrampilot.llamacpp for it.
        "cpu_variant": None,
        "cpu_dispatch": None,
        "backend_mode": None,
        "recipe_key": None,
        "backends": [],
        "backend_failures": [],
        "devices": [],
        "gpu_build_note": None,
        "vulkan_status": None,
        "cuda_status": None,
    }
    assert CUDA_REBUILD_HINT in d["warnings"]
    assert any("display" in w for w in d["warnings"])


def test_report_on_this_machine_is_json_and_text() -> None:
    machine = detect_machine()
    json.dumps(machine_to_dict(machine))
    text = format_machine(machine)
    assert machine.nvml_status in text
    assert "CPU:" in text and "RAM:" in text and "llama.cpp:" in text


def test_format_machine_with_gpus() -> None:
    machine = detect_machine(FakeNvml([FakeGpu()]), llama_loader=_cpu_build)
    text = format_machine(machine)
    assert "GPU 0: NVIDIA GeForce RTX 4090 (NVIDIA), 24.00 GiB total" in text
    assert "bandwidth 1008 GB/s (NVML: 384-bit bus, 10501 MHz memory clock)" in text
    assert "PCIe gen 4 x16" in text
    assert "GPU offload: no (CPU-only build)" in text
    assert CUDA_REBUILD_HINT in text


def test_llama_backend_never_raises() -> None:
    def missing() -> object:
        raise ImportError("No module named 'llama_cpp'")

    def broken() -> object:
        raise OSError("libcudart.so.12: cannot open shared object file")

    info = detect_llama_backend(missing)
    assert info.version is None and info.error and "not installed" in info.error
    info = detect_llama_backend(broken)
    assert info.error and "libcudart" in info.error

    def raising() -> bool:
        raise RuntimeError("boom")

    odd = SimpleNamespace(__version__="1.0", llama_supports_gpu_offload=raising, llama_print_system_info=lambda: "x")
    info = detect_llama_backend(lambda: odd)
    assert info == type(info)(version="1.0", supports_gpu_offload=None, system_info="x", error=None)


def test_llama_backend_on_this_machine() -> None:
    info = detect_llama_backend()
    if info.error is None:
        assert info.version
        assert info.supports_gpu_offload in (True, False)
        assert info.system_info


def test_the_cuda_build_note_names_the_route_with_a_card_and_nothing_without(tmp_path: Path) -> None:
    """Issue 57: without an NVIDIA card doctor told the user to install "the toolkit's cuBLAS
    (libcublas-dev)" (the build machine's reason for skipping CUDA). The note names the product's
    route (`make cuda`, no toolkit) where NVML sees a card, and nothing about CUDA where it sees none;
    the other backends' reasons stay."""
    lib = tmp_path / "lib"
    lib.mkdir()
    skipped = {
        "cuda": "the CUDA toolkit at /usr/local/cuda has no cuBLAS (cublas_v2.h), which llama.cpp's CUDA "
        "backend needs: install the toolkit's cuBLAS (libcublas-dev) too",
        "vulkan": "no Vulkan headers",
    }
    (lib / MANIFEST_NAME).write_text(json.dumps({"gpu_skipped": skipped}), encoding="utf-8")
    with_card = _gpu_build_note(str(lib), has_cuda_module=False, nvidia=True, platform="linux")
    assert with_card == f"cuda ({CUDA_MODULE_HINT}); vulkan: no Vulkan headers"
    assert "make cuda" in with_card and "libcublas" not in with_card
    assert (
        _gpu_build_note(str(lib), has_cuda_module=False, nvidia=False, platform="linux") == "vulkan: no Vulkan headers"
    )
    assert _gpu_build_note(str(lib), has_cuda_module=True, nvidia=True, platform="linux") == "vulkan: no Vulkan headers"


def test_doctor_on_this_engine_names_cuda_only_where_nvml_sees_a_card() -> None:
    """The engine installed here was built without CUDA (its manifest says why): with the NVML double
    holding no card doctor's text says nothing of CUDA; with a card it names `make cuda`."""
    info = detect_llama_backend()
    if info.error is not None or info.backend_mode is None:
        pytest.skip("the recipe's engine is not installed here")
    none = detect_machine(FakeNvml([]))
    assert "cuda" not in (none.llama.gpu_build_note or ""), none.llama.gpu_build_note
    text = format_machine(none)
    assert "make cuda" not in text and "cuBLAS" not in text, text
    card = detect_machine(FakeNvml([FakeGpu()]))
    note = card.llama.gpu_build_note or ""
    assert "cuda" in note and "make cuda" in note and "libcublas" not in note, note
