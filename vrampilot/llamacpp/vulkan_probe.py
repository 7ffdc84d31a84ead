"""Whether this machine can run llama.cpp's Vulkan backend, asked before the module is loaded.

The engine carries `libggml-vulkan` everywhere, but a machine may have no Vulkan loader
(`libvulkan.so.1`), a loader and no driver (ICD), or a driver that fails or hangs when an instance
is created. ggml catches Vulkan's errors, but a broken driver can also crash or stall the process
that asks, so the question is put in a forked child (POSIX) with a deadline: the Vulkan loader,
one instance, the physical devices and their memory heaps, through ctypes. The answer decides
whether `vrampilot.llamacpp.backends` loads the module at all, and `vrampilot doctor` prints its
one line.

Software rasterisers (Mesa's llvmpipe/lavapipe, SwiftShader) are Vulkan devices that run on the
CPU, slower than llama.cpp's CPU backend: they are reported as "software Vulkan device, not used",
and used only with `VRAMPILOT_SOFTWARE_GPU=1` (how the tests and benchmarks reach the GPU path
on a machine without a GPU). llama.cpp itself skips CPU-type devices unless
`GGML_VK_VISIBLE_DEVICES` names them; `software_gpu_indices` says which to name.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SOFTWARE_GPU_ENV = "VRAMPILOT_SOFTWARE_GPU"
DEADLINE_S = 20.0  # a driver that has not made an instance by then is taken as broken

# VkPhysicalDeviceType
_DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_SOFTWARE_NAMES = ("llvmpipe", "lavapipe", "swiftshader")
_VK_ERROR_INCOMPATIBLE_DRIVER = -9
_VK_ERROR_INITIALIZATION_FAILED = -3
_VK_MEMORY_HEAP_DEVICE_LOCAL = 0x1

INSTALL_HINT = (
    "install your GPU's Vulkan driver (Debian/Ubuntu: `apt install libvulkan1 mesa-vulkan-drivers` for AMD and "
    "Intel; NVIDIA's own driver brings its Vulkan driver)"
)
# Windows has no package to install: the GPU maker's driver brings vulkan-1.dll and registers itself.
WINDOWS_INSTALL_HINT = (
    "install or update your GPU maker's driver (NVIDIA, AMD or Intel, from their site or Windows Update): "
    "it brings vulkan-1.dll and the Vulkan driver"
)


def install_hint(platform: str = sys.platform) -> str:
    return WINDOWS_INSTALL_HINT if platform == "win32" else INSTALL_HINT


@dataclass(frozen=True)
class VulkanDevice:
    index: int  # position in the Vulkan loader's list (what GGML_VK_VISIBLE_DEVICES counts)
    name: str
    device_type: str  # "discrete", "integrated", "virtual", "cpu", "other"
    vendor_id: int
    api_version: str  # "1.3.230"
    device_local_bytes: int  # the largest device-local memory heap
    # VK_EXT_memory_budget: the driver reports what is in use. Without it (lavapipe, older
    # drivers) llama.cpp's device API reports the heap's size as free, whatever is allocated.
    memory_budget: bool = False
    # Windows' adapter LUID (VkPhysicalDeviceIDProperties, Vulkan 1.1) as one 64-bit number: what
    # matches the device to DXGI's adapter (hardware/free_memory.py). None where the driver says
    # it is not valid (every driver outside Windows) or the device predates Vulkan 1.1.
    luid: int | None = None

    @property
    def software(self) -> bool:
        """A rasteriser on the CPU (llvmpipe, SwiftShader): a Vulkan device, not a GPU."""
        return self.device_type == "cpu" or is_software_name(self.name)


def is_software_name(name: str) -> bool:
    """Whether a device's name is a software rasteriser's (what llama.cpp's device list shows)."""
    return any(n in name.lower() for n in _SOFTWARE_NAMES)


@dataclass(frozen=True)
class VulkanProbe:
    status: str  # "ok" | "no-loader" | "no-driver" | "driver-failed"
    detail: str  # the loader's or driver's own words
    devices: tuple[VulkanDevice, ...] = ()

    @property
    def gpus(self) -> tuple[VulkanDevice, ...]:
        return tuple(d for d in self.devices if not d.software)

    @property
    def software(self) -> tuple[VulkanDevice, ...]:
        return tuple(d for d in self.devices if d.software)

    def usable(self, software_allowed: bool) -> tuple[VulkanDevice, ...]:
        return self.devices if software_allowed else self.gpus

    def describe(self, software_allowed: bool, platform: str = sys.platform) -> str:
        """One line for `vrampilot doctor`: what Vulkan can do here, or what is missing."""
        hint = install_hint(platform)
        if self.status == "no-loader":
            return f"Vulkan: no Vulkan loader ({self.detail}): {hint}; the CPU runs the model"
        if self.status == "no-driver":
            return f"Vulkan: the loader found no Vulkan driver ({self.detail}): {hint}"
        if self.status == "driver-failed":
            return f"Vulkan: the Vulkan driver failed ({self.detail}); the CPU runs the model: reinstall or update the driver"
        parts = [f"{d.name} ({d.device_type})" for d in self.gpus]
        for d in self.software:
            if software_allowed:
                parts.append(f"{d.name} (software Vulkan device, used: {SOFTWARE_GPU_ENV}=1)")
            else:
                parts.append(f"{d.name} (software Vulkan device, not used: slower than the CPU backend)")
        if not parts:
            return f"Vulkan: the driver lists no device: {hint}"
        return "Vulkan: " + "; ".join(parts)


def software_allowed() -> bool:
    return os.environ.get(SOFTWARE_GPU_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def loader_name(platform: str = sys.platform) -> str:
    return "vulkan-1.dll" if platform == "win32" else "libvulkan.so.1"


# --- the question itself (runs in the child) ----------------------------------------------------


class _AppInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", ctypes.c_uint32),
        ("pEngineName", ctypes.c_char_p),
        ("engineVersion", ctypes.c_uint32),
        ("apiVersion", ctypes.c_uint32),
    ]


class _InstanceInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.POINTER(_AppInfo)),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class _Properties(ctypes.Structure):
    # VkPhysicalDeviceProperties: the fields read here, then room for the limits that follow.
    _fields_ = [
        ("apiVersion", ctypes.c_uint32),
        ("driverVersion", ctypes.c_uint32),
        ("vendorID", ctypes.c_uint32),
        ("deviceID", ctypes.c_uint32),
        ("deviceType", ctypes.c_int32),
        ("deviceName", ctypes.c_char * 256),
        ("rest", ctypes.c_ubyte * 2048),
    ]


