"""Free VRAM on Windows from the source Task Manager trusts: DXGI read at its boundary (the one
double, testkit/fake_dxgi.py, returns the structures DXGI fills in), NVML's figure before DXGI's,
DXGI's before Vulkan's budget, the adapter matched to llama.cpp's device by LUID or by name and
size, and the source named in `doctor` and the plan's device line."""

from __future__ import annotations

import json
from dataclasses import replace

from testkit.dual_backend import nvidia_machine, vulkan_device
from testkit.fake_dxgi import BASIC_RENDER, GIB, MIB, FakeAdapter, FakeDxgi
from testkit.fake_nvml import FakeGpu, FakeNvml, FakeReading
from testkit.machines import cpu_machine
from vrampilot.hardware import LlamaBackendInfo, LlamaDevice, Machine, format_machine, machine_to_dict
from vrampilot.hardware.detect import detect_machine
from vrampilot.hardware.dxgi import read_dxgi
from vrampilot.hardware.free_memory import DXGI, NVML, VULKAN_BUDGET, match_adapter, with_free_memory
from vrampilot.hardware.report import WINDOWS_NO_CUDA, machine_warnings
from vrampilot.planner.target import TargetRequest, resolve_target

RTX_4070 = FakeGpu(name="NVIDIA GeForce RTX 4070", memory_total_bytes=12 * GIB)
# A game holds 8 GiB of the card: NVML and DXGI see it, NVIDIA's Windows Vulkan budget does not.
BUSY = FakeReading(memory_used_bytes=8 * GIB)
LUID = 0x0000D1A2
ADAPTER = FakeAdapter(local_budget_bytes=3 * GIB + 512 * MIB, local_usage_bytes=0)
IRIS = FakeAdapter(
    name="Intel(R) Iris(R) Xe Graphics",
    luid_low=0x0000B3C4,
    vendor_id=0x8086,
    dedicated_video_bytes=128 * MIB,
    local_budget_bytes=int(7.5 * GIB),
    local_usage_bytes=256 * MIB,
)


def _windows_nvidia(gpus: tuple[FakeGpu, ...] = (RTX_4070,), *, luid: bool = True) -> Machine:
    """An RTX 4070 on Windows: no CUDA engine there, so the Vulkan device, whose budget reads the
    card's size less 400 MiB whatever the game holds."""
    m = nvidia_machine(gpus, cuda=False)
    devices = tuple(
        replace(d, luid=LUID if luid else None, memory_free_source=VULKAN_BUDGET) if d.backend == "Vulkan" else d
        for d in m.llama.devices
    )
    return replace(m, llama=replace(m.llama, devices=devices))


def _vulkan(m: Machine) -> LlamaDevice:
    return next(d for d in m.llama.devices if d.backend == "Vulkan")


def test_dxgi_reads_each_adapter_as_windows_counts_it() -> None:
    radeon = FakeAdapter(
        name="AMD Radeon™ RX 7600 — Ünïcode",
        luid_low=0x00012345,
        luid_high=0x1,
        vendor_id=0x1002,
        dedicated_video_bytes=8 * GIB,
        local_budget_bytes=7 * GIB,
        local_usage_bytes=1 * GIB,
        non_local_budget_bytes=15 * GIB,
        non_local_usage_bytes=200 * MIB,
    )
    reading = read_dxgi(FakeDxgi([radeon, BASIC_RENDER]))
    a, warp = reading.adapters
    assert a.name == "AMD Radeon™ RX 7600 — Ünïcode"
    assert a.luid == 0x1_00012345 and a.luid_text == "0x00000001_0x00012345"
    assert (a.dedicated_video_bytes, a.local_free_bytes) == (8 * GIB, 6 * GIB)
    assert (a.non_local_budget_bytes, a.non_local_usage_bytes) == (15 * GIB, 200 * MIB)
    assert warp.software and not a.software
    assert reading.status == "DXGI: 1 adapter"


def test_dxgi_that_cannot_answer_is_a_status_line() -> None:
    assert read_dxgi(FakeDxgi([], error="CreateDXGIFactory1 failed (HRESULT 0x887A0004)")).status == (
        "DXGI not readable (CreateDXGIFactory1 failed (HRESULT 0x887A0004)): VRAM budgets come from the GPU backends"
    )
    old = read_dxgi(FakeDxgi([replace(ADAPTER, adapter3=False)]))
    assert old.adapters[0].local_free_bytes is None and "Windows 10" in old.status
    # The real reader on a machine without dxgi.dll (this one): a line, never an exception.
    assert read_dxgi().status.startswith("DXGI not readable (")


def test_windows_takes_nvml_then_dxgi_then_vulkans_budget() -> None:
    m = _windows_nvidia((replace(RTX_4070, readings=(BUSY,)),))
    assert _vulkan(m).memory_free_bytes == 12 * GIB - 400 * MIB  # Vulkan's figure: blind to the game
    with_nvml = with_free_memory(m.llama, m.gpus, read_dxgi(FakeDxgi([ADAPTER])).adapters, platform="win32")
    assert (
        _vulkan(replace(m, llama=with_nvml)).memory_free_bytes,
        _vulkan(replace(m, llama=with_nvml)).memory_free_source,
    ) == (
        4 * GIB,
        NVML,
    )
    # No nvml.dll: DXGI's budget less this process's use.
    without = with_free_memory(m.llama, (), read_dxgi(FakeDxgi([ADAPTER])).adapters, platform="win32")
    d = _vulkan(replace(m, llama=without))
    assert (d.memory_free_bytes, d.memory_free_source) == (3 * GIB + 512 * MIB, DXGI)
    # Neither: the backend's own figure, named as such.
    bare = _vulkan(replace(m, llama=with_free_memory(m.llama, (), (), platform="win32")))
    assert (bare.memory_free_bytes, bare.memory_free_source) == (12 * GIB - 400 * MIB, VULKAN_BUDGET)
    # Elsewhere the backend's figure stands (the drivers' own there).
    assert with_free_memory(m.llama, m.gpus, read_dxgi(FakeDxgi([ADAPTER])).adapters, platform="linux") == m.llama


