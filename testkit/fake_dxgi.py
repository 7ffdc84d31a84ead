"""A test double at the DXGI boundary (Windows' own count of video memory, which Wine lacks).

It stands where `vrampilot.hardware.dxgi.ComDxgi` stands and returns what DXGI itself fills in:
one `DXGI_ADAPTER_DESC1` (name, sizes, LUID, flags) and two `DXGI_QUERY_VIDEO_MEMORY_INFO`
(local: dedicated VRAM; non-local: shared GPU memory) per adapter, as the real ctypes structures.
Everything that reads them is the product's own code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from vrampilot.hardware import DXGI_ADAPTER_FLAG_SOFTWARE, AdapterDesc1, Luid, RawAdapter, VideoMemoryInfo

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class FakeAdapter:
    name: str = "NVIDIA GeForce RTX 4070"
    luid_low: int = 0x0000D1A2
    luid_high: int = 0
    vendor_id: int = 0x10DE
    dedicated_video_bytes: int = 12 * GIB
    dedicated_system_bytes: int = 0
    shared_system_bytes: int = 16 * GIB
    local_budget_bytes: int = 11 * GIB
    local_usage_bytes: int = 0
    non_local_budget_bytes: int = 15 * GIB
    non_local_usage_bytes: int = 0
    software: bool = False
    adapter3: bool = True  # False: Windows before 10, no IDXGIAdapter3

    @property
    def luid(self) -> int:
        return (self.luid_high & 0xFFFFFFFF) << 32 | self.luid_low


# What every Windows 10+ machine lists last: WARP, the software renderer.
BASIC_RENDER = FakeAdapter(
    name="Microsoft Basic Render Driver",
    luid_low=0x0000E3F1,
    vendor_id=0x1414,
    dedicated_video_bytes=0,
    shared_system_bytes=16 * GIB,
    local_budget_bytes=0,
    software=True,
)


class FakeDxgi:
    """`enum_adapters()` as `ComDxgi` has it; `error`: the OSError a failing DXGI raises."""

    def __init__(self, adapters: Sequence[FakeAdapter], error: str | None = None) -> None:
        self.adapters = tuple(adapters)
        self.error = error

    def enum_adapters(self) -> Iterator[RawAdapter]:
        if self.error is not None:
            raise OSError(self.error)
        for a in self.adapters:
            desc = AdapterDesc1(
                Description=a.name,
                VendorId=a.vendor_id,
                DedicatedVideoMemory=a.dedicated_video_bytes,
                DedicatedSystemMemory=a.dedicated_system_bytes,
                SharedSystemMemory=a.shared_system_bytes,
                AdapterLuid=Luid(a.luid_low, a.luid_high),
                Flags=DXGI_ADAPTER_FLAG_SOFTWARE if a.software else 0,
            )
            if not a.adapter3:
                yield desc, None, None
                continue
            local = VideoMemoryInfo(Budget=a.local_budget_bytes, CurrentUsage=a.local_usage_bytes)
            non_local = VideoMemoryInfo(Budget=a.non_local_budget_bytes, CurrentUsage=a.non_local_usage_bytes)
            yield desc, local, non_local