class _IdProperties(ctypes.Structure):
    # VkPhysicalDeviceIDProperties, chained after VkPhysicalDeviceProperties2.
    _fields_ = [
        ("sType", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("deviceUUID", ctypes.c_ubyte * 16),
        ("driverUUID", ctypes.c_ubyte * 16),
        ("deviceLUID", ctypes.c_ubyte * 8),
        ("deviceNodeMask", ctypes.c_uint32),
        ("deviceLUIDValid", ctypes.c_uint32),
    ]


class _Properties2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("properties", _Properties)]


_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004
_VK_API_1_1 = (1 << 22) | (1 << 12)


class _MemoryType(ctypes.Structure):
    _fields_ = [("propertyFlags", ctypes.c_uint32), ("heapIndex", ctypes.c_uint32)]


class _MemoryHeap(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint32)]


class _ExtensionProperties(ctypes.Structure):
    _fields_ = [("extensionName", ctypes.c_char * 256), ("specVersion", ctypes.c_uint32)]


class _MemoryProperties(ctypes.Structure):
    _fields_ = [
        ("memoryTypeCount", ctypes.c_uint32),
        ("memoryTypes", _MemoryType * 32),
        ("memoryHeapCount", ctypes.c_uint32),
        ("memoryHeaps", _MemoryHeap * 16),
    ]


