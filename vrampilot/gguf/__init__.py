"""GGUF header reading: metadata and tensor table, never tensor data."""

from vrampilot.gguf.reader import GGUFError, GGUFFile, SkippedArray, TensorInfo, read_gguf, tensor_nbytes
from vrampilot.gguf.spec import ModelSpec, load_model_spec, spec_from_gguf

__all__ = [
    "GGUFError",
    "GGUFFile",
    "ModelSpec",
    "SkippedArray",
    "TensorInfo",
    "load_model_spec",
    "read_gguf",
    "spec_from_gguf",
    "tensor_nbytes",
]
