"""The chat backends this window can offer, and the one place that knows one may be missing.

llama.cpp is always there. The experimental hybrid cache is optional twice over: the installers
leave `vrampilot.hybrid` out along with torch (packaging/vrampilot.spec), and a pip install may
lack torch. Everything else asks here instead of importing it. The hybrid backend comes once per
named config (storage keys "hybrid" for the default, "hybrid:NAME" for the others), each listed
with the bytes it would hold for the open chat. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vrampilot.engine import ChatBackend, LlamaCppBackend
from vrampilot.gguf import ModelSpec
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.storage import BACKEND_HYBRID, BACKEND_LLAMA, hybrid_config, is_hybrid
from vrampilot.units import format_bytes, format_tokens

try:
    # vrampilot.hybrid.backend and .config never import torch themselves.
    from vrampilot.hybrid import backend as _hybrid
    from vrampilot.hybrid.config import CONFIGS as _CONFIGS
except ModuleNotFoundError:
    _hybrid = None  # type: ignore[assignment]  # the optional module is absent: None stands for it
    _CONFIGS = {}


@dataclass(frozen=True)
class BackendChoice:
    key: str  # the storage key
    label: str  # the selector's text
    tooltip: str = ""
    unavailable: str = ""  # why it cannot be used in this install (listed greyed), or ""


def hybrid_keys() -> list[str]:
    """Every hybrid config as a storage key, the default first (just "hybrid" when the package is absent)."""
    names = [n for n in _CONFIGS if n != "default"]
    return [BACKEND_HYBRID, *(f"{BACKEND_HYBRID}:{n}" for n in names)]


def label(key: str) -> str:
    """The backend's name in status lines."""
    if not is_hybrid(key):
        return "llama.cpp"
    config = hybrid_config(key)
    return "the experimental hybrid cache (torch)" + ("" if config == "default" else f", config {config}")


def choices(spec: ModelSpec | None, n_tokens: int) -> list[BackendChoice]:
    """What the selector lists: llama.cpp, then each hybrid config with the bytes it would hold at
    n_tokens of this model (at its full trained context while the chat is empty)."""
    items = [BackendChoice(BACKEND_LLAMA, "llama.cpp")]
    at = n_tokens if n_tokens > 0 else (spec.n_ctx_train if spec is not None else 0)
    for key in hybrid_keys():
        config = hybrid_config(key)
        text = f"Experimental hybrid: {config}"
        usage = _hybrid.held_at(config, spec, at) if _hybrid is not None and spec is not None and at > 0 else None
        if usage is not None and usage.share is not None:
            where = f"{format_tokens(at)} tokens" if n_tokens > 0 else f"the full {format_tokens(at)} context"
            text += f" · {format_bytes(usage.held_bytes)}, {usage.share:.0%} of f16, at {where}"
        tip = _CONFIGS[config].description if config in _CONFIGS else ""
        items.append(BackendChoice(key, text, tip, unavailable(key) or ""))
    return items


def unavailable(key: str) -> str | None:
    """Why `key` cannot be used in this install (with how to get it), or None when it can."""
    if not is_hybrid(key):
        return None
    if _hybrid is None:
        return (
            "This build leaves out the experimental hybrid backend and torch; to use it, install VRAM Pilot "
            "with pip: pip install 'vrampilot[hybrid]'"
        )
    if not _hybrid.torch_available():  # looks for torch without importing it
        return str(_hybrid.INSTALL_HINT)
    if hybrid_config(key) not in _CONFIGS:
        return f"This build has no hybrid config {hybrid_config(key)!r}"
    return None


def make_backend(key: str, model_path: Path | None, *, threads: int | None) -> ChatBackend:
    if is_hybrid(key) and _hybrid is not None and model_path is not None and unavailable(key) is None:
        return _hybrid.HybridBackend(model_path, config=hybrid_config(key), threads=threads)
    return LlamaCppBackend()


def about(key: str) -> str:
    """The note beside the backend choice."""
    if is_hybrid(key) and _hybrid is not None and unavailable(key) is None:
        return str(_hybrid.about_text(hybrid_config(key)))
    return ""


def model_problem(key: str, model_path: Path) -> str | None:
    """Why `key` cannot run this model file (imports torch: call it off the GUI thread)."""
    if not is_hybrid(key) or _hybrid is None:
        return None
    reason = _hybrid.unsupported_reason(model_path)
    return str(reason) if reason else None


def kv_usage(backend: ChatBackend | None) -> KvCacheUsage | None:
    """The bytes a backend's own cache holds, for the meters (only the hybrid cache has one)."""
    usage = getattr(backend, "usage", None)
    return usage() if callable(usage) else None
