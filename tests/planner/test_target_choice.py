"""The one way to a Target (planner.target.resolve_target), which the Plan panel, the CLI's
commands and the hub all use: RPC hosts join "This machine" and "CPU only" alike, CPU only never
plans on a local GPU, the margin holds for every kind of target, and a request that mixes what
cannot go together is refused when made. Machines are plain data, listed in llama.cpp's own order (GPU
backends first, the CPU last); hosts as they answer the protocol."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from testkit.machines import cpu_machine
from vrampilot.hardware import LlamaBackendInfo, LlamaDevice, Machine, RpcDeviceMemory, RpcHost, find_profile
from vrampilot.planner.target import DEFAULT_DEVICE_MARGIN_BYTES, PlanTargetError, TargetRequest, resolve_target
from vrampilot.units import GIB, MIB


def gpu_machine() -> Machine:
    """A CUDA build on a machine with one 12 GB card: CUDA0 first, the CPU last (ggml's order)."""
    devices = (
        LlamaDevice("CUDA0", "NVIDIA GeForce RTX 3060", "gpu", "CUDA", 11 * GIB, 12 * GIB, "0000:01:00.0", True),
        LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB),
    )
    return replace(cpu_machine(), llama=LlamaBackendInfo("0.3.36", True, None, None, devices=devices))


PROFILE = find_profile("RTX 4060 Ti 8GB")
HOST = RpcHost("10.0.0.2:50052", "3.0.0", (RpcDeviceMemory(0, 8 * GIB, 8 * GIB),), rtt_ms=0.4)


def test_this_machine_is_its_devices_and_the_hosts() -> None:
    t = resolve_target(TargetRequest(rpc_hosts=(HOST,), rpc_budget_bytes={HOST.endpoint: 600 * MIB}), gpu_machine())
    assert [g.llama_name for g in t.gpus] == ["RPC0", "CUDA0"]
    assert t.devices_here and t.device_margin_bytes == DEFAULT_DEVICE_MARGIN_BYTES


def test_cpu_only_without_hosts_is_the_cpu() -> None:
    t = resolve_target(TargetRequest(cpu_only=True), gpu_machine())
    assert t.gpus == () and t.description == "CPU only"


def test_cpu_only_with_hosts_is_the_cpu_and_the_hosts_never_a_local_gpu() -> None:
    request = TargetRequest(cpu_only=True, rpc_hosts=(HOST,), rpc_budget_bytes={HOST.endpoint: 600 * MIB})
    t = resolve_target(request, gpu_machine())
    assert [g.llama_name for g in t.gpus] == ["RPC0"]
    assert t.gpus[0].memory_budget_bytes == 600 * MIB and t.gpus[0].budget_pinned
    assert t.devices_here  # an exact plan asks llama.cpp, whose devices here are the CPU's


@pytest.mark.parametrize(
    "request_",
    [TargetRequest(), TargetRequest(cpu_only=True), TargetRequest(vram_bytes=8 * GIB), TargetRequest(profile=PROFILE)],
)
def test_the_margin_holds_for_every_kind_of_target(request_: TargetRequest) -> None:
    t = resolve_target(replace(request_, margin_bytes=256 * MIB), gpu_machine())
    assert t.device_margin_bytes == 256 * MIB
    assert resolve_target(request_, gpu_machine()).device_margin_bytes == DEFAULT_DEVICE_MARGIN_BYTES


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cpu_only": True, "vram_bytes": 8 * GIB}, "plan for one of"),
        ({"vram_bytes": 0}, "--vram must be a positive size"),
        ({"margin_bytes": -1}, "--margin must be a size of 0 or more"),
        ({"vram_bytes": 8 * GIB, "gpu_backend": "CUDA"}, "--gpu-backend picks the backend of this machine's GPUs"),
        ({"cpu_only": True, "gpu_backend": "CUDA"}, "--gpu-backend picks the backend of this machine's GPUs"),
        ({"profile": PROFILE, "rpc_hosts": (HOST,)}, "--rpc plans with this machine's devices"),
    ],
)
def test_a_request_that_cannot_be_met_is_refused_when_made(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanTargetError, match=message):
        TargetRequest(**fields)
