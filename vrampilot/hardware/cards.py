"""One GPU per physical card, whichever backends can drive it, and which backend a plan uses.

An engine with CUDA and Vulkan lists an NVIDIA card twice: "CUDA0" and "Vulkan1" are the same
silicon. The reports must show it once, and a plan must run it under one backend: two backends on
one card would split the layers across the same memory twice. llama.cpp's own default
(src/llama.cpp, llama_model_load_from_file_impl) keeps the first device registered for a PCI id
and skips the later ones, comparing the ids as strings; this module matches them the same way,
after normalising the text, and falls back to NVML where a backend gives no id.

What the vendored ggml fills in `ggml_backend_dev_props.device_id` (the only cross-backend key it
exposes; neither backend exposes a UUID through the device API):
- ggml-cuda: `cudaDeviceGetPCIBusId`, lower-cased: "0000:01:00.0" (a virtual device, several per
  GPU, gets "-v<N>" appended so that llama.cpp keeps each);
- ggml-vulkan: VK_EXT_pci_bus_info printed "%04x:%02x:%02x.%x", or nothing where the driver lacks
  the extension (Mesa's lavapipe, some older drivers);
- NVML: `nvmlDeviceGetPciInfo().busId`, upper case with an 8-digit domain: "00000000:01:00.0".

Which backend a card runs by default: the one whose prompt products measured fastest on it, once
the device probe has timed each (`vrampilot doctor --measure`, and the app once per device); until
then a vendor's own (CUDA on NVIDIA) before Vulkan. Both are memory-bound when generating, so
tokens/s differ little, but reading a prompt is compute-bound, and llama.cpp's CUDA kernels use the
tensor cores for batched products where its Vulkan shaders do so only when the driver exposes
cooperative matrices (ggml-vulkan's "matrix cores:" line), so prompts are expected faster under
CUDA. `--gpu-backend` pins the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vrampilot.errors import UserError
from vrampilot.hardware.types import GpuInfo, LlamaBackendInfo, LlamaDevice
from vrampilot.units import GIB

# What `--gpu-backend` accepts, and the ggml registry name each one means.
GPU_BACKEND_CHOICES = {"cuda": "CUDA", "vulkan": "Vulkan"}
# Backends a card runs under only when it has no other: a portable API after the vendor's own.
_PORTABLE_BACKENDS = ("Vulkan", "OpenCL")
# Why the default prefers the vendor's backend, for the plan's reasons.
PROMPT_SPEED_NOTE = (
    "llama.cpp's CUDA kernels read prompts on the tensor cores, its Vulkan shaders only where the driver "
    "exposes cooperative matrices, so prompts are expected faster under CUDA (generating is memory-bound "
    "and about the same); until measured the speed model prices both alike"
)

_PCI = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


class GpuBackendError(UserError):
    pass


def normalize_pci_id(text: str | None) -> str | None:
    """One spelling of a PCI bus id, "0000:01:00.0", from ggml-cuda's, ggml-vulkan's or NVML's
    (any case, a 4- or 8-digit domain, or none). An id that is not a plain PCI address (a CUDA
    virtual device's "0000:01:00.0-v1") is kept as it is, lower-cased: it names one device only."""
    if not text:
        return None
    t = text.strip().lower()
    m = _PCI.match(t)
    if m is None:
        return t or None
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


@dataclass(frozen=True)
class Card:
    """One physical GPU and the llama.cpp devices that drive it, in ggml's order."""

    name: str
    devices: tuple[LlamaDevice, ...]
    pci_bus_id: str | None = None
    nvml: GpuInfo | None = None  # NVML's record of it (an NVIDIA card), None elsewhere

    @property
    def kind(self) -> str:
        return self.devices[0].kind

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(d.backend for d in self.devices)

    def device_for(self, backend: str) -> LlamaDevice | None:
        return next((d for d in self.devices if d.backend == backend), None)

    @property
    def preferred(self) -> LlamaDevice:
        """The device the card runs as by default: a vendor's backend before a portable one."""
        native = [d for d in self.devices if d.backend not in _PORTABLE_BACKENDS]
        return (native or list(self.devices))[0]

    def devices_text(self, chosen: LlamaDevice | None = None) -> str:
        """ "CUDA0, also Vulkan1": the device used (by default: the preferred one) first."""
        first = chosen or self.preferred
        others = [d.name for d in self.devices if d.name != first.name]
        return first.name + (f", also {', '.join(others)}" if others else "")

    def label(self, chosen: LlamaDevice | None = None) -> str:
        """ "NVIDIA GeForce RTX 4090 (CUDA0, also Vulkan1)"."""
        return f"{self.name} ({self.devices_text(chosen)})"


def _nvml_for(d: LlamaDevice, gpus: Sequence[GpuInfo], pci: str | None) -> GpuInfo | None:
    """NVML's record of the card llama.cpp calls `d`: by PCI id when both know it, else by name and
    size (two identical cards are interchangeable for a plan: same memory, same speed)."""
    if pci is not None:
        by_id = next((g for g in gpus if normalize_pci_id(g.pci_bus_id) == pci), None)
        if by_id is not None or any(g.pci_bus_id for g in gpus):
            return by_id
    for g in gpus:
        if g.name and g.name in (d.description or "") and abs(g.memory_total_bytes - d.memory_total_bytes) < GIB:
            return g
    return None


def group_cards(llama: LlamaBackendInfo, gpus: Sequence[GpuInfo] = ()) -> tuple[Card, ...]:
    """This machine's GPUs as cards, in the order llama.cpp lists their first device. Discrete GPUs;
    integrated ones only when there is none (llama.cpp's own rule). A device whose backend gave no
    PCI id joins the card NVML names for it (by name and size), or without NVML the card another
    backend lists under the same name and size; each backend's devices are matched once, in
    order, so two identical cards without ids are paired first with first."""
    devices = [d for d in llama.devices if d.kind == "gpu" and d.backend != "RPC"]
    if not devices:
        devices = [d for d in llama.devices if d.kind == "igpu"]
    keys: list[str] = []
    members: dict[str, list[LlamaDevice]] = {}
    nvml: dict[str, GpuInfo] = {}
    claimed: dict[str, set[int]] = {}  # per backend: the NVML cards its id-less devices took
    for i, d in enumerate(devices):
        pci = normalize_pci_id(d.device_id)
        free = [g for g in gpus if g.index not in claimed.get(d.backend, set())]
        nv = _nvml_for(d, free, pci)
        if nv is not None:
            claimed.setdefault(d.backend, set()).add(nv.index)
            pci = pci or normalize_pci_id(nv.pci_bus_id)
        key = pci or (f"nvml:{nv.index}" if nv is not None else _same_card(d, members) or f"device:{i}")
        if key in members and any(m.backend == d.backend for m in members[key]):
            key = f"device:{i}"  # one backend lists each card once: two of its devices are two cards
        if key not in members:
            keys.append(key)
            members[key] = []
        members[key].append(d)
        if nv is not None:
            nvml.setdefault(key, nv)
    out = []
    for key in keys:
        devs = tuple(members[key])
        nv = nvml.get(key)
        pci = key if ":" in key and not key.startswith(("nvml:", "device:")) else None
        name = nv.name if nv is not None else (devs[0].description or devs[0].name)
        out.append(Card(name=name, devices=devs, pci_bus_id=pci, nvml=nv))
    return tuple(out)


def _same_card(d: LlamaDevice, members: dict[str, list[LlamaDevice]]) -> str | None:
    """With neither an id nor NVML (no NVIDIA driver library readable): the card another backend
    lists under the same name and size, if that card has no device of `d`'s backend yet."""
    for key, devs in members.items():
        first = devs[0]
        if (
            all(x.backend != d.backend for x in devs)
            and first.description == d.description
            and abs(first.memory_total_bytes - d.memory_total_bytes) < GIB
        ):
            return key
    return None


def card_devices(llama: LlamaBackendInfo, gpus: Sequence[GpuInfo] = ()) -> tuple[LlamaDevice, ...]:
    """Every device of every card, each backend's (what the device probe times, so that the choice
    between backends can rest on this card's own figures), in ggml's order."""
    mine = {id(d) for c in group_cards(llama, gpus) for d in c.devices}
    return tuple(d for d in llama.devices if id(d) in mine)


@dataclass(frozen=True)
class DeviceChoice:
    """The devices a plan on this machine offloads to, one per card, and why."""

    cards: tuple[Card, ...]
    devices: tuple[LlamaDevice, ...]  # in ggml's order
    reasons: tuple[str, ...]
    # llama-server and the engine must be told the devices (--device): a card seen by several
    # backends, a pin, or a choice other than llama.cpp's own default.
    explicit: bool

    def card_of(self, device: LlamaDevice) -> Card | None:
        return next((c for c in self.cards if device in c.devices), None)


def parse_gpu_backend(value: str | None) -> str | None:
    """ "cuda" -> "CUDA"; None or "" or "auto" -> None (the planner chooses)."""
    if value is None or value.strip().lower() in ("", "auto"):
        return None
    backend = GPU_BACKEND_CHOICES.get(value.strip().lower())
    if backend is None:
        raise GpuBackendError(
            f"--gpu-backend {value}: choose one of {', '.join(GPU_BACKEND_CHOICES)} (or auto: the planner's choice)"
        )
    return backend


def choose_devices(
    llama: LlamaBackendInfo,
    gpus: Sequence[GpuInfo] = (),
    pin: str | None = None,
    prefill_gflops: Mapping[str, float] | None = None,
) -> DeviceChoice:
    """One device per card: the pinned backend (a ggml registry name, "CUDA", "Vulkan") where the
    card has it, else the one whose prompt products measured fastest on this card
    (`prefill_gflops`, by device name: the device probe, speed/device_probe.py) when each of its
    devices was measured, else the vendor's own. A pin no card can use is refused in one line."""
    cards = group_cards(llama, gpus)
    if pin is not None and not any(pin in c.backends for c in cards):
        raise GpuBackendError(_refusal(llama, cards, pin))
    measured = prefill_gflops or {}
    chosen: list[LlamaDevice] = []
    reasons: list[str] = []
    if cards and cards[0].kind == "igpu":
        # llama.cpp runs integrated GPUs of one backend only (several backends see one APU, and
        # without ids they cannot be told apart): the pinned one, else the first preferred one.
        preferred = sorted((c.preferred.backend for c in cards), key=lambda b: b in _PORTABLE_BACKENDS)
        backend = pin or preferred[0]
        chosen = [d for c in cards for d in c.devices if d.backend == backend]
    else:
        for c in cards:
            rates = {d.name: measured[d.name] for d in c.devices if measured.get(d.name, 0) > 0}
            if pin is not None:
                d = c.device_for(pin) or c.preferred
            elif len(c.devices) > 1 and len(rates) == len(c.devices):
                d = max(c.devices, key=lambda x: rates[x.name])
            else:
                d = c.preferred
            chosen.append(d)
            if len(c.devices) > 1:
                reasons.append(_reason(c, d, pin, rates))
            elif pin and d.backend != pin:
                reasons.append(f"{c.label(d)}: runs under {d.backend}, its only backend ({pin} pinned for the others).")
            elif pin:
                reasons.append(
                    f"{c.name} runs as {d.name} ({d.backend}): pinned by you (--gpu-backend), its only backend."
                )
    devices = tuple(sorted(chosen, key=llama.devices.index))
    explicit = pin is not None or any(len(c.devices) > 1 for c in cards) or devices != llama.offload_devices
    return DeviceChoice(cards=cards, devices=devices, reasons=tuple(reasons), explicit=explicit)


def _reason(card: Card, d: LlamaDevice, pin: str | None, rates: Mapping[str, float]) -> str:
    others = [x for x in card.devices if x is not d]
    other = ", ".join(f"{x.name} ({x.backend})" for x in others)
    if pin is not None:
        return f"{card.name} runs as {d.name} ({d.backend}): pinned by you (--gpu-backend), not {other}."
    flags = [k for x in others for k, v in GPU_BACKEND_CHOICES.items() if v == x.backend]
    pin_hint = f" --gpu-backend {flags[0]} pins the other." if flags else ""
    if len(rates) == len(card.devices):
        figures = ", ".join(f"{rates[x.name]:.0f} under {x.backend}" for x in others)
        slower = max(rates[x.name] for x in others)
        return (
            f"{card.name} runs as {d.name} ({d.backend}), not {other}: prompt products measured on this card "
            f"at {rates[d.name]:.0f} GFLOP/s under {d.backend}, {figures} "
            f"({rates[d.name] / slower:.2f}x; generating is memory-bound and differs less).{pin_hint}"
        )
    if d.backend == "CUDA":
        return (
            f"{card.name} runs as {d.name} (CUDA), not {other}: {PROMPT_SPEED_NOTE}; "
            f"`vrampilot doctor --measure` times both.{pin_hint}"
        )
    return f"{card.name} runs as {d.name} ({d.backend}), the vendor's backend, not {other}.{pin_hint}"


def _refusal(llama: LlamaBackendInfo, cards: Sequence[Card], pin: str) -> str:
    flag = next(k for k, v in GPU_BACKEND_CHOICES.items() if v == pin)
    if not cards:
        has = "no GPU llama.cpp can offload to"
        if llama.error:
            has += f" ({llama.error})"
    else:
        has = "; ".join(c.label() for c in cards)
    why = f"; GPU backends not in this engine: {llama.gpu_build_note}" if llama.gpu_build_note else ""
    return f"--gpu-backend {flag}: no GPU here runs under {pin} (this machine has {has}{why})"
