"""Windows' own count of each GPU's memory: DXGI, the figures Task Manager shows.

On Windows the Vulkan memory-budget extension is not a measure of free VRAM: NVIDIA's Windows
driver reports a constant budget whatever is in use, and Intel's integrated GPUs report more than
the adapter may take. Windows itself (WDDM's video memory manager) decides what a process may keep
resident; DXGI's `IDXGIAdapter3::QueryVideoMemoryInfo` reports it per adapter: for the local segment
group (dedicated VRAM) and the non-local one (shared GPU memory, system RAM the driver spills into),
the budget Windows grants this process and what this process uses now.

The COM calls are ctypes calls through each interface's vtable (x64: one calling convention):
`CreateDXGIFactory1` -> `IDXGIFactory1::EnumAdapters1` -> `IDXGIAdapter1::GetDesc1` (name, sizes,
LUID) -> `QueryInterface(IDXGIAdapter3)` -> `QueryVideoMemoryInfo(node 0, LOCAL / NON_LOCAL)`. They
live in `ComDxgi` only; everything after it reads the two structures DXGI fills in, which is what
the test double (testkit/fake_dxgi.py) returns. `read_dxgi` never raises: no dxgi.dll (not
Windows), a failing call, an adapter without IDXGIAdapter3 (Windows before 10) become a status.

The adapter is matched to llama.cpp's device by LUID (`LlamaDevice.luid`, from Vulkan's
VkPhysicalDeviceIDProperties: hardware/free_memory.py).
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from vrampilot.hardware.types import DxgiAdapter

# DXGI_MEMORY_SEGMENT_GROUP
SEGMENT_LOCAL = 0
SEGMENT_NON_LOCAL = 1
DXGI_ADAPTER_FLAG_SOFTWARE = 2
DXGI_ERROR_NOT_FOUND = 0x887A0002  # EnumAdapters1 past the last adapter

IID_IDXGIFactory1 = "770aae78-f26f-4dba-a829-253c83d1b387"
IID_IDXGIAdapter3 = "645967a4-1392-4310-a798-8053ce3e93fd"

# vtable slots: IUnknown 0-2, IDXGIObject 3-6, then each interface's own methods in dxgi*.h order.
_QUERY_INTERFACE = 0
_RELEASE = 2
_FACTORY1_ENUM_ADAPTERS1 = 12  # IDXGIFactory 7-11, IDXGIFactory1 12-13
_ADAPTER1_GET_DESC1 = 10  # IDXGIAdapter 7-9, IDXGIAdapter1 10
_ADAPTER3_QUERY_VIDEO_MEMORY_INFO = 14  # IDXGIAdapter2 11, IDXGIAdapter3 12-17


class Luid(ctypes.Structure):
    _fields_ = [("LowPart", ctypes.c_uint32), ("HighPart", ctypes.c_int32)]


class AdapterDesc1(ctypes.Structure):
    """DXGI_ADAPTER_DESC1."""

    _fields_ = [
        ("Description", ctypes.c_wchar * 128),
        ("VendorId", ctypes.c_uint32),
        ("DeviceId", ctypes.c_uint32),
        ("SubSysId", ctypes.c_uint32),
        ("Revision", ctypes.c_uint32),
        ("DedicatedVideoMemory", ctypes.c_size_t),
        ("DedicatedSystemMemory", ctypes.c_size_t),
        ("SharedSystemMemory", ctypes.c_size_t),
        ("AdapterLuid", Luid),
        ("Flags", ctypes.c_uint32),
    ]


class VideoMemoryInfo(ctypes.Structure):
    """DXGI_QUERY_VIDEO_MEMORY_INFO."""

    _fields_ = [
        ("Budget", ctypes.c_uint64),
        ("CurrentUsage", ctypes.c_uint64),
        ("AvailableForReservation", ctypes.c_uint64),
        ("CurrentReservation", ctypes.c_uint64),
    ]


# One adapter as DXGI describes it: its DESC1, and its local and non-local memory info (None
# where the adapter has no IDXGIAdapter3).
RawAdapter = tuple[AdapterDesc1, VideoMemoryInfo | None, VideoMemoryInfo | None]


class DxgiApi(Protocol):
    """The seam: what DXGI returns, adapter by adapter. Raises OSError when DXGI cannot be asked."""

    def enum_adapters(self) -> Iterator[RawAdapter]: ...


class _Guid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


def _guid(text: str) -> _Guid:
    return _Guid.from_buffer_copy(uuid.UUID(text).bytes_le)


_HRESULT_NAMES = {
    0x887A0004: "DXGI_ERROR_UNSUPPORTED: no display driver in this session",  # also Wine without a display
    0x80004002: "E_NOINTERFACE",
}


def _hr_text(hr: int) -> str:
    code = hr & 0xFFFFFFFF
    name = _HRESULT_NAMES.get(code)
    return f"HRESULT 0x{code:08X}" + (f", {name}" if name else "")


# COM methods use stdcall, which on x64 is the one calling convention there is.
_FUNCTYPE: Callable[..., Any] = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)


def _method(obj: ctypes.c_void_p, slot: int, *argtypes: Any) -> Callable[..., int]:
    """The interface's method in vtable slot `slot`, bound to `obj`; returns the HRESULT."""
    vtable = ctypes.cast(obj, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p))).contents
    fn = _FUNCTYPE(ctypes.c_long, ctypes.c_void_p, *argtypes)(vtable[slot])
    return lambda *args: int(fn(obj, *args))


