"""GGUF header reading: metadata and tensor table, never tensor data.

Its API is `__all__`, each name imported on first use (vrampilot/lazy_api.py); its modules are
private to it (docs/development.md, "Stated APIs").
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
    from vrampilot.gguf.describe import format_projector, format_spec, spec_to_dict
    from vrampilot.gguf.projector import (
        ProjectorSpec,
        check_projector,
        fits,
        matching_projector,
        model_input_embd,
        read_projector,
    )
    from vrampilot.gguf.reader import (
        GGUFError,
        GGUFFile,
        GGUFNeedMoreBytes,
        SkippedArray,
        TensorInfo,
        read_gguf,
        read_gguf_bytes,
        tensor_nbytes,
    )
    from vrampilot.gguf.spec import (
        DSV4_ARCH,
        EXPERT_TENSOR_RE,
        SPLIT_NAME_RE,
        ModelSpec,
        active_share,
        file_name_line,
        load_model_spec,
        one_line,
        spec_from_gguf,
    )

__all__ = [
    "DSV4_ARCH",
    "EXPERT_TENSOR_RE",
    "SPLIT_NAME_RE",
    "GGUFError",
    "GGUFFile",
    "GGUFNeedMoreBytes",
    "ModelSpec",
    "ProjectorSpec",
    "SkippedArray",
    "TensorInfo",
    "active_share",
    "check_projector",
    "file_name_line",
    "fits",
    "format_projector",
    "format_spec",
    "load_model_spec",
    "matching_projector",
    "model_input_embd",
    "one_line",
    "read_gguf",
    "read_gguf_bytes",
    "read_projector",
    "spec_from_gguf",
    "spec_to_dict",
    "tensor_nbytes",
]

# Each module and the names of the API it holds ("api=name" where the API renames one).
_HOLDERS = {
    "describe": ("format_projector", "format_spec", "spec_to_dict"),
    "projector": (
        "ProjectorSpec",
        "check_projector",
        "fits",
        "matching_projector",
        "model_input_embd",
        "read_projector",
    ),
    "reader": (
        "GGUFError",
        "GGUFFile",
        "GGUFNeedMoreBytes",
        "SkippedArray",
        "TensorInfo",
        "read_gguf",
        "read_gguf_bytes",
        "tensor_nbytes",
    ),
    "spec": (
        "DSV4_ARCH",
        "EXPERT_TENSOR_RE",
        "SPLIT_NAME_RE",
        "ModelSpec",
        "active_share",
        "file_name_line",
        "load_model_spec",
        "one_line",
        "spec_from_gguf",
    ),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
