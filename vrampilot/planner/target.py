"""What a plan is made for: the detected machine, a GPU profile, a hypothetical VRAM size, or the CPU.

The planner sees only this, so "would this run on an 8 GB card?" is the same computation as
"what runs on my card?". Every front end (the CLI's options, the Plan panel's choice, the hub's
badges) says what it wants as a `TargetRequest` and gets its `Target` from `resolve_target`, the
one way to a Target: no caller can forget an option another one honours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from vrampilot.errors import UserError
from vrampilot.hardware import (
    OS_SOURCES,
    GpuInfo,
    GpuProfile,
    LlamaDevice,
    Machine,
    RpcHost,
    choose_devices,
    match_detected,
)
from vrampilot.planner.learned_factors import LearnedFactors, learned_factors
from vrampilot.speed import DeviceRates, HostProbe, MachineSpeed
from vrampilot.units import GIB, format_bytes

# Without a measurement (no speed probe yet, speed/host_probe.py), a desktop with dual-channel
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
# The link to an RPC host, for the activations that cross it: assumed, not measured (a round
# trip is: RpcHost.rtt_ms). Gigabit Ethernet on a LAN; memory copies on loopback.
LAN_GBPS = 0.118
LOOPBACK_GBPS = 5.0
# An RPC host's device, when nothing says what it is: a desktop CPU's matrix throughput.
RPC_DEVICE_TFLOPS = 0.5


class PlanTargetError(UserError):
    pass


@dataclass(frozen=True)
class GpuTarget:
    """One device llama.cpp offloads layers to: a GPU, or an RPC host's device (another machine's
    GPU or CPU, over the network). Listed in llama.cpp's own order: RPC hosts first, then GPUs."""

    name: str
    memory_total_bytes: int
    memory_budget_bytes: int  # what the plan may use before the margin: free memory when detected
    bandwidth_gbps: float
    fp16_tflops: float
    bandwidth_note: str = ""
    kind: str = "gpu"  # "gpu", "igpu" (its memory is system RAM), "rpc"
    llama_name: str | None = None  # the device as llama-server names it: "CUDA0", "Vulkan1", "RPC0"
    buffer_name: str | None = None  # llama.cpp's name for its buffers: "CUDA0", "RPC0[host:port]"
    endpoint: str | None = None  # an RPC host's host:port
    budget_pinned: bool = False  # the budget is the user's (an RPC host reports no cap of its own)
    # Async compute and events: llama.cpp pipelines a fully offloaded model across such devices.
    asynchronous: bool = True
    network_gbps: float = 0.0  # RPC: the link to the host, for the activations between devices
    rtt_ms: float = 0.0  # RPC: a round trip to the host, paid at every device boundary per token
    margin_override_bytes: int | None = None  # None: the target's device margin
    # llama.cpp's kernels timed on this device (speed/device_probe.py); None: its rates are assumed
    measured: DeviceRates | None = None
    # From the card's GPU profile, when one matches: its vendor, architecture generation and
    # memory kind ("gddr", "hbm"), which the assumed rates depend on (planner/speed_model/predict.py).
    vendor: str = ""
    generation: str = ""
    memory_kind: str = ""
    # Who counted the free memory when it is not the backend's own figure: "NVML" or "DXGI" on
    # Windows (hardware/free_memory.py); "" otherwise.
    budget_source: str = ""

    def margin_bytes(self, default: int) -> int:
        return default if self.margin_override_bytes is None else self.margin_override_bytes

    @property
    def label(self) -> str:
        """For reasons and views: "RTX 3060 (CUDA0)", "RPC host 192.168.1.20:50052"."""
        if self.kind == "rpc":
            return f"RPC host {self.endpoint}" + (f" ({self.name})" if self.name and self.name != self.endpoint else "")
        return f"{self.name} ({self.llama_name})" if self.llama_name and self.llama_name not in self.name else self.name


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
    # What this machine measured (speed/measured.py): its CPU's speed probe (host rates are
    # assumed until it ran) and what replies taught per backend. None for a machine not detected.
    speed: MachineSpeed | None = None
    cpu_variant: str | None = None  # llama.cpp's CPU code here ("haswell"): names the CPU factors
    # The devices are this machine's, as llama.cpp sees them (not a profile or a --vram size):
    # an exact plan may ask llama.cpp to allocate on them.
    devices_here: bool = False
    # Which backend runs each card that several can drive, and why (hardware/cards.py): lines for
    # the plan's reasons. `explicit_devices`: the devices must be named to llama.cpp (--device),
    # since its own default would take another backend's, or both.
    device_reasons: tuple[str, ...] = ()
    explicit_devices: bool = False
    # A GPU profile (a card this machine may not have): its exported line is for that card's
    # machine, so it names nothing of this one (server/binaries.py exported_command). A --vram size
    # is not: it is asked of this machine (a budget on its own card), and exports for it.
    elsewhere: bool = False

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

    def factors_for(self, backend: str, model: str = "") -> LearnedFactors:
        """The learned factors a prediction for `model` (a GGUF file's name) on `backend` uses."""
        return learned_factors(self.speed, backend, model)

    @property
    def device_budget_bytes(self) -> int:
        """Bytes the plan may fill on the GPU(s); the plan's own margin component counts against it."""
        return sum(g.memory_budget_bytes for g in self.gpus)

    @property
    def device_bandwidth_gbps(self) -> float:
        return self.paced_rate(lambda g: g.bandwidth_gbps)

    def paced_rate(self, rate: Callable[[GpuTarget], float]) -> float:
        """A per-device rate over all the GPUs: layers are split across them and run one after
        another, so the slowest card paces a token and the harmonic mean weighted by share is the
        honest figure; with one GPU it is its own (0 without GPUs)."""
        if not self.gpus:
            return 0.0
        total = sum(g.memory_budget_bytes for g in self.gpus) or 1
        return 1.0 / sum((g.memory_budget_bytes / total) / rate(g) for g in self.gpus)

    @property
    def device_tflops(self) -> float:
        return sum(g.fp16_tflops for g in self.gpus)