def test_the_plan_budgets_an_igpu_by_dxgi_and_says_so() -> None:
    # Intel's Windows Vulkan driver reports more than the adapter may take.
    iris = LlamaDevice("Vulkan0", IRIS.name, "igpu", "Vulkan", 16 * GIB, 16 * GIB, None, True, IRIS.luid, VULKAN_BUDGET)
    cpu = cpu_machine(ram_gib=32)
    llama = LlamaBackendInfo("0.3.36", True, None, None, backends=("Vulkan", "CPU"), devices=(iris,))
    adapters = read_dxgi(FakeDxgi([IRIS, BASIC_RENDER])).adapters
    m = replace(cpu, llama=with_free_memory(llama, (), adapters, platform="win32"))
    (gpu,) = resolve_target(TargetRequest(), m).gpus
    assert gpu.memory_budget_bytes == int(7.5 * GIB) - 256 * MIB
    assert gpu.budget_source == DXGI
    assert "7.25 GiB free, by DXGI)" in resolve_target(TargetRequest(), m).description


def test_an_adapter_without_luid_matches_by_name_and_size_once_each() -> None:
    small = FakeAdapter(dedicated_video_bytes=8 * GIB, luid_low=1)
    twins = (FakeAdapter(luid_low=2), FakeAdapter(luid_low=3))
    adapters = read_dxgi(FakeDxgi([small, *twins])).adapters
    dev = vulkan_device(0, RTX_4070, None)
    assert match_adapter(dev, adapters) == adapters[1]  # the 12 GiB one of that name
    assert match_adapter(dev, adapters, taken={2}) == adapters[2]
    assert match_adapter(replace(dev, luid=3), adapters) == adapters[2]  # a LUID decides alone
    assert match_adapter(replace(dev, description="NVIDIA GeForce RTX 4080"), adapters) is None
    m = _windows_nvidia((RTX_4070, RTX_4070), luid=False)
    llama = with_free_memory(m.llama, (), adapters, platform="win32")
    assert [d.memory_free_source for d in llama.devices if d.backend == "Vulkan"] == [DXGI, DXGI]


def test_doctor_names_each_source_and_says_windows_has_no_cuda() -> None:
    m = _windows_nvidia()
    adapters = read_dxgi(FakeDxgi([ADAPTER, BASIC_RENDER]))
    m = replace(
        m,
        llama=with_free_memory(m.llama, (), adapters.adapters, platform="win32"),
        dxgi_adapters=adapters.adapters,
        dxgi_status=adapters.status,
    )
    text = format_machine(m, platform="win32")
    assert "device Vulkan0: NVIDIA GeForce RTX 4070 (GPU), 3.50 GiB free (DXGI) of 12.00 GiB" in text
    assert (
        "  NVIDIA GeForce RTX 4070 (LUID 0x00000000_0x0000D1A2): dedicated 12.00 GiB, budget 3.50 GiB, 0 B in use here; "
        "shared GPU memory 15.00 GiB"
    ) in text
    assert "Microsoft Basic Render Driver" not in text
    assert f"  {WINDOWS_NO_CUDA}" in text
    assert WINDOWS_NO_CUDA not in format_machine(m, platform="linux")
    d = json.loads(json.dumps(machine_to_dict(m)))
    assert d["dxgi"]["adapters"][0]["luid"] == "0x00000000_0x0000D1A2"
    assert d["llama_cpp"]["devices"][0]["memory_free_source"] == DXGI


def test_detection_on_windows_carries_dxgi_through() -> None:
    def no_engine() -> object:
        raise ImportError("no llama_cpp")

    m = detect_machine(
        FakeNvml([]),
        llama_loader=no_engine,
        dxgi_reader=lambda: read_dxgi(FakeDxgi([ADAPTER])),
        platform="win32",
    )
    assert m.dxgi_status == "DXGI: 1 adapter" and m.dxgi_adapters[0].luid == LUID
    assert detect_machine(FakeNvml([]), llama_loader=no_engine, platform="linux").dxgi_status == ""


def test_windows_warnings_name_no_linux_cuda_packages() -> None:
    vulkan = _windows_nvidia()
    assert not [w for w in machine_warnings(vulkan, platform="win32") if "AppImage" in w or "make cuda" in w]
    assert any("AppImage" in w for w in machine_warnings(vulkan, platform="linux"))  # the Linux hint stays
    cpu_only = replace(vulkan, llama=replace(vulkan.llama, supports_gpu_offload=False, devices=()))
    (warning,) = machine_warnings(cpu_only, platform="win32")
    assert warning.endswith(WINDOWS_NO_CUDA) and "AppImage" not in warning
