"""What the machine has, as plain frozen data that the planner, the CLI and the GUI all read.

Units live in the field names (`memory_total_bytes`, `peak_bandwidth_gbps`) so that a reader never
has to guess whether a number is MiB, GiB or GB. `None` always means "could not be read here",
never zero.
"""

from __future__ import annotations

from dataclasses import dataclass

BANDWIDTH_SOURCES = ("nvml", "profile", "unknown")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU, detected through NVML or built from a profile (see `profiles.profile_as_gpu`)."""

    index: int
    name: str
    uuid: str | None
    vendor: str
    memory_total_bytes: int
    memory_free_bytes: int | None
    memory_used_bytes: int | None
    driver_version: str | None
    cuda_version: str | None
    memory_bus_width_bits: int | None
    memory_clock_max_mhz: int | None
    peak_bandwidth_gbps: float | None
    bandwidth_source: str  # "nvml" | "profile" | "unknown"
    pcie_generation: int | None
    pcie_width: int | None
    display_active: bool | None
    fp16_tflops: float | None
    # NVML's PCI bus id ("00000000:01:00.0"): what matches this card to llama.cpp's devices
    # (hardware/cards.py); None for a profile or where NVML does not say.
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class GpuSample:
    """One live reading of a GPU, for the meters. Fields the driver does not support are None.

    PCIe throughput is what NVML reports: KB/s over its last ~20 ms window. The process memory
    is the sum for the requested pid; None when NVML does not list that pid (not on the GPU, a
    container's pid namespace, or Windows WDDM, which does not report per-process memory).
    """

    index: int
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_gpu_pct: int | None
    utilization_memory_pct: int | None
    pcie_rx_kb_per_s: int | None
    pcie_tx_kb_per_s: int | None
    clock_graphics_mhz: int | None
    clock_memory_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    process_memory_used_bytes: int | None
    # Who counted the process's memory: NVML (the driver's per-process figure), or "llama.cpp"
    # (its own buffers on a device whose driver reports no use: vrampilot.llamacpp.allocations).
    process_memory_source: str = "nvml"


@dataclass(frozen=True)
class CpuInfo:
    """The host CPU. `features` are the instruction sets llama.cpp picks kernels by, lower case."""

    model_name: str
    architecture: str
    physical_cores: int
    logical_cores: int
    features: tuple[str, ...]


@dataclass(frozen=True)
class LlamaDevice:
    """A device as llama.cpp sees it (vrampilot.llamacpp.devices): what a plan offloads to."""

    name: str  # "CPU", "CUDA0", "Vulkan0"
    description: str  # the GPU's name
    kind: str  # "cpu", "gpu", "igpu" (its memory is system RAM), "accel"
    backend: str  # "CPU", "CUDA", "Vulkan", ...
    memory_free_bytes: int
    memory_total_bytes: int
    device_id: str | None = None  # PCI bus id, when the backend knows it
    asynchronous: bool = False
    # Windows' adapter id (LUID, as one 64-bit number): Vulkan's VkPhysicalDeviceIDProperties for a
    # Vulkan device (vulkan_probe), what matches it to DXGI's adapter; None elsewhere.
    luid: int | None = None
    # Who counted `memory_free_bytes` (hardware/free_memory.py decides): "CUDA", "Vulkan memory
    # budget", "Vulkan heap size" (no budget: the heap, whatever is in use), "NVML", "DXGI".
    memory_free_source: str = ""


@dataclass(frozen=True)
class LlamaBackendInfo:
    """What the installed llama-cpp-python was built with; `error` says why it could not load."""

    version: str | None
    supports_gpu_offload: bool | None
    system_info: str | None
    error: str | None
    # How the engine's backends were loaded (vrampilot.llamacpp.backends): the CPU variant and why,
    # "dispatched" / "forced" / "ggml-score" / "static", the build recipe, the backends registered.
    cpu_variant: str | None = None
    cpu_dispatch: str | None = None
    backend_mode: str | None = None
    recipe_key: str | None = None
    backends: tuple[str, ...] = ()
    backend_failures: tuple[str, ...] = ()
    devices: tuple[LlamaDevice, ...] = ()  # in ggml's order, the CPU included
    gpu_build_note: str | None = None  # which GPU backends the engine lacks and why (its manifest)
    vulkan_status: str | None = None  # one line: the Vulkan devices found, or what is missing (None: no module)
    cuda_status: str | None = None  # one line: the CUDA module's devices, or why it runs without (None: no module)

    @property
    def offload_devices(self) -> tuple[LlamaDevice, ...]:
        """The devices llama.cpp would offload to by default (src/llama.cpp, default device
        selection): GPUs, one per PCI id; integrated GPUs only when there is no discrete one."""
        gpus: list[LlamaDevice] = []
        for d in self.devices:
            if d.kind == "gpu" and d.backend != "RPC":
                if d.device_id and any(g.device_id == d.device_id for g in gpus):
                    continue  # one card seen by two backends (CUDA and Vulkan): llama.cpp keeps the first
                gpus.append(d)
        if gpus:
            return tuple(gpus)
        igpus = [d for d in self.devices if d.kind == "igpu"]
        return tuple(d for d in igpus if d.backend == igpus[0].backend)


@dataclass(frozen=True)
class DxgiAdapter:
    """One adapter as Windows' DXGI counts its memory (hardware/dxgi.py): the figures Task Manager
    shows. "Local" is the adapter's dedicated VRAM (on an integrated GPU, the memory Windows lets
    it take), "non-local" is shared GPU memory: system RAM the driver may spill into. Budgets are
    what Windows lets this process use now; usages are this process's own."""

    luid: int  # LowPart | HighPart << 32, as Vulkan's deviceLUID reads little-endian
    name: str
    vendor_id: int
    dedicated_video_bytes: int
    dedicated_system_bytes: int
    shared_system_bytes: int
    software: bool  # the Microsoft Basic Render Driver (WARP): not a GPU
    local_budget_bytes: int | None = None  # None: no IDXGIAdapter3 (Windows before 10)
    local_usage_bytes: int | None = None
    non_local_budget_bytes: int | None = None
    non_local_usage_bytes: int | None = None

    @property
    def local_free_bytes(self) -> int | None:
        """What this process may still place in dedicated VRAM before Windows starts evicting."""
        if self.local_budget_bytes is None or self.local_usage_bytes is None:
            return None
        return max(0, self.local_budget_bytes - self.local_usage_bytes)

    @property
    def luid_text(self) -> str:
        """As Windows prints it in performance counter instances: "0x00000000_0x0000D1A2"."""
        return luid_text(self.luid)


def luid_text(luid: int) -> str:
    return f"0x{luid >> 32 & 0xFFFFFFFF:08X}_0x{luid & 0xFFFFFFFF:08X}"


@dataclass(frozen=True)
class Machine:
    """Everything the planner needs to know about where the model will run.

    `nvml_status` is one line for a person ("NVML: driver 550.54, CUDA 12.4, 1 GPU").
    `nvml_available` says whether NVML answered at all, so callers need not parse that line.
    """

    gpus: tuple[GpuInfo, ...]
    cpu: CpuInfo
    ram_total_bytes: int
    ram_available_bytes: int
    nvml_status: str
    llama: LlamaBackendInfo
    nvml_available: bool = False
    # Windows: DXGI's adapters (hardware/dxgi.py) and its one-line status; () and "" elsewhere.
    dxgi_adapters: tuple[DxgiAdapter, ...] = ()
    dxgi_status: str = ""

    @property
    def gpu_memory_total_bytes(self) -> int:
        return sum(g.memory_total_bytes for g in self.gpus)