def _target(
    machine: Machine,
    speed: MachineSpeed | None,
    description: str,
    gpus: tuple[GpuTarget, ...],
    notes: tuple[str, ...] = (),
) -> Target:
    """A target with this machine's host side (RAM less a reserve, cores, CPU throughput, and what
    the speed probe and replies measured here: `speed`)."""
    phys = max(1, machine.cpu.physical_cores)
    return Target(
        description=description,
        gpus=gpus,
        host_ram_bytes=max(0, machine.ram_available_bytes - DEFAULT_HOST_RESERVE_BYTES),
        host_bandwidth_gbps=_ram_bandwidth(speed)[0],
        cpu_physical_cores=phys,
        cpu_logical_cores=max(phys, machine.cpu.logical_cores),
        cpu_gflops=phys * DEFAULT_CPU_GFLOPS_PER_CORE,
        notes=notes,
        speed=speed,
        cpu_variant=machine.llama.cpu_variant,
    )


def _ram_bandwidth(speed: MachineSpeed | None) -> tuple[float, str]:
    """System RAM's read bandwidth (GB/s) and where it came from: the speed probe's, or assumed."""
    probe = speed.probe if speed is not None else None
    if probe is not None and probe.ram_peak_gbps > 0:
        return probe.ram_peak_gbps, f"measured {probe.date}"
    return DEFAULT_HOST_BANDWIDTH_GBPS, "assumed"


def _from_machine(
    machine: Machine,
    speed: MachineSpeed | None,
    rpc_hosts: Sequence[RpcHost] = (),
    rpc_budgets: Mapping[str, int] | None = None,
    gpu_backend: str | None = None,
) -> Target:
    """The machine as llama.cpp will use it: its offload devices (what llama.cpp itself lists,
    one per card: hardware/cards.py; NVML adds an NVIDIA card's bandwidth), and `rpc_hosts`
    (queried with vrampilot.hardware.rpc.query_host) before them, as llama.cpp orders them.
    `rpc_budgets`: the user's cap per host:port (a host reports all its memory as free and has no
    cap). `gpu_backend`: the ggml backend the cards run under where they have it ("CUDA",
    "Vulkan"), None for the planner's choice; one no card has raises GpuBackendError."""
    notes: list[str] = []
    local, reasons, explicit = _local_devices(machine, speed, notes, gpu_backend)
    remote = _rpc_devices(rpc_hosts, rpc_budgets or {}, notes)
    gpus = (*remote, *local)
    if gpus:
        desc = ", ".join(
            f"{g.label} ({format_bytes(g.memory_budget_bytes)}{' pinned' if g.budget_pinned else ' free'}"
            f"{f', by {g.budget_source}' if g.budget_source else ''})"
            for g in gpus
        )
    else:
        desc = "CPU only" + ("" if machine.gpus else " (no GPU found)")
    target = _target(machine, speed, desc, gpus, tuple(notes))
    return replace(
        target,
        devices_here=bool(machine.llama.devices) or bool(remote),
        device_reasons=reasons,
        explicit_devices=explicit and bool(local),
    )


