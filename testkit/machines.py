"""Machines to plan for in tests and benchmarks. Plain data values (what detection returns), not mocks."""

from __future__ import annotations

from vrampilot.hardware import CpuInfo, LlamaBackendInfo, Machine
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.speed import AttentionRates, HostProbe, KernelRates, MachineSpeed, MeasuredMachine, RateAt, StepTiming
from vrampilot.units import GIB


def cpu_machine(ram_gib: float = 24, cores: int = 8) -> Machine:
    return Machine(
        gpus=(),
        cpu=CpuInfo("Test CPU", "x86_64", cores, cores * 2, ("avx", "avx2", "fma", "f16c")),
        ram_total_bytes=int(ram_gib * GIB),
        ram_available_bytes=int(ram_gib * GIB),
        nvml_status="NVML not available",
        llama=LlamaBackendInfo("0.3.36", False, None, None),
    )


def uniform_probe(
    decode_gbps: float = 10.0,
    prefill_gflops: float = 50.0,
    *,
    types: tuple[str, ...] = ("q4_0", "q8_0", "f16", "f32"),
    attention_gflops: dict[str, float] | None = None,
    moe_gflops: float | None = None,
    threads: tuple[int, ...] = (1,),
) -> HostProbe:
    """A speed probe as measured data, with the same rate for every type and thread count scaled
    linearly (what a test needs to reason about the speed model's arithmetic)."""

    def at(v: float) -> tuple[RateAt, ...]:
        return tuple(RateAt(t, v * t) for t in threads)

    att = attention_gflops or {"f16": 20.0}
    return HostProbe(
        measured_at="2026-12-01T10:00:00+00:00",
        duration_s=1.0,
        cpu_variant="haswell",
        ram_read_gbps=at(decode_gbps * 2),
        # Steps of the tiny model that cost nothing: no fixed costs, only weights and attention.
        steps=tuple(
            StepTiming(n, v, tuple(RateAt(t, 0.0) for t in threads)) for n, v in ((2, 256), (12, 256), (2, 32768))
        ),
        kernels=tuple(
            KernelRates(
                t, "CPU", at(decode_gbps), at(decode_gbps), at(prefill_gflops), at(moe_gflops or prefill_gflops)
            )
            for t in types
        ),
        attention=tuple(AttentionRates(kv, d, at(v), at(v)) for kv, v in att.items() for d in (64, 256)),
    )


def measured_machine(probe: HostProbe | None, cores: int = 1, speed: MachineSpeed | None = None) -> MeasuredMachine:
    """A CPU machine with its record: `speed`, or one holding `probe` (None: never measured, rates assumed)."""
    return MeasuredMachine(cpu_machine(cores=cores), speed or MachineSpeed("test-machine", probe))


def measured_target(
    request: TargetRequest, probe: HostProbe | None, cores: int = 1, speed: MachineSpeed | None = None
) -> Target:
    """`request` resolved on `measured_machine(probe, cores, speed)`."""
    found = measured_machine(probe, cores, speed)
    return resolve_target(request, found.machine, found.speed)
