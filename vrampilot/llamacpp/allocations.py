"""What llama.cpp has allocated in this process, per device: its own buffer lines at each load.

NVML reports a process's VRAM on NVIDIA cards; nothing does on Vulkan devices whose driver lacks
VK_EXT_memory_budget (Mesa's lavapipe, older drivers), where llama.cpp's device API reports the
whole heap as free however much is allocated. What llama.cpp itself printed for a load (model,
KV, compute and output buffers per device) is then the one exact figure of this process's use,
and the meters show it as such. A model's record goes when it is closed or collected.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping

from vrampilot.llamacpp.buffer_log import device_buffers

_lock = threading.Lock()
_held: dict[int, dict[str, int]] = {}  # id(owner) -> {buffer name: bytes}


def record(owner: object, log_lines: Iterable[str]) -> Mapping[str, int]:
    """Keep what the load that made `owner` printed; forgotten when `owner` is collected."""
    per_buffer: dict[str, int] = {}
    for sizes in device_buffers(log_lines).values():
        for name, n_bytes in sizes.items():
            per_buffer[name] = per_buffer.get(name, 0) + n_bytes
    key = id(owner)
    with _lock:
        _held[key] = per_buffer
    weakref.finalize(owner, _drop, key)
    return per_buffer


def forget(owner: object) -> None:
    _drop(id(owner))


def _drop(key: int) -> None:
    with _lock:
        _held.pop(key, None)


def device_bytes(buffer_name: str) -> int | None:
    """Bytes llama.cpp allocated on the device it calls `buffer_name` ("Vulkan0"), over every model
    open in this process; None when no open model printed a buffer there."""
    with _lock:
        sizes = [held[buffer_name] for held in _held.values() if buffer_name in held]
    return sum(sizes) if sizes else None