def _release(obj: ctypes.c_void_p) -> None:
    if obj:
        vtable = ctypes.cast(obj, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p))).contents
        _FUNCTYPE(ctypes.c_ulong, ctypes.c_void_p)(vtable[_RELEASE])(obj)


class ComDxgi:
    """The real DXGI, through dxgi.dll's COM interfaces."""

    def __init__(self) -> None:
        loader = getattr(ctypes, "WinDLL", ctypes.CDLL)
        self._dll = loader("dxgi.dll")  # OSError where there is none
        create = self._dll.CreateDXGIFactory1
        create.restype = ctypes.c_long
        create.argtypes = (ctypes.POINTER(_Guid), ctypes.POINTER(ctypes.c_void_p))
        self._create = create

    def enum_adapters(self) -> Iterator[RawAdapter]:
        factory = ctypes.c_void_p()
        hr = self._create(ctypes.byref(_guid(IID_IDXGIFactory1)), ctypes.byref(factory))
        if hr < 0 or not factory:
            raise OSError(f"CreateDXGIFactory1 failed ({_hr_text(hr)})")
        try:
            enum = _method(factory, _FACTORY1_ENUM_ADAPTERS1, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
            index = 0
            while True:
                adapter = ctypes.c_void_p()
                hr = enum(index, ctypes.byref(adapter))
                if hr & 0xFFFFFFFF == DXGI_ERROR_NOT_FOUND:
                    return
                if hr < 0:
                    raise OSError(f"EnumAdapters1({index}) failed ({_hr_text(hr)})")
                try:
                    yield self._adapter(adapter)
                finally:
                    _release(adapter)
                index += 1
        finally:
            _release(factory)

    def _adapter(self, adapter: ctypes.c_void_p) -> RawAdapter:
        desc = AdapterDesc1()
        hr = _method(adapter, _ADAPTER1_GET_DESC1, ctypes.POINTER(AdapterDesc1))(ctypes.byref(desc))
        if hr < 0:
            raise OSError(f"GetDesc1 failed ({_hr_text(hr)})")
        adapter3 = ctypes.c_void_p()
        query = _method(adapter, _QUERY_INTERFACE, ctypes.POINTER(_Guid), ctypes.POINTER(ctypes.c_void_p))
        if query(ctypes.byref(_guid(IID_IDXGIAdapter3)), ctypes.byref(adapter3)) < 0 or not adapter3:
            return desc, None, None  # Windows before 10: no budgets
        try:
            info = _method(
                adapter3,
                _ADAPTER3_QUERY_VIDEO_MEMORY_INFO,
                ctypes.c_uint,
                ctypes.c_int,
                ctypes.POINTER(VideoMemoryInfo),
            )
            groups: list[VideoMemoryInfo | None] = []
            for group in (SEGMENT_LOCAL, SEGMENT_NON_LOCAL):
                out = VideoMemoryInfo()
                groups.append(out if info(0, group, ctypes.byref(out)) >= 0 else None)
            return desc, groups[0], groups[1]
        finally:
            _release(adapter3)


@dataclass(frozen=True)
class DxgiReading:
    adapters: tuple[DxgiAdapter, ...]
    status: str  # one line for `vrampilot doctor`


def adapter_from(desc: AdapterDesc1, local: VideoMemoryInfo | None, non_local: VideoMemoryInfo | None) -> DxgiAdapter:
    luid = (int(desc.AdapterLuid.HighPart) & 0xFFFFFFFF) << 32 | int(desc.AdapterLuid.LowPart)
    return DxgiAdapter(
        luid=luid,
        name=str(desc.Description).strip(),
        vendor_id=int(desc.VendorId),
        dedicated_video_bytes=int(desc.DedicatedVideoMemory),
        dedicated_system_bytes=int(desc.DedicatedSystemMemory),
        shared_system_bytes=int(desc.SharedSystemMemory),
        software=bool(desc.Flags & DXGI_ADAPTER_FLAG_SOFTWARE),
        local_budget_bytes=int(local.Budget) if local is not None else None,
        local_usage_bytes=int(local.CurrentUsage) if local is not None else None,
        non_local_budget_bytes=int(non_local.Budget) if non_local is not None else None,
        non_local_usage_bytes=int(non_local.CurrentUsage) if non_local is not None else None,
    )


def read_dxgi(api: DxgiApi | None = None) -> DxgiReading:
    """Every adapter DXGI lists, with its memory figures. Never raises."""
    try:
        api = api if api is not None else ComDxgi()
        adapters = tuple(adapter_from(*raw) for raw in api.enum_adapters())
    except (OSError, AttributeError, ValueError) as exc:  # AttributeError: a dxgi.dll without the function
        return DxgiReading((), f"DXGI not readable ({exc}): VRAM budgets come from the GPU backends")
    gpus = [a for a in adapters if not a.software]
    if not gpus:
        return DxgiReading(adapters, "DXGI: no GPU adapter (only Windows' software renderer)")
    if any(a.local_budget_bytes is None for a in gpus):
        return DxgiReading(adapters, "DXGI: no memory budgets (IDXGIAdapter3 needs Windows 10)")
    return DxgiReading(adapters, f"DXGI: {len(gpus)} adapter{'s' if len(gpus) > 1 else ''}")
