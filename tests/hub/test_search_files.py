"""Search, repository listings and fit badges, against the fake Hub over real HTTP."""

from __future__ import annotations

import pytest

from testkit.machines import cpu_machine as machine
from tests.hub.conftest import Models, gpu_target
from tests.hub.fake_hub import FakeHub
from vrampilot.hub import Fit, RepoNotFoundError, badge_for_spec, list_repo_files, remote_spec, search_models
from vrampilot.hub.files import quant_from_name
from vrampilot.hub.search import params_from_name


@pytest.fixture
def catalogue(hub: FakeHub, models: Models) -> FakeHub:
    m = models
    hub.add_repo(
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        {"a-Q4_K_M.gguf": m.tiny_qwen2},
        downloads=9000,
        likes=40,
        days_ago=30,
        gguf={"architecture": "qwen2", "total": 7_615_616_512, "context_length": 32768},
    )
    hub.add_repo(
        "unsloth/gemma-3-27b-it-GGUF",
        {"b-Q4_K_M.gguf": m.tiny_llama},
        downloads=5000,
        likes=90,
        days_ago=2,
        license="gemma",
        gguf={"architecture": "gemma3", "total": 27_009_002_240},
    )
    hub.add_repo(
        "someone/Llama-3.1-8B-Instruct-GGUF",
        {"c-Q8_0.gguf": m.tiny_llama_q8},
        downloads=100,
        likes=5,
        days_ago=1,
        gguf={"architecture": "llama", "total": 8_030_261_248},
    )
    hub.add_repo("someone/tiny-qwen-0.5B-GGUF", {"d-F16.gguf": m.tiny_qwen2}, downloads=10, likes=1, days_ago=400)
    return hub


def test_search_sorts_and_reports_fields(catalogue: FakeHub) -> None:
    by_downloads = search_models("")
    assert [r.repo_id for r in by_downloads][:2] == [
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "unsloth/gemma-3-27b-it-GGUF",
    ]
    first = by_downloads[0]
    assert (first.downloads, first.likes, first.license, first.architecture) == (9000, 40, "apache-2.0", "qwen2")
    assert first.n_params == 7_615_616_512 and first.last_modified is not None
    assert search_models("", sort="likes")[0].repo_id == "unsloth/gemma-3-27b-it-GGUF"
    assert search_models("", sort="recent")[0].repo_id == "someone/Llama-3.1-8B-Instruct-GGUF"
    assert [r.repo_id for r in search_models("qwen")] == [
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "someone/tiny-qwen-0.5B-GGUF",
    ]
    api = [r for r in catalogue.requests if r.path.startswith("/api/models?")]
    assert "filter=gguf" in api[0].path and "sort=downloads" in api[0].path


def test_search_filters_by_architecture_and_size(catalogue: FakeHub) -> None:
    catalogue.page_size = 2  # filters read on through the Hub's pages
    assert [r.repo_id for r in search_models("", architecture="gemma3")] == ["unsloth/gemma-3-27b-it-GGUF"]
    small = search_models("", max_params=9_000_000_000)
    assert {r.repo_id for r in small} == {
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "someone/Llama-3.1-8B-Instruct-GGUF",
        "someone/tiny-qwen-0.5B-GGUF",  # size from the name when the Hub gives none
    }
    assert [r.repo_id for r in search_models("", min_params=20_000_000_000)] == ["unsloth/gemma-3-27b-it-GGUF"]
    assert len(search_models("", limit=3)) == 3
    assert any("cursor=" in r.path for r in catalogue.requests)


