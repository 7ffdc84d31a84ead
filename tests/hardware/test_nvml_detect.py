"""GPU detection through the NVML boundary, with the fake NVML and with the real pynvml."""

from __future__ import annotations

import math

import pytest

from testkit.fake_nvml import (
    GIB,
    MIB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    FakeReading,
)
from vrampilot.hardware import detect_machine, detect_nvidia_gpus, peak_bandwidth_gbps
from vrampilot.hardware.nvml import cuda_version_text

H100 = FakeGpu(
    name="NVIDIA H100 80GB HBM3",
    memory_total_bytes=81559 * MIB,
    memory_bus_width_bits=5120,
    memory_clock_max_mhz=2619,
    pcie_max_generation=5,
)


def test_bandwidth_arithmetic_matches_spec_sheets() -> None:
    assert math.isclose(peak_bandwidth_gbps(384, 10501), 1008.1, abs_tol=0.1)  # RTX 4090
    assert math.isclose(peak_bandwidth_gbps(5120, 2619), 3352.3, abs_tol=0.1)  # H100 SXM


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(13000) == "13.0"


def test_no_gpus() -> None:
    nvml = FakeNvml([])
    result = detect_nvidia_gpus(nvml)
    assert result.gpus == ()
    assert result.available
    assert result.status == "NVML: driver 550.54.15, CUDA 12.4, no GPU found: planning for the CPU"
    assert nvml.shutdown_calls == 1 and not nvml.initialized


def test_one_gpu_reads_every_field() -> None:
    nvml = FakeNvml([FakeGpu(display_active=True, readings=(FakeReading(memory_used_bytes=1 * GIB),))])
    result = detect_nvidia_gpus(nvml)
    assert result.status == "NVML: driver 550.54.15, CUDA 12.4, 1 GPU"
    (gpu,) = result.gpus
    assert gpu.index == 0
    assert gpu.name == "NVIDIA GeForce RTX 4090"
    assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
    assert gpu.vendor == "NVIDIA"
    assert gpu.memory_total_bytes == 24 * GIB
    assert gpu.memory_used_bytes == 1 * GIB
    assert gpu.memory_free_bytes == 23 * GIB
    assert gpu.driver_version == "550.54.15"
    assert gpu.cuda_version == "12.4"
    assert gpu.memory_bus_width_bits == 384
    assert gpu.memory_clock_max_mhz == 10501
    assert gpu.bandwidth_source == "nvml"
    assert gpu.peak_bandwidth_gbps == pytest.approx(1008.1, abs=0.1)
    assert (gpu.pcie_generation, gpu.pcie_width) == (4, 16)
    assert gpu.display_active is True
    assert gpu.fp16_tflops == pytest.approx(330.3)  # from the matched profile
    assert nvml.shutdown_calls == 1 and not nvml.initialized


