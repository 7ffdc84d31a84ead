"""GGUF models already on this machine: the Hugging Face cache, LM Studio, Ollama, and user folders.

Every file is opened with the app's GGUF reader; a file that fails is listed with the reason
(partial download, damaged header, missing split part, failed checksum), never hidden.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from gguf import LlamaFileType

from vrampilot.gguf import SPLIT_NAME_RE, GGUFError, one_line, read_gguf
from vrampilot.hub.env import hf_hub_cache
from vrampilot.hub.files import quant_from_name
from vrampilot.hub.hf_cache import ORPHAN_RE, PART_SUFFIX, QUARANTINE_MARK, repo_id_from_folder
from vrampilot.hub.records import list_pending, verified_sha256
from vrampilot.units import format_bytes

OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_REGISTRY = "registry.ollama.ai"


class LocalStatus(StrEnum):
    OK = "ok"
    PARTIAL = "partial"  # an unfinished download or a truncated file: resumable or re-downloadable
    BROKEN = "broken"  # not a GGUF model we can read
    QUARANTINED = "quarantined"  # failed its sha256 check; kept aside for inspection


class Source(StrEnum):
    HF_CACHE = "Hugging Face cache"
    LM_STUDIO = "LM Studio"
    OLLAMA = "Ollama"
    FOLDER = "Folder"


@dataclass(frozen=True)
class LocalModel:
    path: Path  # the file to open (first part of a split model)
    name: str
    source: Source
    size_bytes: int  # all parts
    status: LocalStatus
    problem: str | None = None
    architecture: str | None = None
    quant: str | None = None
    repo_id: str | None = None
    parts: tuple[Path, ...] = ()
    verified: bool | None = None  # sha256 checked against the Hub (HF cache only)

    @property
    def usable(self) -> bool:
        return self.status is LocalStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "name": self.name,
            "source": self.source.value,
            "size_bytes": self.size_bytes,
            "status": self.status.value,
            "problem": self.problem,
            "architecture": self.architecture,
            "quant": self.quant,
            "repo_id": self.repo_id,
            "parts": [str(p) for p in self.parts],
            "verified": self.verified,
        }


def _file_type(meta: dict[str, Any]) -> str | None:
    ft = meta.get("general.file_type")
    if not isinstance(ft, int):
        return None
    try:
        return LlamaFileType(ft).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def inspect_file(path: Path) -> tuple[LocalStatus, str | None, str | None, str | None]:
    """(status, problem, architecture, quant) from the header."""
    try:
        g = read_gguf(path)
    except GGUFError as exc:
        partial = any(w in exc.problem for w in ("incomplete", "truncated", "runs past the end"))
        return (LocalStatus.PARTIAL if partial else LocalStatus.BROKEN), exc.problem, None, None
    arch = g.get("general.architecture")
    return LocalStatus.OK, None, one_line(arch) if isinstance(arch, str) else None, _file_type(g.metadata)


def _model_entry(
    files: list[Path],
    source: Source,
    *,
    name: str | None = None,
    repo_id: str | None = None,
    verified: bool | None = None,
    split_count: int = 1,
) -> LocalModel:
    """One entry for a single file or a split set (files sorted, first part first)."""
    first = files[0]
    status, problem, arch, quant = inspect_file(first)
    if split_count > 1 and len(files) < split_count:
        status = LocalStatus.PARTIAL if status is LocalStatus.OK else status
        problem = problem or f"only {len(files)} of {split_count} parts of this split model are present"
    for part in files[1:]:
        if status is not LocalStatus.OK:
            break
        s2, p2, _, _ = inspect_file(part)
        if s2 is not LocalStatus.OK:
            status, problem = s2, f"{part.name}: {p2}"
    return LocalModel(
        path=first,
        name=name or first.name,
        source=source,
        size_bytes=sum(_size(f) for f in files),
        status=status,
        problem=problem,
        architecture=arch,
        quant=quant or (q if (q := quant_from_name(first.name)) != "other" else None),
        repo_id=repo_id,
        parts=tuple(files) if len(files) > 1 else (),
        verified=verified,
    )


def _group_gguf(paths: Iterable[Path]) -> Iterator[tuple[list[Path], int]]:
    """Single files, and split parts joined by (folder, stem, count)."""
    splits: dict[tuple[Path, str, int], list[tuple[int, Path]]] = {}
    for p in sorted(paths):
        m = SPLIT_NAME_RE.match(p.name)
        if m:
            splits.setdefault((p.parent, m["stem"], int(m["count"])), []).append((int(m["idx"]), p))
        else:
            yield [p], 1
    for (_, _, count), parts in splits.items():
        parts.sort()
        yield [p for _, p in parts], count


def _walk_gguf(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out.extend(Path(dirpath) / f for f in filenames if f.lower().endswith(".gguf"))
    return out


# ---------------------------------------------------------------------------------------------
# sources


def hf_cache_models(root: Path | None = None) -> list[LocalModel]:
    root = root or hf_hub_cache()
    out: list[LocalModel] = []
    if not root.is_dir():
        return out
    pending = {str(pp): p for p in list_pending() for pp in p.part_paths}
    for storage in sorted(root.glob("models--*")):
        repo_id = repo_id_from_folder(storage.name)
        snapshots = storage / "snapshots"
        main = _read_text(storage / "refs" / "main")
        chosen: dict[str, Path] = {}  # filename in repo -> snapshot path (main's commit wins)
        if snapshots.is_dir():
            for snap in sorted(snapshots.iterdir(), key=lambda d: (d.name == main, _mtime(d))):
                for f in _walk_gguf(snap):
                    chosen[f.relative_to(snap).as_posix()] = f
        for files, count in _group_gguf(chosen.values()):
            first = files[0]
            if not first.exists():
                out.append(
                    LocalModel(
                        first,
                        first.name,
                        Source.HF_CACHE,
                        0,
                        LocalStatus.BROKEN,
                        "the cache entry points to a file that is missing",
                        repo_id=repo_id,
                    )
                )
                continue
            verified = all(verified_sha256(f.resolve()) is not None for f in files)
            out.append(_model_entry(files, Source.HF_CACHE, repo_id=repo_id, verified=verified, split_count=count))
        blobs = storage / "blobs"
        if not blobs.is_dir():
            continue
        for blob in sorted(blobs.iterdir()):
            n = blob.name
            if n.endswith(PART_SUFFIX):
                rec = pending.get(str(blob))
                label = rec.filename if rec else n
                total = f" of {format_bytes(rec.total_bytes)}" if rec else ""
                out.append(
                    LocalModel(
                        blob,
                        label,
                        Source.HF_CACHE,
                        _size(blob),
                        LocalStatus.PARTIAL,
                        f"download stopped at {format_bytes(_size(blob))}{total}: resume it in the Hub tab "
                        "or with `vrampilot hub download`",
                        repo_id=repo_id,
                    )
                )
            elif ORPHAN_RE.match(n):
                out.append(
                    LocalModel(
                        blob,
                        n,
                        Source.HF_CACHE,
                        _size(blob),
                        LocalStatus.PARTIAL,
                        "unfinished download left by another Hugging Face tool",
                        repo_id=repo_id,
                    )
                )
            elif QUARANTINE_MARK in n and not n.endswith(".json"):
                note = _read_json(blob.with_name(n + ".json")) or {}
                out.append(
                    LocalModel(
                        blob,
                        str(note.get("filename") or n),
                        Source.HF_CACHE,
                        _size(blob),
                        LocalStatus.QUARANTINED,
                        f"failed its checksum (expected {str(note.get('expected', '?'))[:16]}…); set aside, not used",
                        repo_id=repo_id,
                    )
                )
    return out


def lmstudio_models(home: Path | None = None) -> list[LocalModel]:
    home = home or Path.home()
    out: list[LocalModel] = []
    for root in (home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"):
        if not root.is_dir():
            continue
        for files, count in _group_gguf(_walk_gguf(root)):
            rel = files[0].relative_to(root).as_posix()
            out.append(_model_entry(files, Source.LM_STUDIO, name=rel, split_count=count))
    return out


def ollama_root(home: Path | None = None) -> Path:
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else (home or Path.home()) / ".ollama" / "models"


def _ollama_name(parts: tuple[str, ...]) -> str:
    registry, namespace, model, tag = parts[-4:]
    if registry == OLLAMA_DEFAULT_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def ollama_models(root: Path | None = None) -> list[LocalModel]:
    """Ollama keeps GGUF files as content-addressed blobs; its manifests give them names."""
    root = root or ollama_root()
    manifests = root / "manifests"
    out: list[LocalModel] = []
    if not manifests.is_dir():
        return out
    for path in sorted(p for p in manifests.rglob("*") if p.is_file()):
        rel = path.relative_to(manifests).parts
        if len(rel) < 4:
            continue
        name = _ollama_name(rel)
        data = _read_json(path)
        layers = data.get("layers") if isinstance(data, dict) else None
        if not isinstance(layers, list):
            out.append(LocalModel(path, name, Source.OLLAMA, 0, LocalStatus.BROKEN, "unreadable Ollama manifest"))
            continue
        for layer in layers:
            if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_MEDIA_TYPE:
                continue
            digest = str(layer.get("digest", ""))
            blob = root / "blobs" / digest.replace(":", "-")
            if not blob.is_file():
                out.append(
                    LocalModel(
                        blob,
                        name,
                        Source.OLLAMA,
                        0,
                        LocalStatus.PARTIAL,
                        f"blob {digest[:19]}… is missing (pull the model again in Ollama)",
                    )
                )
                continue
            out.append(_model_entry([blob], Source.OLLAMA, name=name))
    return out


def folder_models(folder: Path) -> list[LocalModel]:
    folder = folder.expanduser()
    if not folder.is_dir():
        return []
    return [
        _model_entry(files, Source.FOLDER, name=files[0].relative_to(folder).as_posix(), split_count=count)
        for files, count in _group_gguf(_walk_gguf(folder))
    ]


def scan_library(
    folders: Iterable[Path] = (),
    *,
    home: Path | None = None,
    hf_cache: Path | None = None,
    ollama: Path | None = None,
) -> list[LocalModel]:
    """Every GGUF model found, each file once (a folder inside the HF cache is not listed twice)."""
    found: list[LocalModel] = []
    found += hf_cache_models(hf_cache)
    found += lmstudio_models(home)
    found += ollama_models(ollama or ollama_root(home))
    for folder in folders:
        found += folder_models(Path(folder))
    seen: set[Path] = set()
    out: list[LocalModel] = []
    for m in found:
        key = m.path.resolve() if m.path.exists() else m.path
        if key in seen:
            continue
        seen.add(key)
        out.append(m)
    return out


# ---------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
