"""Hub search for GGUF repositories: text, sort order, and filters on architecture and size."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from vrampilot.hub.client import default_token, hub_api, hub_call, token_arg

SortKey = Literal["downloads", "likes", "recent"]
SORT_KEYS: tuple[SortKey, ...] = ("downloads", "likes", "recent")
_HF_SORT = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}
_EXPAND = ["author", "downloads", "likes", "lastModified", "gated", "tags", "gguf"]
# Filters run on our side (the Hub's parameter filter counts safetensors weights, which GGUF-only
# repositories lack), so a filtered search reads up to this many results to fill a page.
MAX_SCANNED = 500
_PARAMS_IN_NAME = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BM])(?![A-Za-z])", re.IGNORECASE)


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    author: str | None
    downloads: int
    likes: int
    last_modified: datetime | None
    license: str | None
    gated: bool
    architecture: str | None  # from the Hub's own reading of the GGUF header, when it has one
    n_params: int | None
    context_length: int | None
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "author": self.author,
            "downloads": self.downloads,
            "likes": self.likes,
            "last_modified": self.last_modified.isoformat() if self.last_modified else None,
            "license": self.license,
            "gated": self.gated,
            "architecture": self.architecture,
            "n_params": self.n_params,
            "context_length": self.context_length,
        }


def params_from_name(name: str) -> int | None:
    """'Qwen2.5-7B-Instruct-GGUF' -> 7e9: the size when the Hub gives none (last match wins, so
    'Llama-3.1-8B' is 8B, not 3.1)."""
    matches = _PARAMS_IN_NAME.findall(name.split("/")[-1])
    if not matches:
        return None
    value, unit = matches[-1]
    return int(float(value) * (1e9 if unit.upper() == "B" else 1e6))


def _license(tags: list[str] | None, card_data: Any) -> str | None:
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    lic = getattr(card_data, "license", None) if card_data is not None else None
    return str(lic) if lic else None


def summary_from_info(info: Any) -> RepoSummary:
    gguf = info.gguf if isinstance(getattr(info, "gguf", None), dict) else {}
    total = gguf.get("total")
    n_params = int(total) if isinstance(total, (int, float)) and total > 0 else params_from_name(info.id)
    ctx = gguf.get("context_length")
    return RepoSummary(
        repo_id=info.id,
        author=info.author or (info.id.split("/")[0] if "/" in info.id else None),
        downloads=int(info.downloads or 0),
        likes=int(info.likes or 0),
        last_modified=info.last_modified,
        license=_license(info.tags, getattr(info, "card_data", None)),
        gated=bool(info.gated) and info.gated != "false",
        architecture=gguf.get("architecture") if isinstance(gguf.get("architecture"), str) else None,
        n_params=n_params,
        context_length=int(ctx) if isinstance(ctx, int) else None,
        tags=tuple(info.tags or ()),
    )


def _matches(s: RepoSummary, architecture: str | None, min_params: int | None, max_params: int | None) -> bool:
    if architecture:
        arch = architecture.lower()
        known = {(s.architecture or "").lower(), *(t.lower() for t in s.tags)}
        if arch not in known:
            return False
    if min_params is not None or max_params is not None:
        if s.n_params is None:
            return False
        if min_params is not None and s.n_params < min_params:
            return False
        if max_params is not None and s.n_params > max_params:
            return False
    return True


def search_models(
    query: str,
    *,
    sort: SortKey = "downloads",
    architecture: str | None = None,
    min_params: int | None = None,
    max_params: int | None = None,
    limit: int = 30,
    token: str | None = None,
) -> list[RepoSummary]:
    """GGUF repositories matching `query`, best first by `sort`. Raises HubError subclasses."""
    if sort not in _HF_SORT:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}")
    token = token if token is not None else default_token()
    filtered = bool(architecture) or min_params is not None or max_params is not None
    out: list[RepoSummary] = []
    with hub_call(None, token=token):
        items = hub_api().list_models(
            search=query.strip() or None,
            filter="gguf",
            sort=_HF_SORT[sort],  # type: ignore[arg-type]  # the Hub's sort names, a Literal in its stubs
            limit=MAX_SCANNED if filtered else limit,
            expand=_EXPAND,  # type: ignore[arg-type]  # the Hub's expand names, a Literal list in its stubs
            token=token_arg(token),
        )
        for info in items:
            s = summary_from_info(info)
            if _matches(s, architecture, min_params, max_params):
                out.append(s)
                if len(out) >= limit:
                    break
    return out
