"""Plans across several devices: llama.cpp's layer split, a budget per device, the split chosen,
the exported flags. Machines are plain data (what detection returns): two NVIDIA cards as NVML
and a CUDA build of llama.cpp would report them, RPC hosts as they answer the protocol."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.gguf_models import write_header_only, write_model
from testkit.machines import cpu_machine, uniform_probe
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import GpuInfo, LlamaBackendInfo, LlamaDevice, Machine, RpcDeviceMemory, RpcHost
from vrampilot.paths import embedded_model_path
from vrampilot.planner.memory.breakdown import layer_devices, memory_breakdown
from vrampilot.planner.memory.compute import graph_key
from vrampilot.planner.memory.placement import layers_per_device
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.predict import backend_key
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import MachineSpeed
from vrampilot.units import GIB


def _gpu(index: int, name: str, total_gib: float, bw: float) -> GpuInfo:
    total = int(total_gib * GIB)
    return GpuInfo(
        index=index,
        name=name,
        uuid=None,
        vendor="NVIDIA",
        memory_total_bytes=total,
        memory_free_bytes=total - GIB // 2,
        memory_used_bytes=GIB // 2,
        driver_version="560.35",
        cuda_version="12.6",
        memory_bus_width_bits=192,
        memory_clock_max_mhz=7501,
        peak_bandwidth_gbps=bw,
        bandwidth_source="nvml",
        pcie_generation=4,
        pcie_width=16,
        display_active=False,
        fp16_tflops=25.0,
    )


def two_gpu_machine() -> Machine:
    """An RTX 3060 12 GB and an RTX 4060 8 GB, and a CUDA build that lists both."""
    gpus = (_gpu(0, "NVIDIA GeForce RTX 3060", 12, 360.0), _gpu(1, "NVIDIA GeForce RTX 4060", 8, 272.0))
    devices = (
        LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB),
        *(
            LlamaDevice(
                f"CUDA{g.index}",
                g.name,
                "gpu",
                "CUDA",
                g.memory_free_bytes or 0,
                g.memory_total_bytes,
                f"0000:0{g.index + 1}:00.0",
                True,
            )
            for g in gpus
        ),
    )
    base = cpu_machine()
    return replace(base, gpus=gpus, llama=LlamaBackendInfo("0.3.36", True, None, None, devices=devices))


@pytest.fixture(scope="module")
def qwen7b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_header_only(tmp_path_factory.mktemp("devices") / "qwen.gguf", "qwen2.5-7b")


def test_layers_split_as_llama_cpp_splits_them() -> None:
    path = embedded_model_path()
    assert path is not None
    spec = load_model_spec(path)  # 30 layers
    # Every layer, 2:1: layers 0-20 first, 21-29 and the output second (as llama.cpp's log shows:
    # tests/server/test_rpc.py holds this against its KV buffers per device).
    where, out = layer_devices(spec, 99, (2.0, 1.0))
    assert where == (0,) * 21 + (1,) * 9 and out == 1
    # 20 of 31 layers, even split: 0-10 stay on the CPU, 11-20 first device, 21-29 second.
    where, out = layer_devices(spec, 20, (1.0, 1.0))
    assert where == (-1,) * 11 + (0,) * 10 + (1,) * 9 and out == 1
    # One device: the classic -ngl rule, the output layer first to move.
    where, out = layer_devices(spec, 1, (1.0,))
    assert where == (-1,) * 30 and out == 0


def test_a_measured_compute_buffer_is_keyed_by_the_layers_each_device_holds() -> None:
    # 7 offloaded layers at 223:777: two on the first device (as llama.cpp's log shows), five on
    # the second, as layer_devices places them; a device's compute buffer is its layers' graph.
    assert layers_per_device(7, (223.0, 777.0)) == (2, 5)
    assert layers_per_device(31, (2.0, 1.0)) == (21, 10)  # the 30 layers and output above
    s = Settings(n_ctx=2048, n_gpu_layers=7, tensor_split=(223.0, 777.0))
    assert graph_key(s) == graph_key(s.with_(tensor_split=(220.0, 780.0)))  # the same layers each
    assert graph_key(s) != graph_key(s.with_(tensor_split=(100.0, 900.0)))  # layer 0 alone first


def test_experts_kept_in_ram_turn_llama_cpps_pipelining_off(tmp_path: Path) -> None:
    spec = load_model_spec(write_model(tmp_path / "moe.gguf", "qwen3moe", n_layer=6))
    target = resolve_target(TargetRequest(), two_gpu_machine())
    s = Settings(n_ctx=2048, n_gpu_layers=spec.n_layer + 1, tensor_split=(1.0, 3.0))
    assert memory_breakdown(spec, s, target).pipelined
    # llama_context() pipelines only without tensor overrides, which --n-cpu-moe and -ot are.
    for kept in (s.with_(n_cpu_moe=2), s.with_(cpu_tensor_patterns=("blk\\.5\\.ffn_up_exps",))):
        mem = memory_breakdown(spec, kept, target)
        assert not mem.pipelined and sum(mem.host_override_bytes) > 0


def test_two_cards_each_hold_what_fits_them_and_the_split_is_exported(qwen7b: Path) -> None:
    target = resolve_target(TargetRequest(), two_gpu_machine())
    assert [g.llama_name for g in target.gpus] == ["CUDA0", "CUDA1"]
    assert target.gpus[0].bandwidth_gbps == 360.0  # NVML's figure, matched by name and size
    spec = load_model_spec(qwen7b)
    p = plan(spec, target, Pins(n_ctx=32768))
    assert p.fits and p.settings.n_gpu_layers == spec.n_layer + 1
    for c, g in zip(p.memory.per_device, target.gpus, strict=True):
        assert 0 < c.total_bytes <= g.memory_budget_bytes
    assert len(p.settings.tensor_split) == 2 and p.settings.tensor_split[0] > p.settings.tensor_split[1]
    argv = llama_server_argv(spec.path, p.settings)
    assert argv[argv.index("-sm") + 1] == "layer"
    assert argv[argv.index("-ts") + 1] == ",".join(f"{x:g}" for x in p.settings.tensor_split)
    assert argv[argv.index("--device") + 1] == "CUDA0,CUDA1" and "--rpc" not in argv
    text = "\n".join(p.reasons)
    assert "NVIDIA GeForce RTX 3060 (CUDA0): layers 0-" in text and "+ output" in text
    assert "Split -ts" in text
    # What replies teach this plan is kept for this pair of cards, not for either alone.
    assert backend_key(target, p.settings) == "gpu:NVIDIA GeForce RTX 3060 (CUDA0)+NVIDIA GeForce RTX 4060 (CUDA1)"
    # Each card's bandwidth, and where it came from (no GPU has been measured: NVML's peak).
    assert (
        "NVIDIA GeForce RTX 3060 (CUDA0) 360 GB/s (peak from NVML or its profile), NVIDIA GeForce RTX 4060 "
        in (p.reasons[-1])
    )


def test_the_host_part_of_a_multi_device_plan_runs_at_the_measured_cpu_rates(qwen7b: Path) -> None:
    spec = load_model_spec(qwen7b)

    def decode(rate: float, n_gpu_layers: int) -> float:
        """Seconds per token with every CPU rate the probe measured scaled by `rate`."""
        probe = uniform_probe(10.0 * rate, 50.0 * rate, attention_gflops={"f16": 20.0 * rate})
        target = resolve_target(TargetRequest(), two_gpu_machine(), MachineSpeed("test-machine", probe))
        p = plan(spec, target, Pins(n_ctx=4096, n_gpu_layers=n_gpu_layers))
        assert len(p.memory.per_device) == 2
        return 1.0 / p.speed.decode_tps

    # Every layer on the cards: the CPU's rates do not matter.
    assert decode(0.5, spec.n_layer + 1) == pytest.approx(decode(1.0, spec.n_layer + 1))
    # Half the layers on the CPU: at half the measured rates their time doubles, the cards' stays.
    half = spec.n_layer // 2
    slow, fast = decode(0.5, half), decode(1.0, half)
    cards = 2 * fast - slow  # what the two cards take (and their overheads)
    assert 0 < cards < fast - cards  # the CPU's half is the slow part: the partial-offload cliff


def test_a_split_that_overfills_one_card_does_not_fit_although_the_sum_would(qwen7b: Path) -> None:
    target = resolve_target(TargetRequest(), two_gpu_machine())
    spec = load_model_spec(qwen7b)
    lopsided = plan(
        spec,
        target,
        Pins(n_ctx=65536, type_k="f16", type_v="f16", n_gpu_layers=spec.n_layer + 1, tensor_split=(1.0, 9.0)),
    )
    mem = lopsided.memory
    assert mem.device.total_bytes < target.device_budget_bytes  # the pooled view would say yes
    assert mem.per_device[1].total_bytes > target.gpus[1].memory_budget_bytes
    assert not lopsided.fits
    assert "too much" in "\n".join(lopsided.reasons)


def test_rpc_hosts_come_first_with_their_pinned_budgets(qwen7b: Path) -> None:
    hosts = [
        RpcHost("192.168.1.20:50052", "7.0.0", (RpcDeviceMemory(0, 30 * GIB, 32 * GIB),), rtt_ms=0.4),
        RpcHost("192.168.1.21:50052", "7.0.0", (RpcDeviceMemory(0, 14 * GIB, 16 * GIB),), rtt_ms=0.6),
    ]
    target = resolve_target(
        TargetRequest(rpc_hosts=tuple(hosts), rpc_budget_bytes={"192.168.1.20:50052": 3 * GIB}), cpu_machine()
    )
    assert [g.llama_name for g in target.gpus] == ["RPC0", "RPC1"]
    assert target.gpus[0].memory_budget_bytes == 3 * GIB and target.gpus[0].budget_pinned
    assert any("192.168.1.21:50052 reports all its memory as free" in n for n in target.notes)
    spec = load_model_spec(qwen7b)
    p = plan(spec, target, Pins(n_ctx=8192))
    assert p.fits and p.settings.rpc_servers == ("192.168.1.20:50052", "192.168.1.21:50052")
    assert p.memory.per_device[0].total_bytes <= 3 * GIB
    argv = llama_server_argv(spec.path, p.settings)
    # llama-server registers the hosts as it parses --rpc: it must come before --device names them.
    assert argv.index("--rpc") < argv.index("--device")
    assert argv[argv.index("--device") + 1] == "RPC0,RPC1"
    text = "\n".join(p.reasons)
    assert "RPC host 192.168.1.20:50052: layers 0-" in text and "pinned" in text
    assert "Crossing to and from the RPC hosts takes" in text
    assert p.settings.uses_rpc


def test_an_integrated_gpu_counts_against_system_ram_once(qwen7b: Path) -> None:
    base = cpu_machine(ram_gib=16)
    igpu = LlamaDevice("Vulkan0", "Intel(R) Iris(R) Xe Graphics", "igpu", "Vulkan", 12 * GIB, 16 * GIB)
    machine = replace(
        base,
        llama=LlamaBackendInfo(
            "0.3.36", True, None, None, devices=(LlamaDevice("CPU", "cpu", "cpu", "CPU", 16 * GIB, 16 * GIB), igpu)
        ),
    )
    target = resolve_target(TargetRequest(), machine)
    assert target.gpus[0].kind == "igpu"
    assert any("integrated GPU: its memory is system RAM" in n for n in target.notes)
    spec = load_model_spec(qwen7b)
    p = plan(spec, target, Pins(n_ctx=8192))
    shared = p.memory.per_device[0].total_bytes - p.memory.per_device[0].margin_bytes
    # Offloading to it does not make room: what it holds and what the host holds share the RAM.
    assert p.fits == (p.memory.host.total_bytes + shared <= target.host_ram_bytes)
    assert "system RAM assumed" in target.gpus[0].bandwidth_note
    # Its memory is the RAM the speed probe measured: that figure, not the assumption, once measured.
    measured = resolve_target(TargetRequest(), machine, MachineSpeed("test-machine", uniform_probe(12.5)))
    assert measured.gpus[0].bandwidth_gbps == measured.host_bandwidth_gbps == 25.0
    assert "system RAM measured 2026-12-01, 25.0 GB/s" in measured.gpus[0].bandwidth_note


def test_no_gpu_backend_says_so_and_plans_the_cpu() -> None:
    machine = replace(
        two_gpu_machine(),
        llama=LlamaBackendInfo(
            "0.3.36",
            False,
            None,
            None,
            devices=(LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB),),
            gpu_build_note="cuda: nvcc not found",
        ),
    )
    target = resolve_target(TargetRequest(), machine)
    assert not target.gpus
    assert any(
        "this engine has no backend for NVIDIA GeForce RTX 3060 (cuda: nvcc not found)" in n for n in target.notes
    )


def test_memory_per_device_adds_up_to_the_pooled_view(qwen7b: Path) -> None:
    target = resolve_target(TargetRequest(), two_gpu_machine())
    spec = load_model_spec(qwen7b)
    p = plan(spec, target, Pins(n_ctx=16384))
    mem = memory_breakdown(spec, p.settings, target)
    assert sum(c.kv_bytes for c in mem.per_device) + mem.host.kv_bytes == mem.kv.total_bytes
    assert mem.device.weights_bytes == sum(c.weights_bytes for c in mem.per_device)
    assert mem.pipelined  # every layer on two async devices: llama.cpp pipelines the ubatches
