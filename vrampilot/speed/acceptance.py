"""How often drafted tokens are accepted, learned from this machine's replies: `draft-acceptance.json`
in the data folder, one record per pair (the target's file name, the draft's file name or "ngram").

The planner predicts the speed-up of drafting from a per-token acceptance probability p: a reply
that drafted D tokens in steps of n and had A of them accepted gives p by solving
A / D = (p + p^2 + ... + p^n) / n (each step's accepted run stops at its first miss). The record
keeps the last replies and weighs each by its drafted tokens; until one reply is stored there is
no figure, and the planner assumes its prior (planner/search/draft.py `prior_acceptance`). Like the speed record (speed/store.py), every change is a locked
read-modify-write with an atomic replace, so the window and the CLI may learn at once.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

_log = logging.getLogger("vrampilot.speed.acceptance")

FILE_NAME = "draft-acceptance.json"
FORMAT_VERSION = 1
REPLIES_KEPT = 32
PAIRS_KEPT = 64


@dataclass(frozen=True)
class Acceptance:
    p: float  # per-token acceptance probability
    replies: int = 0  # measured replies it rests on; 0: the planner's prior
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    # Measured decode speed with drafting over what the plan predicted for it (the median over the
    # replies that had both): what the arithmetic misses, such as the drafting loop's own cost.
    speed_factor: float = 1.0

    @property
    def measured(self) -> bool:
        return self.replies > 0


def pair_key(target_file: str, draft: str) -> str:
    """`draft`: the draft model's file name, "ngram" or "mtp" (the model's own MTP block)."""
    return f"{Path(target_file).name}|{draft if draft in ('ngram', 'mtp') else Path(draft).name}"


def p_from_rate(rate: float, n: int) -> float:
    """The per-token p whose expected accepted share of n drafted tokens is `rate` (bisection:
    the share grows with p from 0 to 1)."""
    rate = min(max(rate, 0.0), 1.0)
    if n <= 1:
        return rate
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        share = sum(mid**i for i in range(1, n + 1)) / n
        lo, hi = (mid, hi) if share < rate else (lo, mid)
    return (lo + hi) / 2


def _path(folder: Path | None) -> Path:
    if folder is None:
        from vrampilot.paths import data_dir

        folder = data_dir()
    return folder / FILE_NAME


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": FORMAT_VERSION, "pairs": {}}
    except (OSError, ValueError) as exc:
        _log.warning("ignoring %s: %s", path, exc)  # a damaged file costs what it taught, never a start
        return {"version": FORMAT_VERSION, "pairs": {}}
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(data.get("pairs"), dict):
        return {"version": FORMAT_VERSION, "pairs": {}}
    return data


def _summarise(replies: list[list[float]]) -> Acceptance | None:
    good = [r for r in replies if isinstance(r, list) and len(r) in (3, 4) and r[1] > 0 and r[0] > 0]
    if not good:
        return None
    weight = sum(r[1] for r in good)
    p = sum(p_from_rate(r[2] / r[1], int(r[0])) * r[1] for r in good) / weight
    ratios = sorted(r[3] for r in good if len(r) == 4 and r[3] > 0)
    factor = ratios[len(ratios) // 2] if ratios else 1.0
    return Acceptance(p, len(good), int(weight), int(sum(r[2] for r in good)), factor)


def load_acceptance(key: str, folder: Path | None = None) -> Acceptance | None:
    """This machine's acceptance for the pair; None when nothing was measured (or the file is damaged)."""
    replies = _read(_path(folder))["pairs"].get(key, [])
    return _summarise(replies if isinstance(replies, list) else [])


def record_reply(
    key: str, n_draft: int, drafted: int, accepted: int, folder: Path | None = None, *, speed_ratio: float = 0.0
) -> Acceptance | None:
    """Store one reply's drafting (nothing when it drafted nothing); returns the pair's new figure.
    `speed_ratio`: its decode speed over the one the plan predicted with drafting (0: unknown)."""
    if drafted <= 0 or n_draft <= 0:
        return None
    path = _path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=10):
        data = _read(path)
        pairs: dict[str, Any] = data["pairs"]
        replies = pairs.pop(key, [])
        entry: list[float] = [n_draft, drafted, min(accepted, drafted)]
        if speed_ratio > 0:
            entry.append(round(speed_ratio, 4))
        replies = [*(replies if isinstance(replies, list) else []), entry]
        pairs[key] = replies[-REPLIES_KEPT:]  # most recent last: the oldest pairs go first
        for old in list(pairs)[:-PAIRS_KEPT]:
            del pairs[old]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    return _summarise(pairs[key])