def test_two_gpus_keep_order_and_identity() -> None:
    nvml = FakeNvml([FakeGpu(), H100])
    result = detect_nvidia_gpus(nvml)
    assert result.status.endswith(", 2 GPUs")
    assert [g.index for g in result.gpus] == [0, 1]
    assert [g.name for g in result.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3"]
    assert result.gpus[0].uuid != result.gpus[1].uuid
    assert result.gpus[1].peak_bandwidth_gbps == pytest.approx(3352.3, abs=0.1)
    assert result.gpus[1].pcie_generation == 5


def test_not_supported_fields_become_none_and_profile_fills_bandwidth() -> None:
    gpu = FakeGpu(
        name="NVIDIA GeForce RTX 3080",
        memory_total_bytes=12 * GIB,
        unsupported=frozenset(
            {
                "nvmlDeviceGetMemoryBusWidth",
                "nvmlDeviceGetMaxPcieLinkGeneration",
                "nvmlDeviceGetDisplayActive",
                "nvmlDeviceGetUUID",
            }
        ),
    )
    (info,) = detect_nvidia_gpus(FakeNvml([gpu])).gpus
    assert info.memory_bus_width_bits is None
    assert info.memory_clock_max_mhz == 10501  # still read: only the failing query is lost
    assert info.uuid is None
    assert info.display_active is None
    assert info.pcie_generation == 1  # falls back to the current link
    assert info.pcie_width == 16
    # The 12 GB model, chosen by memory size: the 10 GB one has 760 GB/s.
    assert info.bandwidth_source == "profile"
    assert info.peak_bandwidth_gbps == 912


def test_unknown_gpu_without_bandwidth_says_unknown() -> None:
    gpu = FakeGpu(name="NVIDIA Mystery X1", unsupported=frozenset({"nvmlDeviceGetMaxClockInfo"}))
    (info,) = detect_nvidia_gpus(FakeNvml([gpu])).gpus
    assert info.peak_bandwidth_gbps is None
    assert info.bandwidth_source == "unknown"
    assert info.fp16_tflops is None


def test_system_queries_not_supported() -> None:
    nvml = FakeNvml(
        [FakeGpu()],
        errors={
            "nvmlSystemGetCudaDriverVersion": NVML_ERROR_NOT_SUPPORTED,
            "nvmlSystemGetDriverVersion": NVML_ERROR_NOT_SUPPORTED,
        },
    )
    result = detect_nvidia_gpus(nvml)
    assert result.status == "NVML: driver unknown, 1 GPU"
    assert result.gpus[0].cuda_version is None and result.gpus[0].driver_version is None


def test_old_pynvml_bytes_names_are_decoded() -> None:
    (info,) = detect_nvidia_gpus(FakeNvml([FakeGpu()], names_as_bytes=True)).gpus
    assert info.name == "NVIDIA GeForce RTX 4090"
    assert info.driver_version == "550.54.15"


def test_lost_gpu_is_skipped_and_named() -> None:
    lost = FakeGpu(errors={"nvmlDeviceGetHandleByIndex": NVML_ERROR_GPU_IS_LOST})
    result = detect_nvidia_gpus(FakeNvml([FakeGpu(), lost]))
    assert [g.index for g in result.gpus] == [0]
    assert "GPU 1 unreadable: GPU is lost" in result.status


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "not found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    ],
)
def test_init_failure_means_no_gpus_and_a_status(code: int, reason: str) -> None:
    nvml = FakeNvml([FakeGpu()], init_error=code)
    result = detect_nvidia_gpus(nvml)
    assert result.gpus == ()
    assert not result.available
    assert result.status.startswith("NVML not available (")
    assert reason in result.status
    assert result.status.endswith("no NVIDIA GPU detected, planning for the CPU")
    assert "\n" not in result.status


def test_missing_package_is_a_status_not_a_traceback() -> None:
    def loader() -> object:
        raise ImportError("No module named 'pynvml'")

    result = detect_nvidia_gpus(loader=loader)
    assert result.gpus == ()
    assert not result.available
    assert "nvidia-ml-py" in result.status and "planning for the CPU" in result.status


def test_detect_machine_with_fake_nvml() -> None:
    machine = detect_machine(FakeNvml([FakeGpu(), H100]))
    assert machine.nvml_available
    assert len(machine.gpus) == 2
    assert machine.gpu_memory_total_bytes == 24 * GIB + 81559 * MIB


def test_real_pynvml_on_this_machine() -> None:
    """The real binding: on a machine without an NVIDIA driver, no GPU and a clear status."""
    pynvml = pytest.importorskip("pynvml")
    result = detect_nvidia_gpus(pynvml)
    if result.available:  # a machine with a driver: whatever it has must read cleanly
        assert result.status.startswith("NVML: driver ")
        assert all(g.memory_total_bytes > 0 for g in result.gpus)
    else:
        assert result.gpus == ()
        assert result.status.startswith("NVML not available (")
        assert "planning for the CPU" in result.status
    machine = detect_machine()  # default loader path, same answer
    assert machine.nvml_status == result.status
