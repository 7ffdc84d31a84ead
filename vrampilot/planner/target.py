"""What a plan is made for: the detected machine, a GPU profile, a hypothetical VRAM size, or the CPU.

The planner sees only this, so "would this run on an 8 GB card?" is the same computation as
"what runs on my card?".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vrampilot.errors import UserError
from vrampilot.hardware import Machine
from vrampilot.hardware.measured import HostProbe, MachineSpeed, SpeedFactors
from vrampilot.hardware.profiles import GpuProfile
from vrampilot.units import GIB, format_bytes

# Without a measurement (no speed probe yet, hardware/probe.py), a desktop with dual-channel
# DDR4/DDR5 reads ~40-80 GB/s at peak.
DEFAULT_HOST_BANDWIDTH_GBPS = 50.0
# Per-core matrix throughput of a recent x86 core on quantized weights (AVX2 FMA), GFLOP/s; used
# only until the probe has measured llama.cpp's kernels here.
DEFAULT_CPU_GFLOPS_PER_CORE = 60.0
# A hypothetical card given only by its size: assume a mid-range GDDR6 part (RTX 4060 Ti class).
HYPOTHETICAL_GPU_BANDWIDTH_GBPS = 288.0
HYPOTHETICAL_GPU_FP16_TFLOPS = 44.0
# llama.cpp's own --fit keeps 1 GiB free per device for the CUDA context and the driver.
DEFAULT_DEVICE_MARGIN_BYTES = 1 * GIB
# Leave the OS and other programs room in system RAM.
DEFAULT_HOST_RESERVE_BYTES = 2 * GIB


class PlanTargetError(UserError):
    pass


@dataclass(frozen=True)
class GpuTarget:
    name: str
    memory_total_bytes: int
    memory_budget_bytes: int  # what the plan may use before the margin: free memory when detected
    bandwidth_gbps: float
    fp16_tflops: float
    bandwidth_note: str = ""


@dataclass(frozen=True)
class Target:
    description: str
    gpus: tuple[GpuTarget, ...]
    host_ram_bytes: int  # RAM the plan may use on the host
    host_bandwidth_gbps: float
    cpu_physical_cores: int
    cpu_logical_cores: int
    cpu_gflops: float
    device_margin_bytes: int = DEFAULT_DEVICE_MARGIN_BYTES
    notes: tuple[str, ...] = ()
    # What this machine measured (hardware/measured.py): its CPU's speed probe (host rates are
    # assumed until it ran) and what replies taught per backend. None for a machine not detected.
    speed: MachineSpeed | None = None
    cpu_variant: str | None = None  # llama.cpp's CPU code here ("haswell"): names the CPU factors

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def host_probe(self) -> HostProbe | None:
        return self.speed.probe if self.speed is not None else None

    @property
    def host_bandwidth_source(self) -> str:
        """Where host_bandwidth_gbps came from, for reasons and meters."""
        probe = self.host_probe
        return f"measured {probe.date}" if probe is not None else "assumed"

    def factors_for(self, backend: str) -> SpeedFactors:
        return self.speed.factors_for(backend) if self.speed is not None else SpeedFactors(backend)

    @property
    def device_budget_bytes(self) -> int:
        """Bytes the plan may fill on the GPU(s); the plan's own margin component counts against it."""
        return sum(g.memory_budget_bytes for g in self.gpus)

    @property
    def device_bandwidth_gbps(self) -> float:
        # Layers are split across GPUs and run one after another: the slowest card paces a token,
        # so the harmonic mean weighted by share is the honest figure; with one GPU it is its own.
        if not self.gpus:
            return 0.0
        total = sum(g.memory_budget_bytes for g in self.gpus) or 1
        return 1.0 / sum((g.memory_budget_bytes / total) / g.bandwidth_gbps for g in self.gpus)

    @property
    def device_tflops(self) -> float:
        return sum(g.fp16_tflops for g in self.gpus)

    def with_margin(self, margin_bytes: int) -> Target:
        return replace(self, device_margin_bytes=margin_bytes)


