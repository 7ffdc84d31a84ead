"""On Windows ggml's functions come from two DLLs read as one (backends.WindowsGgml): GetProcAddress
looks in the one DLL it is given, and ggml.dll does not re-export ggml-base.dll's functions.

Here, at that boundary, with two Linux libraries that do not depend on each other (so that dlsym,
like GetProcAddress, finds in each only its own functions): zlib and ggml-base. Under Wine the
installed app's `doctor`, `plan` and `chat` run through it (tests/packaging/test_windows_installer.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import pytest

from vrampilot.llamacpp.backends import WindowsGgml, lib_dir_of


def _libraries() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    import llama_cpp

    zlib = ctypes.util.find_library("z")
    assert zlib is not None, "zlib is part of every Debian system"
    return ctypes.CDLL(zlib), ctypes.CDLL(str(Path(lib_dir_of(llama_cpp)) / "libggml-base.so"))


def test_each_function_comes_from_the_library_that_exports_it() -> None:
    zlib, base = _libraries()
    with pytest.raises(AttributeError):
        _ = zlib.ggml_backend_reg_name  # the premise: one library alone lacks the other's functions
    both = WindowsGgml(zlib, base)
    both.zlibVersion.restype = ctypes.c_char_p
    assert both.zlibVersion().startswith(b"1.")
    both.ggml_type_name.restype = ctypes.c_char_p
    both.ggml_type_name.argtypes = (ctypes.c_int,)
    assert both.ggml_type_name(1) == b"f16"  # declared once, kept: the same function object again
    assert both.ggml_type_name is both.ggml_type_name


def test_a_function_neither_exports_is_an_attribute_error_naming_both() -> None:
    zlib, base = _libraries()
    with pytest.raises(AttributeError, match=r"no_such_function.*libz.*libggml-base"):
        _ = WindowsGgml(zlib, base).no_such_function