def _version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def ask_vulkan(platform: str = sys.platform) -> VulkanProbe:
    """The question, in this process (the child, or Windows)."""
    name = loader_name(platform)
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        # Windows: FileNotFoundError "Could not find module 'vulkan-1.dll' (or one of its
        # dependencies)"; POSIX: dlopen's "...: No such file or directory".
        missing = isinstance(exc, FileNotFoundError) or "No such file" in str(exc)
        return VulkanProbe("no-loader", f"{name} not found" if missing else str(exc))
    create, enumerate_devices = lib.vkCreateInstance, lib.vkEnumeratePhysicalDevices
    create.restype = enumerate_devices.restype = ctypes.c_int32
    create.argtypes = (ctypes.POINTER(_InstanceInfo), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
    enumerate_devices.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_void_p))
    lib.vkGetPhysicalDeviceProperties.argtypes = (ctypes.c_void_p, ctypes.POINTER(_Properties))
    lib.vkGetPhysicalDeviceMemoryProperties.argtypes = (ctypes.c_void_p, ctypes.POINTER(_MemoryProperties))
    lib.vkDestroyInstance.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.vkEnumerateDeviceExtensionProperties.restype = ctypes.c_int32
    lib.vkEnumerateDeviceExtensionProperties.argtypes = (
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_void_p,
    )
    app = _AppInfo(0, None, b"vrampilot", 1, b"vrampilot", 1, (1 << 22) | (2 << 12))  # Vulkan 1.2
    info = _InstanceInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    result = create(ctypes.byref(info), None, ctypes.byref(instance))
    if result == _VK_ERROR_INCOMPATIBLE_DRIVER:
        return VulkanProbe("no-driver", _why_no_driver(platform))
    if result != 0:
        name = "VK_ERROR_INITIALIZATION_FAILED" if result == _VK_ERROR_INITIALIZATION_FAILED else f"VkResult {result}"
        return VulkanProbe("driver-failed", f"vkCreateInstance: {name}")
    try:
        count = ctypes.c_uint32(0)
        result = enumerate_devices(instance, ctypes.byref(count), None)
        if result != 0:
            return VulkanProbe("driver-failed", f"vkEnumeratePhysicalDevices: VkResult {result}")
        if count.value == 0:
            return VulkanProbe("no-driver", "the Vulkan loader lists no device")
        handles = (ctypes.c_void_p * count.value)()
        enumerate_devices(instance, ctypes.byref(count), handles)
        devices = []
        for i in range(count.value):
            props, memory = _Properties(), _MemoryProperties()
            lib.vkGetPhysicalDeviceProperties(handles[i], ctypes.byref(props))
            lib.vkGetPhysicalDeviceMemoryProperties(handles[i], ctypes.byref(memory))
            heaps = [memory.memoryHeaps[h] for h in range(min(memory.memoryHeapCount, 16))]
            local = max((h.size for h in heaps if h.flags & _VK_MEMORY_HEAP_DEVICE_LOCAL), default=0)
            devices.append(
                VulkanDevice(
                    index=i,
                    name=props.deviceName.decode("utf-8", "replace"),
                    device_type=_DEVICE_TYPES.get(props.deviceType, "other"),
                    vendor_id=int(props.vendorID),
                    api_version=_version(props.apiVersion),
                    device_local_bytes=int(local),
                    memory_budget=b"VK_EXT_memory_budget" in _extensions(lib, handles[i]),
                    luid=_luid(lib, handles[i]) if props.apiVersion >= _VK_API_1_1 else None,
                )
            )
        return VulkanProbe("ok", "", tuple(devices))
    finally:
        lib.vkDestroyInstance(instance, None)


def _luid(lib: ctypes.CDLL, device: int | None) -> int | None:
    """The device's LUID when the driver says it is valid (Windows drivers do)."""
    get = getattr(lib, "vkGetPhysicalDeviceProperties2", None)  # Vulkan 1.1 core, exported by the loader
    if get is None:
        return None
    get.restype = None
    get.argtypes = (ctypes.c_void_p, ctypes.POINTER(_Properties2))
    ids = _IdProperties(sType=_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES)
    props = _Properties2(sType=_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, pNext=ctypes.addressof(ids))
    get(device, ctypes.byref(props))
    return int.from_bytes(bytes(ids.deviceLUID), "little") if ids.deviceLUIDValid else None


