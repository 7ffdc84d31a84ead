"""llama_model_params.tensor_buft_overrides: the tensors a plan keeps in host memory.

llama-server turns `--n-cpu-moe N` and `-ot PATTERN=CPU` into a NULL-terminated array of
{const char *pattern; ggml_backend_buffer_type_t buft} (common/arg.cpp); llama-cpp-python has no
keyword for it and declares the field as a plain pointer. The engine and the planner's dry runs
build the same array here, so what the app loads, what the planner measures and what the
exported line runs put the same tensors in the same buffers. The buffer type must be ggml's CPU
buffer type itself: llama.cpp's loader compares the pointer with ggml_backend_cpu_buffer_type()
and only then picks among the CPU's buffer types (CPU_REPACK where the weight type repacks),
as llama-server's `=CPU` does.
"""

from __future__ import annotations

import ctypes
from typing import Any


class _Override(ctypes.Structure):
    # struct llama_model_tensor_buft_override (include/llama.h)
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class CpuOverrides:
    """The array for `patterns` (std::regex, searched in tensor names), each to the CPU.

    llama.cpp reads the array during the model load only (the loader keeps the pointer, not a
    copy): keep this object alive at least as long as the load.
    """

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self._array: ctypes.Array[_Override] | None = None
        if patterns:
            from vrampilot.llamacpp.ggml import cpu_buffer_type

            buft = cpu_buffer_type()
            # The encoded strings stay referenced by the array (ctypes keeps them in _objects).
            items = [_Override(p.encode(), buft) for p in patterns] + [_Override(None, None)]
            self._array = (_Override * len(items))(*items)

    @property
    def address(self) -> int | None:
        """The array's address for the struct's c_void_p field; None (NULL) without patterns."""
        return ctypes.addressof(self._array) if self._array is not None else None

    def apply(self, mparams: Any) -> None:
        """Set the overrides on a llama_model_params (left alone without patterns)."""
        if self._array is not None:
            mparams.tensor_buft_overrides = self.address