def _local_devices(
    machine: Machine, speed: MachineSpeed | None, notes: list[str], gpu_backend: str | None
) -> tuple[tuple[GpuTarget, ...], tuple[str, ...], bool]:
    """This machine's offload devices, the reasons for their backends, and whether llama.cpp
    must be told them (--device)."""
    llama = machine.llama
    if not llama.devices and gpu_backend is None:
        # llama.cpp's device list was not read (no engine here, or a machine described by hand):
        # NVML's GPUs, when the build can offload at all.
        if machine.gpus and llama.supports_gpu_offload is False:
            notes.append(_no_gpu_backend_note(machine))
            return (), (), False
        return tuple(_nvml_target(g) for g in machine.gpus), (), False
    rates = {d.name: r.prefill_gflops for d in llama.devices if speed and (r := speed.device(d.name, d.description))}
    choice = choose_devices(llama, machine.gpus, gpu_backend, rates)
    devices = choice.devices
    if not devices:
        if machine.gpus:
            notes.append(_no_gpu_backend_note(machine))
        return (), (), False
    out = []
    for d in devices:
        card = choice.card_of(d)
        nv = card.nvml if card is not None else None
        if d.kind == "igpu":
            # Its "VRAM" is system RAM: the budget is the RAM llama.cpp may take, and the search
            # counts those bytes once, against the host (search._host_bytes).
            budget = min(d.memory_free_bytes, max(0, machine.ram_available_bytes - DEFAULT_HOST_RESERVE_BYTES))
            notes.append(
                f"{d.description or d.name} ({d.name}) is an integrated GPU: its memory is system RAM, "
                "shared with the CPU's part of the plan"
            )
            ram_gbps, ram_source = _ram_bandwidth(speed)  # the CPU's measurement holds for its RAM
            out.append(
                GpuTarget(
                    name=d.description or d.name,
                    memory_total_bytes=d.memory_total_bytes,
                    memory_budget_bytes=budget,
                    bandwidth_gbps=ram_gbps,
                    fp16_tflops=HYPOTHETICAL_GPU_FP16_TFLOPS / 8,
                    kind="igpu",
                    llama_name=d.name,
                    buffer_name=d.name,
                    asynchronous=d.asynchronous,
                    bandwidth_note=f"bandwidth of system RAM {ram_source}, {ram_gbps:.1f} GB/s",
                    budget_source=_os_source(d),
                )
            )
            continue
        bw, tflops, note = _bandwidth_of(d.description or d.name, d.memory_total_bytes, nv)
        measured = speed.device(d.name, d.description) if speed is not None else None
        out.append(
            _with_profile_traits(
                GpuTarget(
                    name=d.description or d.name,
                    memory_total_bytes=d.memory_total_bytes,
                    memory_budget_bytes=d.memory_free_bytes,
                    bandwidth_gbps=bw,
                    fp16_tflops=tflops,
                    bandwidth_note=note,
                    kind="gpu",
                    llama_name=d.name,
                    buffer_name=d.name,
                    asynchronous=d.asynchronous,
                    measured=measured,
                    budget_source=_os_source(d),
                ),
                d.memory_total_bytes,
            )
        )
    return tuple(out), choice.reasons, choice.explicit


def _os_source(d: LlamaDevice) -> str:
    return d.memory_free_source if d.memory_free_source in OS_SOURCES else ""


def _no_gpu_backend_note(machine: Machine) -> str:
    why = f" ({machine.llama.gpu_build_note})" if machine.llama.gpu_build_note else ""
    return (
        f"this engine has no backend for {machine.gpus[0].name}{why}: planning for the CPU; "
        "`vrampilot doctor` says what to install and how to rebuild the engine"
    )


def _nvml_target(g: GpuInfo) -> GpuTarget:
    bw = g.peak_bandwidth_gbps or HYPOTHETICAL_GPU_BANDWIDTH_GBPS
    note = "" if g.peak_bandwidth_gbps else f"bandwidth unknown, assuming {bw:.0f} GB/s"
    free = g.memory_free_bytes if g.memory_free_bytes is not None else g.memory_total_bytes
    gpu = GpuTarget(
        name=g.name,
        memory_total_bytes=g.memory_total_bytes,
        memory_budget_bytes=free,
        bandwidth_gbps=bw,
        fp16_tflops=g.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS,
        bandwidth_note=note,
        llama_name=f"CUDA{g.index}",
        buffer_name=f"CUDA{g.index}",
    )
    return _with_profile_traits(gpu, g.memory_total_bytes)