def test_names() -> None:
    assert params_from_name("org/Llama-3.1-8B-Instruct") == 8_000_000_000
    assert params_from_name("org/Qwen2.5-0.5B") == 500_000_000
    assert params_from_name("org/no-size") is None
    assert quant_from_name("sub/Qwen3-Q4_K_M-00001-of-00003.gguf") == "Q4_K_M"
    assert quant_from_name("gemma-3-27b-it-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL"
    assert quant_from_name("llama-2-7b.Q5_K_S.gguf") == "Q5_K_S"
    assert quant_from_name("Q8_0/model-00001-of-00002.gguf") == "Q8_0"


def test_listing_groups_quants_splits_and_mmproj(hub: FakeHub, tiny_repo: str, models: Models) -> None:
    listing = list_repo_files(tiny_repo)
    assert listing.commit == hub.repos[tiny_repo].commit
    groups = dict(listing.by_quant())
    assert set(groups) == {"F16", "Q8_0", "Q4_0"}
    split = groups["Q4_0"][0]
    assert split.is_split and split.complete and len(split.files) == 2
    assert [f.filename for f in split.files] == [f"Q4_0/{p.name}" for p in models.split_parts]
    assert split.total_bytes == sum(p.stat().st_size for p in models.split_parts)
    assert [m.first.filename for m in listing.mmproj] == ["mmproj-tiny-f16.gguf"]
    assert all(f.sha256 and len(f.sha256) == 64 for m in listing.models for f in m.files)
    assert listing.find(split.files[1].filename) is split


def test_unknown_repo(hub: FakeHub) -> None:
    with pytest.raises(RepoNotFoundError, match="not found"):
        list_repo_files("nobody/nothing")


def test_badges_come_from_the_remote_header(hub: FakeHub, models: Models) -> None:
    """Same file size, different architecture -> different badge; sizes alone would say the same."""
    hub.add_repo(
        "mix/models-GGUF",
        {
            "qwen7b-Q4_K_M.gguf": models.qwen7b,
            "llama8b-Q4_K_M.gguf": models.llama8b_same_size,
            "gemma27b-Q4_K_M.gguf": models.gemma27b,
            "tiny-llama-F16.gguf": models.tiny_llama,
        },
    )
    listing = list_repo_files("mix/models-GGUF")
    by_name = {m.first.filename: m for m in listing.models}
    qwen, llama = by_name["qwen7b-Q4_K_M.gguf"], by_name["llama8b-Q4_K_M.gguf"]
    assert qwen.total_bytes == llama.total_bytes

    target = gpu_target(vram_gib=6.25)  # at 6.5 the 8B model fits whole with a q4_0 cache, by 4 MiB
    badges = {
        name: badge_for_spec(remote_spec(listing.repo_id, m, revision=listing.commit), target, 32768)
        for name, m in by_name.items()
    }
    b_qwen, b_llama = badges["qwen7b-Q4_K_M.gguf"], badges["llama8b-Q4_K_M.gguf"]
    assert (b_qwen.architecture, b_llama.architecture) == ("qwen2", "llama")
    # Qwen2.5's 4 KV heads over 28 layers keep a 32K cache small; Llama-3.1's 8 over 32 do not.
    assert b_qwen.fit is Fit.GPU
    assert b_llama.fit is Fit.PARTIAL and b_llama.n_gpu_layers < b_llama.n_layers_total
    assert b_qwen.decode_tps > b_llama.decode_tps > 0
    assert badges["gemma27b-Q4_K_M.gguf"].fit is Fit.PARTIAL
    assert badges["tiny-llama-F16.gguf"].fit is Fit.GPU
    assert badges["tiny-llama-F16.gguf"].n_ctx == 4096  # capped at what the model was trained for
    assert "Fits on GPU" in b_qwen.text and "tok/s" in b_qwen.text

    from vrampilot.planner.target import TargetRequest, resolve_target

    tiny = remote_spec(listing.repo_id, by_name["tiny-llama-F16.gguf"], revision=listing.commit)
    assert badge_for_spec(tiny, resolve_target(TargetRequest(cpu_only=True), machine()), 4096).fit is Fit.CPU
    gemma = remote_spec(listing.repo_id, by_name["gemma27b-Q4_K_M.gguf"], revision=listing.commit)
    assert badge_for_spec(gemma, gpu_target(vram_gib=4, ram_gib=8), 8192).fit is Fit.TOO_LARGE
    # Every badge came from headers: a few hundred KiB read from files totalling 25 GB.
    assert sum(hub.bytes_served.values()) < 5 * 1024 * 1024
