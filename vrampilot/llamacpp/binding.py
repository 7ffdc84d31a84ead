"""llama_cpp, the binding, loaded the one way: this CPU's variant of the backends registered first,
llama.cpp's log captured from its first line (the package's `load`, `loaded`, `load_mtmd`; the
package's own modules call them from here, so that none imports the package it is part of)."""

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