def _with_profile_traits(gpu: GpuTarget, total: int) -> GpuTarget:
    """`gpu` with what the speed model reads from its profile, when one matches the detected card:
    its vendor, architecture generation and memory kind (planner/speed_model/predict.py prices HBM and each
    generation apart)."""
    profile = match_detected(gpu.name, total)
    if profile is None:
        return gpu
    return replace(gpu, vendor=profile.vendor, generation=profile.generation, memory_kind=profile.memory_kind)


def _bandwidth_of(name: str, total: int, nv: GpuInfo | None) -> tuple[float, float, str]:
    if nv is not None and nv.peak_bandwidth_gbps:
        return nv.peak_bandwidth_gbps, nv.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS, ""
    profile = match_detected(name, total)
    if profile is not None:
        return profile.bandwidth_gbps, profile.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS, ""
    bw = HYPOTHETICAL_GPU_BANDWIDTH_GBPS
    return bw, HYPOTHETICAL_GPU_FP16_TFLOPS, f"bandwidth unknown, assuming {bw:.0f} GB/s"


def _rpc_devices(hosts: Sequence[RpcHost], budgets: Mapping[str, int], notes: list[str]) -> tuple[GpuTarget, ...]:
    out = []
    k = 0  # llama-server numbers RPC devices in --rpc order: RPC0, RPC1, ...
    for host in hosts:
        loopback = host.endpoint.startswith(("127.", "localhost:", "[::1]:"))
        pinned = budgets.get(host.endpoint)
        for dev in host.devices:
            if pinned is not None:
                budget = min(pinned, dev.memory_free_bytes) // len(host.devices)
            else:
                budget = max(0, dev.memory_free_bytes - DEFAULT_HOST_RESERVE_BYTES)
            out.append(
                GpuTarget(
                    name=host.endpoint if len(host.devices) == 1 else f"{host.endpoint} #{dev.index}",
                    memory_total_bytes=dev.memory_total_bytes,
                    memory_budget_bytes=budget,
                    bandwidth_gbps=DEFAULT_HOST_BANDWIDTH_GBPS,
                    fp16_tflops=RPC_DEVICE_TFLOPS,
                    bandwidth_note=(
                        f"the host's device is assumed to be a CPU: {DEFAULT_HOST_BANDWIDTH_GBPS:.0f} GB/s, "
                        f"{RPC_DEVICE_TFLOPS:g} TFLOP/s (ggml's RPC protocol does not say what it is)"
                    ),
                    kind="rpc",
                    llama_name=f"RPC{k}",
                    buffer_name=f"RPC{dev.index}[{host.endpoint}]",
                    endpoint=host.endpoint,
                    budget_pinned=pinned is not None,
                    asynchronous=True,
                    network_gbps=LOOPBACK_GBPS if loopback else LAN_GBPS,
                    rtt_ms=host.rtt_ms,
                    # A pinned budget is what the host may hold; unpinned, keep llama.cpp's margin.
                    margin_override_bytes=0 if pinned is not None else None,
                )
            )
            k += 1
        if pinned is None:
            notes.append(
                f"RPC host {host.endpoint} reports all its memory as free and has no cap of its own: "
                f"pin what it may use (--rpc {host.endpoint}=6GiB)"
            )
    return tuple(out)


