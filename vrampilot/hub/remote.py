"""Remote GGUF headers by HTTP range request: the planner judges the real tensor table, not a guess.

Only the first bytes of a file are fetched (1 MiB, then more while the header needs it; a header
with a 150K-token vocabulary takes 5-10 MiB). Headers are cached by their LFS sha256, which names
the content, so a cached header never goes stale.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from huggingface_hub import hf_hub_url

from vrampilot.errors import UserError
from vrampilot.gguf import (
    GGUFError,
    GGUFFile,
    GGUFNeedMoreBytes,
    ModelSpec,
    ProjectorSpec,
    fits,
    model_input_embd,
    read_gguf_bytes,
    read_projector,
    spec_from_gguf,
)
from vrampilot.hub.client import default_token, hub_call, raise_for_status, request_headers, transfer_client
from vrampilot.hub.env import hub_endpoint
from vrampilot.hub.errors import HubError
from vrampilot.hub.files import RemoteFile, RemoteModel, RepoFiles
from vrampilot.paths import cache_dir

INITIAL_HEADER_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 128 * 1024 * 1024


def header_cache_dir() -> Path:
    path = cache_dir() / "hub" / "headers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cache_key(repo_id: str, revision: str | None, f: RemoteFile) -> str:
    if f.sha256:
        return f.sha256
    raw = f"{repo_id}\0{revision}\0{f.filename}\0{f.size_bytes}".encode()
    return "k" + hashlib.sha256(raw).hexdigest()


def _cache_read(key: str) -> bytes:
    try:
        return (header_cache_dir() / f"{key}.head").read_bytes()
    except OSError:
        return b""


def _cache_write(key: str, data: bytes) -> None:
    folder = header_cache_dir()
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, folder / f"{key}.head")
    except OSError:
        pass  # a cache that cannot be written only costs a refetch


def fetch_range(url: str, start: int, end: int, token: str | None) -> bytes:
    """Bytes start..end (inclusive) of `url`. A server that ignores Range is read only as far as needed."""
    headers = request_headers(token)
    headers["Range"] = f"bytes={start}-{end}"
    want = end - start + 1
    out = bytearray()
    with transfer_client().stream("GET", url, headers=headers) as r:
        if r.status_code >= 400:
            r.read()
            raise_for_status(r)
        skip = start if r.status_code == 200 else 0
        for chunk in r.iter_bytes(64 * 1024):
            if skip:
                drop = min(skip, len(chunk))
                chunk = chunk[drop:]
                skip -= drop
            out += chunk
            if len(out) >= want:
                break
    return bytes(out[:want])


def fetch_remote_header(
    repo_id: str,
    f: RemoteFile,
    *,
    revision: str | None = None,
    token: str | None = None,
    initial_bytes: int = INITIAL_HEADER_BYTES,
    use_cache: bool = True,
) -> GGUFFile:
    """The header of a file on the Hub, read with the app's one GGUF reader.

    Raises GGUFError for a bad file, HubError subclasses for network and access problems.
    """
    token = token if token is not None else default_token()
    name = f"{repo_id}/{f.filename}"
    key = _cache_key(repo_id, revision, f)
    buf = _cache_read(key) if use_cache else b""
    url = hf_hub_url(repo_id, f.filename, revision=revision or "main", endpoint=hub_endpoint())
    fetched = False
    while True:
        if buf:
            try:
                parsed = read_gguf_bytes(buf, name, f.size_bytes)
            except GGUFNeedMoreBytes as more:
                want = max(more.needed_bytes, 2 * len(buf))
            else:
                if fetched and use_cache:
                    _cache_write(key, buf)
                return parsed
        else:
            want = initial_bytes
        want = min(want, f.size_bytes)
        if want > MAX_HEADER_BYTES:
            raise GGUFError(
                name, f"the header is larger than {MAX_HEADER_BYTES // (1024 * 1024)} MiB; not a model file"
            )
        if want <= len(buf):
            raise GGUFError(name, "the file ends inside its header")
        with hub_call(repo_id, token=token, filename=f.filename):
            chunk = fetch_range(url, len(buf), want - 1, token)
        if not chunk:
            raise GGUFError(name, "the Hub sent no bytes for this file")
        buf += chunk
        fetched = True


def remote_spec(
    repo_id: str,
    model: RemoteModel,
    *,
    revision: str | None = None,
    token: str | None = None,
    initial_bytes: int = INITIAL_HEADER_BYTES,
) -> ModelSpec:
    """The ModelSpec of a remote model; a split model reads every part's tensor table."""
    if not model.complete:
        raise GGUFError(
            f"{repo_id}/{model.first.filename}",
            f"only {len(model.files)} of {model.split_count} parts of this split model are in the repository",
        )
    parts = [
        fetch_remote_header(repo_id, f, revision=revision, token=token, initial_bytes=initial_bytes)
        for f in model.files
    ]
    return spec_from_gguf(parts[0], parts)


def remote_projector(
    repo_id: str, model: RemoteModel, *, revision: str | None = None, token: str | None = None
) -> ProjectorSpec:
    """A remote vision projector's header, read like any remote GGUF header."""
    header = fetch_remote_header(repo_id, model.first, revision=revision, token=token)
    return read_projector(f"{repo_id}/{model.first.filename}", gguf=header)


def matching_remote_projector(
    listing: RepoFiles, spec: ModelSpec, metadata: dict[str, object] | None = None, *, token: str | None = None
) -> RemoteModel | None:
    """The repository's first projector whose embeddings the model takes (its header read by
    range request), None when none does: a repository may hold projectors of several widths (one
    per model size) or files named mmproj that are not projectors."""
    want = model_input_embd(spec, metadata)
    for m in listing.mmproj:
        try:
            if fits(remote_projector(listing.repo_id, m, revision=listing.commit, token=token), want):
                return m
        except HubError:
            raise  # the Hub could not be asked: not the same as "does not fit"
        except UserError:
            continue
    return None
