"""GPU profiles: spec-sheet facts for GPUs, read from profiles/gpus.json.

They serve two purposes: planning for a GPU the user does not have (`find_profile` +
`profile_as_gpu`), and filling what NVML cannot read on a detected GPU (`match_detected`).
Names are matched loosely because users type "4090", "rtx4090" or paste NVML's
"NVIDIA GeForce RTX 4090"; vendor and family words are dropped before comparing.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.hardware.types import GpuInfo
from vrampilot.paths import profiles_dir

PROFILES_FILE = "gpus.json"

# Words that do not tell two GPUs apart once the model number is known.
_NOISE_WORDS = frozenset(
    {
        "nvidia",
        "geforce",
        "tesla",
        "quadro",
        "rtx",
        "gtx",
        "amd",
        "radeon",
        "rx",
        "instinct",
        "intel",
        "arc",
        "apple",
        "graphics",
        "gpu",
    }
)
_TOKEN_RE = re.compile(r"[a-z]+|[0-9]+")
_NOISE_PREFIX_RE = re.compile(r"^(?:nvidia|geforce|tesla|quadro|rtx|gtx|amd|radeon|rx|instinct|intel|arc|apple)+")
_NOISE_SUFFIX_RE = re.compile(r"(?:graphics|gpu)+$")
# How far a detected GPU's total memory may be from the profile's marketed size: NVML reports
# less than marketed (ECC, driver reserve: a T4 shows 15 of 16 GiB), never a different SKU.
_MEMORY_TOLERANCE = 0.15


class UnknownGpuProfileError(UserError, ValueError):
    """The name matches no profile, or several; the message lists close names."""


@dataclass(frozen=True)
class GpuProfile:
    name: str
    vendor: str
    memory_bytes: int
    bandwidth_gbps: float
    fp16_tflops: float | None
    aliases: tuple[str, ...]
    unified_memory: bool
    notes: str | None = None
    # The architecture generation ("ampere", "rdna3", ...) and memory kind ("gddr", "hbm",
    # "unified"): the speed model's share of peak throughput and bandwidth differs by each.
    generation: str = ""
    memory_kind: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _tokens(name: str) -> list[str]:
    return [t for t in _TOKEN_RE.findall(name.lower()) if t not in _NOISE_WORDS]


def _strip_memory(tokens: list[str]) -> list[str]:
    """Drop "<n> GB" pairs: NVML names several SKUs alike and only the memory size differs."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i].isdigit() and i + 1 < len(tokens) and tokens[i + 1] == "gb":
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out


