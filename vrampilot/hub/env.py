"""Where the Hub is and where its cache lives, read from the environment at call time.

huggingface_hub reads HF_ENDPOINT and HF_HOME once, at import; we read them on every call so a
setting changed after start (and each test's fake Hub) is honoured, and we always pass the values
to huggingface_hub explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"

# A local app should not report usage: huggingface_hub sends a telemetry request per process
# unless told not to. Set before huggingface_hub is imported (vrampilot.hub imports this module first);
# a user who exports the variable keeps their own choice.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_home() -> Path:
    """HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface (huggingface_hub's rule)."""
    env = os.environ.get("HF_HOME")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expandvars(xdg)).expanduser() / "huggingface"


def hf_hub_cache() -> Path:
    """The models--org--name/{blobs,snapshots,refs} tree that every Hugging Face tool shares."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    return hf_home() / "hub"


def hf_token_path() -> Path:
    env = os.environ.get("HF_TOKEN_PATH")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    return hf_home() / "token"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")
