"""Headers of remote files: the one reader on byte prefixes, range requests, and the header cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.gguf import GGUFError, GGUFNeedMoreBytes, load_model_spec, read_gguf, read_gguf_bytes
from vrampilot.hub import AccessDeniedError, HubUnreachableError, fetch_remote_header, list_repo_files, remote_spec


def test_prefix_parse_matches_the_file_reader(models: Models) -> None:
    """Grow a prefix until the parser stops asking: same metadata and tensors as read_gguf."""
    full = read_gguf(models.qwen7b)
    data = models.qwen7b.open("rb").read(full.data_offset_bytes + 64)
    size = models.qwen7b.stat().st_size
    have, asks = 16, 0
    while True:
        try:
            parsed = read_gguf_bytes(data[:have], "remote.gguf", size)
            break
        except GGUFNeedMoreBytes as more:
            assert more.needed_bytes > have
            asks += 1
            have = max(more.needed_bytes, have * 2)
    assert asks >= 5
    assert parsed.metadata == full.metadata
    assert parsed.tensors == full.tensors
    assert parsed.file_bytes == size


def test_tensor_offsets_are_checked_against_the_remote_size(models: Models) -> None:
    full = read_gguf(models.tiny_llama)
    head = models.tiny_llama.read_bytes()[: full.data_offset_bytes]
    with pytest.raises(GGUFError, match="points past the end") as info:
        read_gguf_bytes(head, "short.gguf", full.data_offset_bytes + 100)  # the remote file is too short
    assert not isinstance(info.value, GGUFNeedMoreBytes)


def test_a_corrupt_header_is_an_error_not_a_request_for_more(models: Models) -> None:
    data = bytearray(models.tiny_llama.read_bytes()[:4096])
    data[16:24] = (10**15).to_bytes(8, "little")  # absurd metadata count
    with pytest.raises(GGUFError, match="cannot fit") as info:
        read_gguf_bytes(bytes(data), "bad.gguf", 2_000_000)
    assert not isinstance(info.value, GGUFNeedMoreBytes)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf_bytes(b"GGML" + bytes(60), "old.gguf", 2_000_000)


def test_remote_header_uses_range_requests_and_is_cached(hub: FakeHub, models: Models) -> None:
    hub.add_repo("big/qwen-GGUF", {"qwen7b-Q4_K_M.gguf": models.qwen7b})
    listing = list_repo_files("big/qwen-GGUF")
    f = listing.models[0].first
    g = fetch_remote_header("big/qwen-GGUF", f, revision=listing.commit, initial_bytes=4096)
    assert g.get("general.architecture") == "qwen2"
    assert g.file_bytes == models.qwen7b.stat().st_size
    ranges = [r.range for r in hub.requests if r.path.startswith("/cdn/")]
    assert ranges[0] == "bytes=0-4095" and len(ranges) > 1  # grew as the header asked
    assert all(r and r.startswith("bytes=") for r in ranges)
    served = hub.served("qwen7b-Q4_K_M.gguf")
    assert served < 64 * 1024  # a 4.4 GiB file judged from tens of kilobytes
    assert served >= read_gguf(models.qwen7b).data_offset_bytes - 32

    before = len(hub.requests)
    again = fetch_remote_header("big/qwen-GGUF", f, revision=listing.commit)
    assert again.tensors == g.tensors
    assert len(hub.requests) == before  # from the header cache, keyed by the LFS sha256


def test_split_model_reads_every_part(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    listing = list_repo_files(tiny_repo)
    split = next(m for m in listing.models if m.is_split)
    spec = remote_spec(tiny_repo, split, revision=listing.commit)
    local = load_model_spec(models.split_parts[0])
    assert spec.weight_bytes == local.weight_bytes and spec.n_params == local.n_params
    assert spec.file_bytes == sum(p.stat().st_size for p in models.split_parts)


def test_gated_header_needs_a_token(hub: FakeHub, models: Models, hf_env: Path) -> None:
    repo = hub.add_repo("meta/gated-GGUF", {"tiny-llama-F16.gguf": models.tiny_llama}, gated=True)
    listing = list_repo_files("meta/gated-GGUF")  # listing a gated repo works without a token
    assert listing.gated
    with pytest.raises(AccessDeniedError, match="gated or private") as info:
        fetch_remote_header("meta/gated-GGUF", listing.models[0].first, revision=listing.commit)
    assert info.value.status == 401 and not info.value.signed_in

    (hf_env / "token").parent.mkdir(parents=True, exist_ok=True)
    (hf_env / "token").write_text("hf_not_granted\n")
    with pytest.raises(AccessDeniedError, match="no access") as info:
        fetch_remote_header("meta/gated-GGUF", listing.models[0].first, revision=listing.commit)
    assert info.value.status == 403 and info.value.signed_in

    repo.granted_tokens.add("hf_not_granted")
    g = fetch_remote_header("meta/gated-GGUF", listing.models[0].first, revision=listing.commit)
    assert g.get("general.architecture") == "llama"
    assert any(r.authorization == "Bearer hf_not_granted" for r in hub.requests if "/resolve/" in r.path)
    # The token goes to the Hub, never to the CDN host it redirects to.
    assert all(r.authorization is None for r in hub.requests if r.path.startswith("/cdn/"))


def test_server_gone(hub: FakeHub, models: Models) -> None:
    hub.add_repo("a/b-GGUF", {"tiny-llama-F16.gguf": models.tiny_llama})
    listing = list_repo_files("a/b-GGUF")
    hub.stop()
    with pytest.raises(HubUnreachableError, match="cannot reach the Hub"):
        fetch_remote_header("a/b-GGUF", listing.models[0].first, revision=listing.commit, use_cache=False)
    with pytest.raises(HubUnreachableError):
        list_repo_files("a/b-GGUF")


def test_offline_mode_uses_cached_headers_only(hub: FakeHub, models: Models, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo("a/c-GGUF", {"tiny-llama-F16.gguf": models.tiny_llama})
    listing = list_repo_files("a/c-GGUF")
    f = listing.models[0].first
    fetch_remote_header("a/c-GGUF", f, revision=listing.commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub.requests)
    assert fetch_remote_header("a/c-GGUF", f, revision=listing.commit).get("general.architecture") == "llama"
    with pytest.raises(HubUnreachableError, match="offline mode"):
        list_repo_files("a/c-GGUF")
    assert len(hub.requests) == before