def normalize_name(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> '4090'; 'RTX 4060 Ti 16GB' -> '4060ti16gb'."""
    return "".join(_tokens(name))


def _query_forms(name: str) -> set[str]:
    """What a typed name may mean: by words, and with all spacing ignored ("r tx4 090")."""
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    squashed = _NOISE_SUFFIX_RE.sub("", _NOISE_PREFIX_RE.sub("", squashed))
    return {f for f in (normalize_name(name), squashed) if f}


def _family_key(name: str) -> str:
    return "".join(_strip_memory(_tokens(name)))


def _parse(entry: dict[str, Any], source: Path) -> GpuProfile:
    try:
        fp16 = entry.get("fp16_tflops")
        notes = entry.get("notes")
        profile = GpuProfile(
            name=str(entry["name"]),
            vendor=str(entry["vendor"]),
            memory_bytes=int(entry["memory_bytes"]),
            bandwidth_gbps=float(entry["bandwidth_gbps"]),
            fp16_tflops=None if fp16 is None else float(fp16),
            aliases=tuple(str(a) for a in entry.get("aliases", ())),
            unified_memory=bool(entry.get("unified_memory", False)),
            notes=None if notes is None else str(notes),
            generation=str(entry.get("generation", "")),
            memory_kind=str(entry.get("memory", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad GPU profile in {source}: {entry!r} ({exc})") from exc
    if profile.memory_bytes <= 0 or profile.bandwidth_gbps <= 0:
        raise ValueError(f"GPU profile {profile.name!r} in {source} needs positive memory and bandwidth")
    return profile


@functools.cache
def load_profiles() -> tuple[GpuProfile, ...]:
    """All profiles, in file order. Cached: the file ships with the app and does not change."""
    path = profiles_dir() / PROFILES_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    profiles = tuple(_parse(e, path) for e in data["gpus"])
    owner: dict[str, str] = {}
    for p in profiles:
        for n in p.names:
            key = normalize_name(n)
            if owner.setdefault(key, p.name) != p.name:
                raise ValueError(f"GPU profiles {owner[key]!r} and {p.name!r} share the name {n!r} in {path}")
    return profiles


def _close_names(query: str, profiles: tuple[GpuProfile, ...], limit: int = 5) -> list[str]:
    by_key: dict[str, str] = {}
    for p in profiles:
        for n in p.names:
            by_key.setdefault(normalize_name(n), p.name)
            by_key.setdefault(n.lower(), p.name)
    found: list[str] = []
    for key in difflib.get_close_matches(query, list(by_key), n=20, cutoff=0.5):
        if by_key[key] not in found:
            found.append(by_key[key])
    return found[:limit]


def find_profile(name: str) -> GpuProfile:
    """The one profile a user means by `name`; raises UnknownGpuProfileError otherwise.

    An exact match on a name or alias wins ("4090" is the desktop card, not the laptop one);
    otherwise a unique profile whose name contains what was typed ("4060 laptop").
    """
    profiles = load_profiles()
    forms = _query_forms(name)
    if not forms:
        raise UnknownGpuProfileError("No GPU name given (example: 'RTX 4090', '4060 Ti 16GB', 'M2 Ultra').")
    keys = {p.name: [normalize_name(n) for n in p.names] for p in profiles}
    exact = [p for p in profiles if forms & set(keys[p.name])]
    if len(exact) == 1:
        return exact[0]
    partial = [p for p in profiles if any(f in k for f in forms for k in keys[p.name])]
    if len(partial) == 1:
        return partial[0]
    if partial:
        listed = ", ".join(p.name for p in partial[:5])
        more = f" and {len(partial) - 5} more" if len(partial) > 5 else ""
        raise UnknownGpuProfileError(
            f"GPU name {name!r} matches several profiles: {listed}{more}. Use one of those names."
        )
    close = _close_names(normalize_name(name), profiles) or _close_names(name.lower(), profiles)
    hint = f" Close names: {', '.join(close)}." if close else ""
    raise UnknownGpuProfileError(f"No GPU profile matches {name!r}.{hint}")


def match_detected(gpu_name: str, memory_total_bytes: int | None = None) -> GpuProfile | None:
    """The profile for a GPU NVML reported, or None when unsure (better no number than a wrong one).

    NVML gives several SKUs one name ("RTX 3080" has 10 and 12 GB models with different
    bandwidth), so the memory size picks among them and must agree with the profile.
    """
    key = _family_key(gpu_name)
    if not key:
        return None
    candidates = [p for p in load_profiles() if any(_family_key(n) == key for n in p.names)]
    if memory_total_bytes is None or memory_total_bytes <= 0:
        return candidates[0] if len(candidates) == 1 else None

    def distance(p: GpuProfile) -> float:
        return abs(memory_total_bytes - p.memory_bytes) / p.memory_bytes

    fitting = sorted((p for p in candidates if distance(p) <= _MEMORY_TOLERANCE), key=distance)
    return fitting[0] if fitting else None


def profile_as_gpu(profile: GpuProfile, index: int = 0) -> GpuInfo:
    """A GpuInfo for planning on a GPU the user does not have: spec-sheet values, nothing live."""
    return GpuInfo(
        index=index,
        name=profile.name,
        uuid=None,
        vendor=profile.vendor,
        memory_total_bytes=profile.memory_bytes,
        memory_free_bytes=None,
        memory_used_bytes=None,
        driver_version=None,
        cuda_version=None,
        memory_bus_width_bits=None,
        memory_clock_max_mhz=None,
        peak_bandwidth_gbps=profile.bandwidth_gbps,
        bandwidth_source="profile",
        pcie_generation=None,
        pcie_width=None,
        display_active=None,
        fp16_tflops=profile.fp16_tflops,
    )