@dataclass(frozen=True)
class TargetRequest:
    """What a plan is for, as the user asked it: this machine (the default), its CPU alone, a GPU
    profile or a hypothetical VRAM size; RPC hosts to spread layers over; the backend of cards
    several can drive; the VRAM kept free per device. Plain data, checked when made, so a front
    end maps its options to one request and `resolve_target` does the rest."""

    cpu_only: bool = False
    profile: GpuProfile | None = None
    vram_bytes: int | None = None
    # The ggml backend this machine's cards run under where they have it ("CUDA", "Vulkan",
    # hardware/cards.py); None: the planner's choice. Only for this machine's own cards.
    gpu_backend: str | None = None
    # Hosts as they answered (vrampilot.hardware.rpc.query_hosts), and the user's cap per host:port
    # (a host reports all its memory as free and has no cap of its own). This machine's plans only.
    rpc_hosts: tuple[RpcHost, ...] = ()
    rpc_budget_bytes: Mapping[str, int] = field(default_factory=dict)
    margin_bytes: int | None = None  # VRAM kept free per device; None: DEFAULT_DEVICE_MARGIN_BYTES

    def __post_init__(self) -> None:
        if self.cpu_only + (self.profile is not None) + (self.vram_bytes is not None) > 1:
            raise PlanTargetError(
                "plan for one of: a GPU profile (--gpu), a VRAM size (--vram) or the CPU (--cpu-only)"
            )
        if self.vram_bytes is not None and self.vram_bytes <= 0:
            raise PlanTargetError("--vram must be a positive size such as 8GiB")
        if self.margin_bytes is not None and self.margin_bytes < 0:
            raise PlanTargetError("--margin must be a size of 0 or more, such as 1GiB")
        if self.gpu_backend is not None and not self.this_machines_gpus:
            raise PlanTargetError(
                "--gpu-backend picks the backend of this machine's GPUs: leave out --gpu, --vram and --cpu-only"
            )
        if self.rpc_hosts:
            self.refuse_rpc_hosts()

    def refuse_rpc_hosts(self) -> None:
        """RPC hosts join this machine's devices or its CPU, never a hypothetical GPU: raises for
        those (before anyone asks a host over the network)."""
        if self.profile is not None or self.vram_bytes is not None:
            raise PlanTargetError("--rpc plans with this machine's devices and the hosts: leave out --gpu and --vram")

    @property
    def this_machines_gpus(self) -> bool:
        """Whether the plan is for this machine's own GPUs (not its CPU alone, a profile or a size)."""
        return not self.cpu_only and self.profile is None and self.vram_bytes is None


def resolve_target(request: TargetRequest, machine: Machine, speed: MachineSpeed | None = None) -> Target:
    """The one way to a Target: `request` on `machine` with `speed`, what was measured on it (both
    from vrampilot.speed.service.detect_measured_machine; or a machine described by hand in tests,
    whose rates are then assumed).

    A profile or a VRAM size is a hypothetical GPU beside this machine's host side. This machine
    is its offload devices as llama.cpp lists them, RPC hosts first; CPU only leaves its GPUs out,
    never the hosts the user named (an exact plan still asks llama.cpp, whose devices here are then
    the CPU and the hosts). A `gpu_backend` no card has raises GpuBackendError."""
    if request.profile is not None:
        target = _from_profile(request.profile, machine, speed)
    elif request.vram_bytes is not None:
        target = _from_vram(request.vram_bytes, machine, speed)
    elif request.cpu_only and not request.rpc_hosts:
        target = _cpu_only(machine, speed)
    else:
        if request.cpu_only:
            # llama.cpp's devices here less those it offloads to (the CPU, an accelerator like
            # BLAS stays): the hosts are the only offload devices.
            cpu_devices = tuple(d for d in machine.llama.devices if d.kind not in ("gpu", "igpu"))
            machine = replace(machine, gpus=(), llama=replace(machine.llama, devices=cpu_devices))
        target = _from_machine(machine, speed, request.rpc_hosts, request.rpc_budget_bytes, request.gpu_backend)
    if request.margin_bytes is not None:
        target = replace(target, device_margin_bytes=request.margin_bytes)
    return target


def _from_profile(profile: GpuProfile, machine: Machine, speed: MachineSpeed | None) -> Target:
    gpu = GpuTarget(
        name=profile.name,
        memory_total_bytes=profile.memory_bytes,
        memory_budget_bytes=profile.memory_bytes,
        bandwidth_gbps=profile.bandwidth_gbps,
        fp16_tflops=profile.fp16_tflops or HYPOTHETICAL_GPU_FP16_TFLOPS,
        vendor=profile.vendor,
        generation=profile.generation,
        memory_kind=profile.memory_kind,
    )
    description = f"{profile.name} ({format_bytes(profile.memory_bytes)}, profile)"
    return replace(_target(machine, speed, description, (gpu,)), elsewhere=True)


def _from_vram(vram_bytes: int, machine: Machine, speed: MachineSpeed | None) -> Target:
    gpu = GpuTarget(
        name=f"{format_bytes(vram_bytes)} GPU",
        memory_total_bytes=vram_bytes,
        memory_budget_bytes=vram_bytes,
        bandwidth_gbps=HYPOTHETICAL_GPU_BANDWIDTH_GBPS,
        fp16_tflops=HYPOTHETICAL_GPU_FP16_TFLOPS,
        bandwidth_note=f"bandwidth assumed {HYPOTHETICAL_GPU_BANDWIDTH_GBPS:.0f} GB/s (name a --gpu profile for its real figure)",
    )
    return _target(machine, speed, f"hypothetical GPU with {format_bytes(vram_bytes)}", (gpu,))


def _cpu_only(machine: Machine, speed: MachineSpeed | None) -> Target:
    return _target(machine, speed, "CPU only", ())