def _extensions(lib: ctypes.CDLL, device: int | None) -> set[bytes]:
    count = ctypes.c_uint32(0)
    if lib.vkEnumerateDeviceExtensionProperties(device, None, ctypes.byref(count), None) != 0 or not count.value:
        return set()
    found = (_ExtensionProperties * count.value)()
    if lib.vkEnumerateDeviceExtensionProperties(device, None, ctypes.byref(count), found) not in (
        0,
        5,
    ):  # 5: VK_INCOMPLETE
        return set()
    return {found[i].extensionName for i in range(count.value)}


ICD_FOLDERS = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def _why_no_driver(platform: str = sys.platform) -> str:
    """The loader says only VK_ERROR_INCOMPATIBLE_DRIVER; the driver manifests say why."""
    named = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if not named and platform == "win32":  # drivers register in the registry, not in folders
        return r"no Vulkan driver is registered (HKLM\SOFTWARE\Khronos\Vulkan\Drivers)"
    if named:
        manifests = [Path(p) for p in named.split(os.pathsep) if p]
        where = f"VK_ICD_FILENAMES={named}"
    else:
        manifests = sorted(m for d in ICD_FOLDERS for m in Path(d).glob("*.json"))
        where = ", ".join(ICD_FOLDERS)
        if not manifests:
            return f"no driver manifest in {where}"
    for manifest in manifests:
        try:
            library = str(json.loads(manifest.read_text(encoding="utf-8"))["ICD"]["library_path"])
        except FileNotFoundError:
            return f"{where}: {manifest} does not exist"
        except (OSError, ValueError, KeyError, TypeError):
            return f"{where}: {manifest} is not a Vulkan driver manifest"
        if "/" in library and not (manifest.parent / library).exists():
            return f"{where}: {manifest} names {library}, which is not there"
    return f"no driver in {where} could be used (VK_ERROR_INCOMPATIBLE_DRIVER)"


def _to_json(p: VulkanProbe) -> str:
    return json.dumps({"status": p.status, "detail": p.detail, "devices": [d.__dict__ for d in p.devices]})


def _from_json(text: str) -> VulkanProbe:
    data = json.loads(text)
    return VulkanProbe(str(data["status"]), str(data["detail"]), tuple(VulkanDevice(**d) for d in data["devices"]))


def probe_vulkan(deadline_s: float = DEADLINE_S) -> VulkanProbe:
    """Ask in a forked child, so that a driver that crashes or hangs costs a line, not the app."""
    if not hasattr(os, "fork"):
        return ask_vulkan()  # Windows: in-process (its loader and drivers are the vendor's)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's cleanup
        code = 0
        try:
            os.close(read_fd)
            os.write(write_fd, _to_json(ask_vulkan()).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    end = time.monotonic() + deadline_s
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return VulkanProbe("driver-failed", f"the Vulkan driver did not answer within {deadline_s:.0f} s")
            ready, _, _ = select.select([read_fd], [], [], left)
            if ready:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return VulkanProbe(
            "driver-failed", f"asking the Vulkan driver killed the process (signal {os.WTERMSIG(status)})"
        )
    try:
        return _from_json(b"".join(chunks).decode())
    except (ValueError, KeyError, TypeError):
        return VulkanProbe("driver-failed", f"asking the Vulkan driver failed (exit {os.WEXITSTATUS(status)})")


def visible_devices(probe: VulkanProbe) -> str | None:
    """GGML_VK_VISIBLE_DEVICES for llama.cpp when software devices are to be used (it skips
    CPU-type devices otherwise), or None to leave llama.cpp's own choice of GPUs."""
    if not software_allowed() or not probe.software:
        return None
    return ",".join(str(d.index) for d in probe.devices)
