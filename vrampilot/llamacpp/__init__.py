"""The one door to llama-cpp-python: `load()` imports it with the right backends registered.

Every module that calls llama.cpp gets the binding from here (a lint contract forbids importing
`llama_cpp` elsewhere), so the CPU variant is always chosen by `backends` before llama.cpp could
choose one by itself, and llama.cpp's log goes to `log` from the first line. Below the planner,
the engine and the documents, which all use it; it imports only the leaf modules.
"""

from __future__ import annotations

import threading
from types import ModuleType

_ready = threading.Event()
_lock = threading.Lock()


def loaded() -> bool:
    """Whether llama.cpp is already loaded here (readers that must not load it just to look)."""
    return _ready.is_set()


def load() -> ModuleType:
    """llama_cpp, ready to use. Raises ImportError when llama-cpp-python is not installed."""
    import llama_cpp

    if not _ready.is_set():
        with _lock:
            if not _ready.is_set():
                from vrampilot import paths
                from vrampilot.llamacpp import log
                from vrampilot.llamacpp.backends import load_backends

                log.install()
                load_backends(llama_cpp, paths.cache_dir() / "cpu-probe.json")
                _ready.set()
    return llama_cpp


def load_mtmd() -> ModuleType:
    """llama_cpp.mtmd_cpp (libmtmd: the vision projector), with llama.cpp loaded first and mtmd's
    own log (a logger separate from llama.cpp's) routed to `log`."""
    load()
    from llama_cpp import mtmd_cpp

    from vrampilot.llamacpp import log

    log.install_mtmd(mtmd_cpp)
    return mtmd_cpp
