"""The Hugging Face token: found where the Hub's own tools keep it, stored only in safe places.

Order of lookup: the HF_TOKEN variable, the OS keyring (our entry), the Hub's token file
($HF_HOME/token, which `hf auth login` writes). A token is never written to our settings.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from types import ModuleType

from vrampilot.hub.env import hf_token_path
from vrampilot.hub.errors import InvalidTokenError

KEYRING_SERVICE = "vrampilot-huggingface"
KEYRING_USER = "token"


@dataclass(frozen=True)
class TokenInfo:
    token: str
    source: str  # "HF_TOKEN", "keyring" or the token file's path


def _keyring() -> ModuleType | None:
    """The keyring module when a real backend (Secret Service, Keychain, Windows) is present, else None."""
    try:
        import keyring
        from keyring.backends import fail, null
    except Exception:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:
        return None
    if isinstance(backend, (fail.Keyring, null.Keyring)) or getattr(backend, "priority", 0) <= 0:
        return None
    return keyring


def current_token() -> TokenInfo | None:
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = os.environ.get(var, "").strip()
        if value:
            return TokenInfo(value, var)
    kr = _keyring()
    if kr is not None:
        stored: str | None
        try:
            stored = kr.get_password(KEYRING_SERVICE, KEYRING_USER)
        except Exception:
            stored = None
        value = stored or ""
        if value:
            return TokenInfo(value.strip(), "keyring")
    path = hf_token_path()
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError:
        value = ""
    if value:
        return TokenInfo(value, str(path))
    return None


def resolve_token() -> str | None:
    info = current_token()
    return info.token if info else None


def save_token(token: str) -> str:
    """Store `token` in the keyring if there is one, else in the Hub's token file. Returns where."""
    token = token.strip()
    if not token:
        raise InvalidTokenError("the token is empty")
    kr = _keyring()
    if kr is not None:
        try:
            kr.set_password(KEYRING_SERVICE, KEYRING_USER, token)
            return "the system keyring"
        except Exception:
            pass
    path = hf_token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same file and format as `hf auth login`, readable by the owner only. A new file replaces the
    # old one: opening the old one would keep its mode, and `hf auth login` leaves it 0644.
    fd, tmp = tempfile.mkstemp(prefix=".token-", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return str(path)


def forget_token() -> None:
    kr = _keyring()
    if kr is not None:
        with contextlib.suppress(Exception):
            kr.delete_password(KEYRING_SERVICE, KEYRING_USER)
    with contextlib.suppress(FileNotFoundError):
        hf_token_path().unlink()
