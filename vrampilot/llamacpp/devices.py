"""The devices llama.cpp itself sees: ggml's device registry, read through ctypes on the loaded
library (the same view llama.cpp's own `--fit` and `--list-devices` use).

Every backend the engine registered (vrampilot.llamacpp.backends) contributes devices: the CPU,
and a CUDA, Vulkan, ... device per GPU when the build has that backend. Each reports a name
("CUDA0", "Vulkan0"), a description (the GPU's name), a type (CPU, GPU, IGPU: integrated, its
memory is system RAM; ACCEL), free and total memory, and a PCI id when it knows one.

`register_rpc_server` adds a llama.cpp RPC host's devices to this process's registry, as
llama-server's `--rpc` does. ggml aborts the process when such a host goes away, so only short
lived child processes call it (the planner's dry runs); the app asks hosts through
vrampilot.hardware.rpc and runs models that use them in llama-server.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from vrampilot.llamacpp import binding

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


class _Caps(ctypes.Structure):
    _fields_ = [
        ("async_", ctypes.c_bool),
        ("host_buffer", ctypes.c_bool),
        ("buffer_from_host_ptr", ctypes.c_bool),
        ("events", ctypes.c_bool),
    ]


class _Props(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("memory_free", ctypes.c_size_t),
        ("memory_total", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("device_id", ctypes.c_char_p),
        ("caps", _Caps),
    ]


@dataclass(frozen=True)
class BackendDevice:
    index: int  # position in ggml's device list
    name: str  # "CPU", "CUDA0", "Vulkan0", "RPC0"
    description: str  # the GPU's name; an RPC device's endpoint
    kind: str  # "cpu", "gpu", "igpu" (shares system RAM), "accel"
    backend: str  # the registry it belongs to: "CPU", "CUDA", "Vulkan", "RPC"
    memory_free_bytes: int
    memory_total_bytes: int
    device_id: str | None  # PCI bus id when the backend knows it
    asynchronous: bool  # async compute and events: llama.cpp pipelines layers across such devices

    @property
    def offloads(self) -> bool:
        """A device llama.cpp puts layers on (the CPU and accelerators run what stays behind)."""
        return self.kind in ("gpu", "igpu")


def _lib() -> Any:
    from vrampilot.llamacpp.backends import ggml_library

    binding.load()
    lib = ggml_library()
    if lib is None:
        raise RuntimeError("llama.cpp's backends are not loaded")
    if lib not in _typed:
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        lib.ggml_backend_dev_get.argtypes = (ctypes.c_size_t,)
        lib.ggml_backend_dev_get_props.restype = None
        lib.ggml_backend_dev_get_props.argtypes = (ctypes.c_void_p, ctypes.POINTER(_Props))
        lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
        lib.ggml_backend_dev_backend_reg.argtypes = (ctypes.c_void_p,)
        lib.ggml_backend_reg_name.restype = ctypes.c_char_p
        lib.ggml_backend_reg_name.argtypes = (ctypes.c_void_p,)
        lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
        lib.ggml_backend_reg_by_name.argtypes = (ctypes.c_char_p,)
        lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
        lib.ggml_backend_reg_get_proc_address.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
        lib.ggml_backend_register.restype = None
        lib.ggml_backend_register.argtypes = (ctypes.c_void_p,)
        _typed.append(lib)
    return lib


_typed: list[Any] = []  # the library handles whose argument types are set (one, in practice)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def list_devices() -> tuple[BackendDevice, ...]:
    """Every device registered in this process, in ggml's order."""
    lib = _lib()
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        props = _Props()
        lib.ggml_backend_dev_get_props(dev, ctypes.byref(props))
        out.append(
            BackendDevice(
                index=i,
                name=_text(props.name),
                description=_text(props.description),
                kind=DEVICE_TYPES.get(int(props.type), "unknown"),
                backend=_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
                memory_free_bytes=int(props.memory_free),
                memory_total_bytes=int(props.memory_total),
                device_id=_text(props.device_id) or None,
                asynchronous=bool(props.caps.async_ and props.caps.events),
            )
        )
    return tuple(out)


def device_handle(name: str) -> int:
    """ggml_backend_dev_t of the device called `name` (for llama_model_params.devices)."""
    lib = _lib()
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        props = _Props()
        lib.ggml_backend_dev_get_props(dev, ctypes.byref(props))
        if _text(props.name) == name:
            return int(dev)
    raise KeyError(f"llama.cpp has no device {name!r}")


def register_rpc_server(endpoint: str) -> tuple[BackendDevice, ...]:
    """Add an RPC host's devices to this process (what llama-server's --rpc does); returns them.

    Only for child processes: ggml aborts the process if the host is gone (ask it first with
    vrampilot.hardware.rpc.query_host)."""
    lib = _lib()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RuntimeError("this llama.cpp has no RPC backend")
    fn_addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not fn_addr:
        raise RuntimeError("this llama.cpp's RPC backend cannot add servers")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(fn_addr)
    devices = list_devices()
    mine = tuple(d for d in devices if d.backend == "RPC" and d.description == endpoint)
    if mine:  # ggml keeps one registry per endpoint: registering it twice would list it twice
        return mine
    before = {d.name for d in devices}
    server_reg = add_server(endpoint.encode())
    if not server_reg:
        raise RuntimeError(f"RPC host {endpoint} has no device")
    lib.ggml_backend_register(server_reg)
    return tuple(d for d in list_devices() if d.name not in before)
