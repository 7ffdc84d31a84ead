"""A repository's GGUF files as models: split parts joined, grouped by quantization, mmproj apart."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vrampilot.gguf import SPLIT_NAME_RE
from vrampilot.hub.client import default_token, hub_api, hub_call, token_arg

# Quantization labels as llama.cpp's tools and the usual uploaders write them in file names:
# Q4_K_M, IQ4_XS, Q8_0, F16, BF16, MXFP4, TQ1_0, and Unsloth's UD- variants.
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8](?:_[0-9A-Z]+)*|TQ[12]_0|F16|F32|FP16|FP32|BF16|MXFP4(?:_MOE)?))(?![A-Za-z0-9])",
    re.IGNORECASE,
)
UNKNOWN_QUANT = "other"


def quant_from_name(path: str) -> str:
    """'Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf' -> 'Q4_K_M'; folder names count too."""
    parts = path.split("/")
    stem = parts[-1]
    m = SPLIT_NAME_RE.match(stem)
    stem = m["stem"] if m else stem.removesuffix(".gguf").removesuffix(".GGUF")
    for candidate in (stem, *reversed(parts[:-1])):
        found = _QUANT_RE.findall(candidate)
        if found:
            label: str = found[-1].upper()
            return {"FP16": "F16", "FP32": "F32"}.get(label, label)
    return UNKNOWN_QUANT


def is_mmproj_name(path: str) -> bool:
    return "mmproj" in path.split("/")[-1].lower()


def bits_per_weight(quant: str) -> float:
    """Rough bits per weight of a label, for ordering groups (the size column is the real figure)."""
    q = quant.upper().removeprefix("UD-")
    table = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "MXFP4": 4.25, "MXFP4_MOE": 4.25, "TQ1_0": 1.7, "TQ2_0": 2.1}
    if q in table:
        return table[q]
    m = re.match(r"(I?)Q(\d)", q)
    if not m:
        return 0.0
    bits = float(m.group(2)) + (0.5 if not m.group(1) else 0.25)
    if q.endswith("_L") or q.endswith("_XL"):
        bits += 0.2
    elif q.endswith("_S") or q.endswith("_XS") or q.endswith("_XXS"):
        bits -= 0.2
    return bits


@dataclass(frozen=True)
class RemoteFile:
    filename: str  # path inside the repository
    size_bytes: int
    sha256: str | None  # LFS sha256: what a download is verified against
    blob_id: str | None = None  # git object id, for files not stored with LFS


@dataclass(frozen=True)
class RemoteModel:
    """One loadable model: a single file, or all parts of a split file (first part first)."""

    name: str
    quant: str
    files: tuple[RemoteFile, ...]
    split_count: int = 1  # what the names declare; more than len(files) when parts are missing
    is_mmproj: bool = False

    @property
    def first(self) -> RemoteFile:
        return self.files[0]

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def is_split(self) -> bool:
        return self.split_count > 1

    @property
    def complete(self) -> bool:
        return len(self.files) == self.split_count

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "quant": self.quant,
            "total_bytes": self.total_bytes,
            "split_count": self.split_count,
            "complete": self.complete,
            "mmproj": self.is_mmproj,
            "files": [{"filename": f.filename, "size_bytes": f.size_bytes, "sha256": f.sha256} for f in self.files],
        }


@dataclass(frozen=True)
class RepoFiles:
    repo_id: str
    commit: str | None  # the revision listed; headers and downloads use it so they agree
    gated: bool
    models: tuple[RemoteModel, ...]
    mmproj: tuple[RemoteModel, ...] = ()
    other_files: tuple[str, ...] = field(default=(), repr=False)

    def by_quant(self) -> list[tuple[str, list[RemoteModel]]]:
        """Groups in display order: smallest files first, unknown labels last."""
        groups: dict[str, list[RemoteModel]] = {}
        for m in self.models:
            groups.setdefault(m.quant, []).append(m)
        return sorted(
            groups.items(),
            key=lambda kv: (kv[0] == UNKNOWN_QUANT, min(m.total_bytes for m in kv[1]), -bits_per_weight(kv[0])),
        )

    def find(self, filename: str) -> RemoteModel | None:
        """The model (or mmproj) a file belongs to; a split model is found by any of its parts."""
        for m in (*self.models, *self.mmproj):
            if any(f.filename == filename for f in m.files):
                return m
        return None


def group_files(files: Iterable[RemoteFile]) -> tuple[list[RemoteModel], list[RemoteModel]]:
    """Join split parts (`-00001-of-00003`) into one model each; set mmproj files apart."""
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, int], list[tuple[int, RemoteFile]]] = {}
    for f in files:
        if not f.filename.lower().endswith(".gguf"):
            continue
        folder, _, base = f.filename.rpartition("/")
        m = SPLIT_NAME_RE.match(base)
        if m:
            key = ((folder + "/" if folder else "") + m["stem"], int(m["count"]))
            splits.setdefault(key, []).append((int(m["idx"]), f))
            continue
        singles.append(
            RemoteModel(
                name=base.removesuffix(".gguf"),
                quant=quant_from_name(f.filename),
                files=(f,),
                is_mmproj=is_mmproj_name(f.filename),
            )
        )
    for (stem, count), parts in splits.items():
        parts.sort(key=lambda p: p[0])
        singles.append(
            RemoteModel(
                name=stem.rpartition("/")[2],
                quant=quant_from_name(parts[0][1].filename),
                files=tuple(f for _, f in parts),
                split_count=count,
                is_mmproj=is_mmproj_name(stem),
            )
        )
    singles.sort(key=lambda m: (m.total_bytes, m.name))
    return [m for m in singles if not m.is_mmproj], [m for m in singles if m.is_mmproj]


def repo_files_from_info(info: Any) -> RepoFiles:
    files: list[RemoteFile] = []
    others: list[str] = []
    for s in info.siblings or ():
        if not s.rfilename.lower().endswith(".gguf"):
            others.append(s.rfilename)
            continue
        lfs = s.lfs
        size = s.size if s.size is not None else (lfs.size if lfs else 0)
        files.append(
            RemoteFile(
                filename=s.rfilename,
                size_bytes=int(size or 0),
                sha256=(lfs.sha256 if lfs else None),
                blob_id=s.blob_id,
            )
        )
    models, mmproj = group_files(files)
    return RepoFiles(
        repo_id=info.id,
        commit=info.sha,
        gated=bool(info.gated) and info.gated != "false",
        models=tuple(models),
        mmproj=tuple(mmproj),
        other_files=tuple(others),
    )


def list_repo_files(repo_id: str, *, revision: str | None = None, token: str | None = None) -> RepoFiles:
    """Every GGUF model in `repo_id`, with sizes and LFS sha256 (one API call). Raises HubError."""
    token = token if token is not None else default_token()
    with hub_call(repo_id, token=token):
        info = hub_api().model_info(repo_id, revision=revision, files_metadata=True, token=token_arg(token))
    return repo_files_from_info(info)
