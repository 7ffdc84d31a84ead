"""GGUF header reading: metadata and tensor table, never tensor data.

The package's API is the names in `__all__`; its modules are private to it (make lint: a protected
contract in pyproject.toml). Each name is imported from its module on first use (PEP 562, see
vrampilot/lazy_api.py), so that importing one loads only the module that holds it.
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

# typing.TYPE_CHECKING without importing typing, which a child that loads one module would pay
# for (the type checker takes any name TYPE_CHECKING as true).
TYPE_CHECKING = False
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

# Each module and the names of the API it holds ("api=name" where the API names it otherwise),
# imported on first use.
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

# Hidden from the type checker, which reads the imports above: a name outside the API stays an error
# there instead of an `object`.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
