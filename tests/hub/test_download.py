"""Downloads over real HTTP: HF cache layout, cuts and restarts, pause, checksum, gated repos."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from filelock import FileLock

from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.gguf import load_model_spec
from vrampilot.hub import (
    AccessDeniedError,
    ChecksumMismatchError,
    DownloadControl,
    DownloadInterruptedError,
    DownloadProgress,
    DownloadState,
    HubUnreachableError,
    LocalStatus,
    download_model,
    list_pending,
    scan_library,
)
from vrampilot.hub.hf_cache import RepoCache

REPO = "test/tiny-llama-GGUF"
F16 = "tiny-llama-F16.gguf"


def _sha(path: Path | None) -> str:
    assert path is not None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_lands_in_the_shared_hf_cache(hub: FakeHub, tiny_repo: str, models: Models, hf_env: Path) -> None:
    seen: list[DownloadProgress] = []
    result = download_model(REPO, F16, on_progress=seen.append)
    assert result.status == "done"
    size = models.tiny_llama.stat().st_size
    sha = _sha(models.tiny_llama)
    commit = hub.repos[REPO].commit
    storage = hf_env / "hub" / "models--test--tiny-llama-GGUF"
    assert result.path == storage / "snapshots" / commit / F16
    assert result.path.is_symlink() and os.readlink(result.path) == f"../../blobs/{sha}"
    assert (storage / "blobs" / sha).stat().st_size == size
    assert (storage / "refs" / "main").read_text() == commit
    assert hub.served(F16) == size and result.fetched_bytes == size
    assert load_model_spec(result.path).architecture == "llama"

    states = [p.state for p in seen]
    assert states[0] is DownloadState.CHECKING and states[-1] is DownloadState.DONE
    done = [p.done_bytes for p in seen]
    assert done == sorted(done) and done[-1] == size == seen[-1].total_bytes
    assert "of 2.04 MiB" in seen[-1].describe()

    # huggingface_hub itself finds the file where we put it, and fetches nothing.
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cache = str(hf_env / "hub")
    assert try_to_load_from_cache(REPO, F16, cache_dir=cache) == str(result.path)
    assert hf_hub_download(REPO, F16, cache_dir=cache, endpoint=hub.endpoint, token=False) == str(result.path)
    assert hub.served(F16) == size

    # A second download is immediate: already there and already verified.
    again = download_model(REPO, F16)
    assert again.path == result.path and again.fetched_bytes == 0 and hub.served(F16) == size


def test_cut_connection_resumes_without_refetching(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    size = models.tiny_llama.stat().st_size
    hub.cut_after[F16] = 700_000
    result = download_model(REPO, F16)
    assert result.status == "done"
    assert hub.served(F16) == size  # the 700,000 bytes received were not asked for again
    ranges = [r.range for r in hub.file_requests(F16)]
    assert ranges == ["bytes=0-", "bytes=700000-"]
    assert _sha(result.path) == _sha(models.tiny_llama)


def test_server_gone_mid_download_then_resume_after_restart(
    hub: FakeHub, tiny_repo: str, models: Models, hf_env: Path
) -> None:
    size = models.tiny_llama.stat().st_size
    hub.stop_after[F16] = 900_000
    with pytest.raises(DownloadInterruptedError, match="download again to resume") as info:
        download_model(REPO, F16)
    assert info.value.have_bytes == 900_000
    part = RepoCache.for_repo(REPO).part(_sha(models.tiny_llama))
    assert part.stat().st_size == 900_000
    [pending] = list_pending()
    assert (pending.repo_id, pending.filename, pending.have_bytes, pending.total_bytes) == (REPO, F16, 900_000, size)
    lib = {m.name: m for m in scan_library(home=hf_env)}
    assert lib[F16].status is LocalStatus.PARTIAL

    with pytest.raises(HubUnreachableError):
        download_model(REPO, F16)  # still gone: a clear message, the part untouched
    assert part.stat().st_size == 900_000

    hub.start()  # back on the same port; a new Downloader, as after an app restart
    result = download_model(REPO, F16)
    assert result.status == "done" and result.fetched_bytes == size - 900_000
    assert hub.served(F16) == size
    assert hub.file_requests(F16)[-1].range == "bytes=900000-"
    assert _sha(result.path) == _sha(models.tiny_llama)
    assert not part.exists() and list_pending() == []


def test_pause_resume_and_cancel(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    size = models.tiny_llama.stat().st_size
    hub.throttle_bps = 4_000_000
    control = DownloadControl()

    def pause_early(p: DownloadProgress) -> None:
        if p.done_bytes > 300_000:
            control.pause()

    paused = download_model(REPO, F16, control=control, on_progress=pause_early)
    assert paused.status == "paused" and paused.path is None
    part = RepoCache.for_repo(REPO).part(_sha(models.tiny_llama))
    have = part.stat().st_size
    assert 300_000 < have < size

    hub.throttle_bps = None
    resumed = download_model(REPO, F16)
    assert resumed.status == "done" and resumed.fetched_bytes == size - have
    last = hub.file_requests(F16)[-1]
    assert last.range == f"bytes={have}-" and last.bytes_sent == size - have
    assert _sha(resumed.path) == _sha(models.tiny_llama)

    # Cancel removes the partial file and the pending record.
    q8 = "tiny-llama-Q8_0.gguf"
    hub.throttle_bps = 4_000_000
    control = DownloadControl()
    cancelled = download_model(
        REPO, q8, control=control, on_progress=lambda p: control.cancel() if p.done_bytes > 100_000 else None
    )
    assert cancelled.status == "cancelled"
    assert not RepoCache.for_repo(REPO).part(_sha(models.tiny_llama_q8)).exists()
    assert list_pending() == []


def test_corrupted_transfer_is_quarantined(hub: FakeHub, tiny_repo: str, models: Models, hf_env: Path) -> None:
    hub.corrupt.add(F16)
    with pytest.raises(ChecksumMismatchError, match="failed its checksum") as info:
        download_model(REPO, F16)
    err = info.value
    assert err.quarantine_path.is_file() and err.quarantine_path.name.startswith(_sha(models.tiny_llama))
    assert err.expected_sha256 == _sha(models.tiny_llama) != err.actual_sha256
    storage = hf_env / "hub" / "models--test--tiny-llama-GGUF"
    assert not (storage / "blobs" / _sha(models.tiny_llama)).exists()
    assert not list((storage / "snapshots").rglob("*.gguf")) if (storage / "snapshots").exists() else True
    lib = [m for m in scan_library(home=hf_env) if m.status is LocalStatus.QUARANTINED]
    assert [m.name for m in lib] == [F16]

    hub.corrupt.clear()
    assert download_model(REPO, F16).status == "done"


def test_damaged_blob_from_another_tool_is_not_offered(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    """huggingface_hub checks only sizes: a same-size damaged blob in the cache must be caught."""
    cache = RepoCache.for_repo(REPO)
    sha = _sha(models.tiny_llama)
    data = bytearray(models.tiny_llama.read_bytes())
    data[len(data) // 3] ^= 0x55
    cache.blobs.mkdir(parents=True)
    cache.blob(sha).write_bytes(bytes(data))
    result = download_model(REPO, F16)
    assert result.status == "done" and _sha(result.path) == sha
    assert hub.served(F16) == len(data)
    assert [p.name for p in cache.blobs.iterdir() if ".quarantined-" in p.name and not p.name.endswith(".json")]


def test_orphaned_incomplete_files_are_cleaned(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    cache = RepoCache.for_repo(REPO)
    cache.blobs.mkdir(parents=True)
    other = "b" * 64
    old = cache.blobs / f"{'a' * 64}.1a2b3c4d.incomplete"  # left by a killed huggingface_hub process
    fresh = cache.blobs / f"{other}.0badf00d.incomplete"  # being written right now
    locked = cache.blobs / f"{'c' * 64}.12345678.incomplete"  # old, but its download lock is held
    legacy = cache.blobs / f"{'d' * 64}.incomplete"  # older huggingface_hub resumes from these
    for p in (old, fresh, locked, legacy):
        p.write_bytes(b"x" * 1000)
    for p in (old, locked, legacy):
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    lock = cache.lock_path("c" * 64)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        download_model(REPO, F16)
    assert not old.exists()
    assert fresh.exists() and locked.exists() and legacy.exists()


def test_gated_download(hub: FakeHub, models: Models, hf_env: Path) -> None:
    repo = hub.add_repo("meta/Gated-GGUF", {F16: models.tiny_llama}, gated=True)
    with pytest.raises(AccessDeniedError, match="sign in with a token"):
        download_model("meta/Gated-GGUF", F16)
    assert not hf_env.exists()  # refused before anything was written
    repo.granted_tokens.add("hf_granted")
    hf_env.mkdir()
    (hf_env / "token").write_text("hf_granted")  # the Hub's own token file, as `hf auth login` writes it
    result = download_model("meta/Gated-GGUF", F16)
    assert result.status == "done"
    head = [r for r in hub.requests if r.method == "HEAD"]
    assert head[-1].authorization == "Bearer hf_granted"
    assert all(r.authorization is None for r in hub.file_requests(F16))  # not sent to the CDN


def test_split_model_downloads_every_part(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    second = f"Q4_0/{models.split_parts[1].name}"
    result = download_model(REPO, second)  # naming any part fetches the model
    assert result.status == "done" and len(result.paths) == 2
    assert result.path is not None and result.path.name == models.split_parts[0].name
    assert result.paths[0].parent == result.paths[1].parent
    spec = load_model_spec(result.path)
    assert len(spec.split_paths) == 2
    assert spec.weight_bytes == load_model_spec(models.split_parts[0]).weight_bytes


def test_xet_advertised_plain_http_still_used(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    """The Hub announces Xet storage for most files now; our transfer stays on plain HTTP ranges."""
    hub.advertise_xet = True
    result = download_model(REPO, F16)
    assert result.status == "done" and _sha(result.path) == _sha(models.tiny_llama)
    assert not [r for r in hub.requests if "xet" in r.path]
    assert [r.range for r in hub.file_requests(F16)] == ["bytes=0-"]