def _target(machine: Machine, description: str, gpus: tuple[GpuTarget, ...], notes: tuple[str, ...] = ()) -> Target:
    """A target with this machine's host side (RAM less a reserve, cores, CPU throughput, and what
    the speed probe and replies measured here)."""
    phys = max(1, machine.cpu.physical_cores)
    speed = machine.speed
    probe = speed.probe if speed is not None else None
    return Target(
        description=description,
        gpus=gpus,
        host_ram_bytes=max(0, machine.ram_available_bytes - DEFAULT_HOST_RESERVE_BYTES),
        host_bandwidth_gbps=probe.ram_peak_gbps if probe is not None else DEFAULT_HOST_BANDWIDTH_GBPS,
        cpu_physical_cores=phys,
        cpu_logical_cores=max(phys, machine.cpu.logical_cores),
        cpu_gflops=phys * DEFAULT_CPU_GFLOPS_PER_CORE,
        notes=notes,
        speed=speed,
        cpu_variant=machine.llama.cpu_variant,
    )


def target_from_machine(machine: Machine) -> Target:
    notes: list[str] = []
    gpus: list[GpuTarget] = []
    offload_ok = machine.llama.supports_gpu_offload is not False
    for g in machine.gpus:
        bw = g.peak_bandwidth_gbps or HYPOTHETICAL_GPU_BANDWIDTH_GBPS
        note = "" if g.peak_bandwidth_gbps else f"bandwidth unknown, assuming {bw:.0f} GB/s"
        free = g.memory_free_bytes if g.memory_free_bytes is not None else g.memory_total_bytes
        gpus.append(
            GpuTarget(
                name=g.name,
                memory_total_bytes=g.memory_total_bytes,
                memory_budget_bytes=free,
                bandwidth_gbps=bw,
                fp16_tflops=g.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS,
                bandwidth_note=note,
            )
        )
    if gpus and not offload_ok:
        notes.append(
            "llama-cpp-python here is a CPU-only build: planning for the CPU although a GPU is present "
            "(rebuild it with CMAKE_ARGS=-DGGML_CUDA=on to use the GPU)"
        )
        gpus = []
    if gpus:
        desc = ", ".join(f"{g.name} ({format_bytes(g.memory_budget_bytes)} free)" for g in gpus)
    else:
        desc = "CPU only" + ("" if machine.gpus else " (no NVIDIA GPU found)")
    return _target(machine, desc, tuple(gpus), tuple(notes))


def target_from_profile(profile: GpuProfile, machine: Machine) -> Target:
    gpu = GpuTarget(
        name=profile.name,
        memory_total_bytes=profile.memory_bytes,
        memory_budget_bytes=profile.memory_bytes,
        bandwidth_gbps=profile.bandwidth_gbps,
        fp16_tflops=profile.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS,
    )
    return _target(machine, f"{profile.name} ({format_bytes(profile.memory_bytes)}, profile)", (gpu,))


def target_from_vram(vram_bytes: int, machine: Machine) -> Target:
    if vram_bytes <= 0:
        raise PlanTargetError("--vram must be a positive size such as 8GiB")
    gpu = GpuTarget(
        name=f"{format_bytes(vram_bytes)} GPU",
        memory_total_bytes=vram_bytes,
        memory_budget_bytes=vram_bytes,
        bandwidth_gbps=HYPOTHETICAL_GPU_BANDWIDTH_GBPS,
        fp16_tflops=HYPOTHETICAL_GPU_FP16_TFLOPS,
        bandwidth_note=f"bandwidth assumed {HYPOTHETICAL_GPU_BANDWIDTH_GBPS:.0f} GB/s (name a --gpu profile for its real figure)",
    )
    return _target(machine, f"hypothetical GPU with {format_bytes(vram_bytes)}", (gpu,))


def target_cpu_only(machine: Machine) -> Target:
    return _target(machine, "CPU only", ())
