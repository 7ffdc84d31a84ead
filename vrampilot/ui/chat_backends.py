"""The chat backends this window can offer, and the one place that knows one may be missing.

llama.cpp is always there. The experimental hybrid cache is optional twice over: the installers
leave `vrampilot.hybrid` out along with torch (packaging/vrampilot.spec), and a pip install may
lack torch. Everything else asks here instead of importing it. Qt-free.
"""

from __future__ import annotations

from pathlib import Path

from vrampilot.engine import ChatBackend, LlamaCppBackend
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.storage import BACKEND_HYBRID, BACKEND_LLAMA

try:
    # vrampilot.hybrid.chat never imports torch itself.
    from vrampilot.hybrid import chat as _hybrid
except ModuleNotFoundError:
    _hybrid = None  # type: ignore[assignment]

LABELS = {BACKEND_LLAMA: "llama.cpp", BACKEND_HYBRID: "the experimental hybrid cache (torch)"}


def unavailable(key: str) -> str | None:
    """Why `key` cannot be used in this install (with how to get it), or None when it can."""
    if key != BACKEND_HYBRID:
        return None
    if _hybrid is None:
        return (
            "This build leaves out the experimental hybrid backend and torch; to use it, install VRAM Pilot "
            "with pip: pip install 'vrampilot[hybrid]'"
        )
    if not _hybrid.torch_available():  # looks for torch without importing it
        return str(_hybrid.INSTALL_HINT)
    return None


def make_backend(key: str, model_path: Path | None, *, threads: int | None) -> ChatBackend:
    if key == BACKEND_HYBRID and _hybrid is not None and model_path is not None and unavailable(key) is None:
        return _hybrid.HybridBackend(model_path, threads=threads)
    return LlamaCppBackend()


def about(key: str) -> str:
    """The note beside the backend choice."""
    if key == BACKEND_HYBRID and _hybrid is not None:
        return str(_hybrid.about_text())
    return ""


def model_problem(key: str, model_path: Path) -> str | None:
    """Why `key` cannot run this model file (imports torch: call it off the GUI thread)."""
    if key != BACKEND_HYBRID or _hybrid is None:
        return None
    reason = _hybrid.unsupported_reason(model_path)
    return str(reason) if reason else None


def kv_usage(backend: ChatBackend | None) -> KvCacheUsage | None:
    """The bytes a backend's own cache holds, for the meters (only the hybrid cache has one)."""
    usage = getattr(backend, "usage", None)
    return usage() if callable(usage) else None
