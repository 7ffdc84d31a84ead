"""The one door to llama-cpp-python: `load()` imports it with the right backends registered.

Every module that calls llama.cpp gets the binding from here (a lint contract forbids importing
`llama_cpp` elsewhere), so the CPU variant is always chosen by `backends` before llama.cpp could
choose one by itself, and llama.cpp's log goes to `log` from the first line. Below the planner,
the engine and the documents, which all use it; it imports only the leaf modules.

Its API is `__all__`, each name but binding.py's imported on first use (vrampilot/lazy_api.py):
importing the package must not load llama.cpp, which log.py imports. Its modules are private to it
(docs/development.md, "Stated APIs").
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api
from vrampilot.llamacpp.binding import load, load_mtmd, loaded

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
    from vrampilot.llamacpp.allocations import device_bytes as device_allocated_bytes
    from vrampilot.llamacpp.allocations import forget as forget_allocations
    from vrampilot.llamacpp.allocations import record as record_allocations
    from vrampilot.llamacpp.backends import MANIFEST_NAME, loaded_backends, module_file, read_manifest
    from vrampilot.llamacpp.buffer_log import (
        COMPUTE_RE,
        KVBUF_RE,
        MIB,
        MODEL_RE,
        OUTPUT_RE,
        STATE_BUF_RE,
        device_buffers,
    )
    from vrampilot.llamacpp.devices import device_handle, list_devices, register_rpc_server
    from vrampilot.llamacpp.ggml import CpuKernels, DeviceKernels, GgmlError, OpTiming
    from vrampilot.llamacpp.lock import LOG_LOCK
    from vrampilot.llamacpp.log import capturing as capture_log
    from vrampilot.llamacpp.log import clear as clear_log
    from vrampilot.llamacpp.log import install as install_log
    from vrampilot.llamacpp.log import recent_errors as recent_log_errors
    from vrampilot.llamacpp.overrides import CpuOverrides
    from vrampilot.llamacpp.vocab import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, draft_refusal, read_vocab, vocab_mismatch
    from vrampilot.llamacpp.vulkan_probe import SOFTWARE_GPU_ENV, is_software_name, loader_name, probe_vulkan

__all__ = [
    "COMPUTE_RE",
    "KVBUF_RE",
    "LOG_LOCK",
    "MANIFEST_NAME",
    "MIB",
    "MODEL_RE",
    "OUTPUT_RE",
    "SOFTWARE_GPU_ENV",
    "SPEC_VOCAB_MAX_SIZE_DIFFERENCE",
    "STATE_BUF_RE",
    "CpuKernels",
    "CpuOverrides",
    "DeviceKernels",
    "GgmlError",
    "OpTiming",
    "capture_log",
    "clear_log",
    "device_allocated_bytes",
    "device_buffers",
    "device_handle",
    "draft_refusal",
    "forget_allocations",
    "install_log",
    "is_software_name",
    "list_devices",
    "load",
    "load_mtmd",
    "loaded",
    "loaded_backends",
    "loader_name",
    "module_file",
    "probe_vulkan",
    "read_manifest",
    "read_vocab",
    "recent_log_errors",
    "record_allocations",
    "register_rpc_server",
    "vocab_mismatch",
]

# Each module and the names of the API it holds ("api=name" where the API renames one).
_HOLDERS = {
    "allocations": ("device_allocated_bytes=device_bytes", "forget_allocations=forget", "record_allocations=record"),
    "backends": ("MANIFEST_NAME", "loaded_backends", "module_file", "read_manifest"),
    "buffer_log": ("COMPUTE_RE", "KVBUF_RE", "MIB", "MODEL_RE", "OUTPUT_RE", "STATE_BUF_RE", "device_buffers"),
    "devices": ("device_handle", "list_devices", "register_rpc_server"),
    "ggml": ("CpuKernels", "DeviceKernels", "GgmlError", "OpTiming"),
    "lock": ("LOG_LOCK",),
    "log": ("capture_log=capturing", "clear_log=clear", "install_log=install", "recent_log_errors=recent_errors"),
    "overrides": ("CpuOverrides",),
    "vocab": ("SPEC_VOCAB_MAX_SIZE_DIFFERENCE", "draft_refusal", "read_vocab", "vocab_mismatch"),
    "vulkan_probe": ("SOFTWARE_GPU_ENV", "is_software_name", "loader_name", "probe_vulkan"),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
