"""The one rule for a plan on this machine's own hardware (planner.target.target_for_machine), which
the Plan panel and the CLI both use: RPC hosts join "This machine" and "CPU only" alike, and CPU
only never plans on a local GPU. Machines are plain data, listed in llama.cpp's own order (GPU
backends first, the CPU last); hosts as they answer the protocol."""

from __future__ import annotations

from dataclasses import replace

from testkit.machines import cpu_machine
from vrampilot.hardware import LlamaBackendInfo, LlamaDevice, Machine
from vrampilot.hardware.rpc import RpcDeviceMemory, RpcHost
from vrampilot.planner.target import target_cpu_only, target_for_machine, target_from_machine
from vrampilot.units import GIB, MIB


def gpu_machine() -> Machine:
    """A CUDA build on a machine with one 12 GB card: CUDA0 first, the CPU last (ggml's order)."""
    devices = (
        LlamaDevice("CUDA0", "NVIDIA GeForce RTX 3060", "gpu", "CUDA", 11 * GIB, 12 * GIB, "0000:01:00.0", True),
        LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB),
    )
    return replace(cpu_machine(), llama=LlamaBackendInfo("0.3.36", True, None, None, devices=devices))


HOST = RpcHost("10.0.0.2:50052", "3.0.0", (RpcDeviceMemory(0, 8 * GIB, 8 * GIB),), rtt_ms=0.4)


def test_this_machine_is_its_devices_and_the_hosts() -> None:
    m = gpu_machine()
    t = target_for_machine(m, rpc_hosts=[HOST], rpc_budgets={HOST.endpoint: 600 * MIB})
    assert t == target_from_machine(m, [HOST], {HOST.endpoint: 600 * MIB})
    assert [g.llama_name for g in t.gpus] == ["RPC0", "CUDA0"]


def test_cpu_only_without_hosts_is_the_cpu() -> None:
    m = gpu_machine()
    assert target_for_machine(m, cpu_only=True) == target_cpu_only(m)


def test_cpu_only_with_hosts_is_the_cpu_and_the_hosts_never_a_local_gpu() -> None:
    t = target_for_machine(gpu_machine(), cpu_only=True, rpc_hosts=[HOST], rpc_budgets={HOST.endpoint: 600 * MIB})
    assert [g.llama_name for g in t.gpus] == ["RPC0"]
    assert t.gpus[0].memory_budget_bytes == 600 * MIB and t.gpus[0].budget_pinned
    assert t.devices_here  # an exact plan asks llama.cpp, whose devices here are the CPU's
