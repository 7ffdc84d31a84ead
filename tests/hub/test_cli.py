"""`vrampilot hub ...` end to end through the real CLI entry point, against the fake Hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from tests.server.test_rpc import start_rpc_host
from vrampilot.cli import main
from vrampilot.server import free_port


def test_search_json_and_table(hub: FakeHub, tiny_repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hub", "search", "tiny", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["repo_id"] for r in data["results"]] == [tiny_repo]
    assert data["results"][0]["downloads"] == 500
    assert main(["hub", "search", "tiny", "--sort", "likes"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("REPOSITORY") and tiny_repo in out
    assert main(["hub", "search", "nothing-matches"]) == 0
    assert "no GGUF repositories" in capsys.readouterr().out


def test_files_with_badges(hub: FakeHub, tiny_repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hub", "files", tiny_repo, "--vram", "8GiB", "--ctx", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    quants = [g["quant"] for g in data["groups"]]
    assert set(quants) == {"F16", "Q8_0", "Q4_0"}
    for g in data["groups"]:
        for m in g["models"]:
            assert m["badge"]["fit"] == "gpu" and m["badge"]["decode_tps"] > 0
    assert data["mmproj"][0]["files"][0]["filename"] == "mmproj-tiny-f16.gguf"
    assert main(["hub", "files", tiny_repo, "--cpu-only"]) == 0
    out = capsys.readouterr().out
    assert "CPU only" in out and "tok/s" in out and "(2 parts)" in out and "vision projectors" in out


def test_download_progress_and_resume(
    hub: FakeHub, tiny_repo: str, models: Models, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.stop_after["tiny-llama-F16.gguf"] = 1_000_000
    assert main(["hub", "download", tiny_repo, "tiny-llama-F16.gguf"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("vrampilot: lost the connection")
    hub.start()
    assert main(["hub", "download", tiny_repo, "tiny-llama-F16.gguf"]) == 0
    cap = capsys.readouterr()
    path = Path(cap.out.strip())
    assert path.is_file() and path.read_bytes() == models.tiny_llama.read_bytes()
    assert "resuming: 976.56 KiB already here" in cap.err and "100.0%" in cap.err
    assert hub.served("tiny-llama-F16.gguf") == models.tiny_llama.stat().st_size


def test_gated_repo_login_and_errors(
    hub: FakeHub, models: Models, hf_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = hub.add_repo("meta/Gated-GGUF", {"g-Q8_0.gguf": models.tiny_llama_q8}, gated=True)
    assert main(["hub", "download", "meta/Gated-GGUF", "g-Q8_0.gguf"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("vrampilot: meta/Gated-GGUF is gated or private") and "vrampilot hub login" in last

    assert main(["hub", "login", "--token", "hf_wrong"]) == 2
    assert "did not accept this token" in capsys.readouterr().err
    hub.add_user("hf_good", "alice")
    repo.granted_tokens.add("hf_good")
    assert main(["hub", "login", "--token", "hf_good"]) == 0
    assert "signed in as alice" in capsys.readouterr().out
    assert (hf_env / "token").read_text() == "hf_good"  # no keyring here: the Hub's own token file
    assert (hf_env / "token").stat().st_mode & 0o077 == 0

    assert main(["hub", "download", "meta/Gated-GGUF", "g-Q8_0.gguf"]) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()
    assert main(["hub", "logout"]) == 0
    assert not (hf_env / "token").exists()

    assert main(["hub", "files", "nobody/nothing", "--no-badges"]) == 2
    assert "not found" in capsys.readouterr().err
    hub.stop()
    assert main(["hub", "files", "meta/Gated-GGUF", "--no-badges"]) == 2
    assert "cannot reach the Hub" in capsys.readouterr().err


def test_library_command(
    hub: FakeHub, tiny_repo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(["hub", "download", tiny_repo, "tiny-llama-Q8_0.gguf"]) == 0
    capsys.readouterr()
    assert main(["hub", "library", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["status"], m["verified"]) for m in data["models"]] == [("tiny-llama-Q8_0.gguf", "ok", True)]


def _badges(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, list[dict[str, Any]]]:
    """`hub files ... --json`: the target judged for and every model's badge."""
    assert main(["hub", "files", *args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return data["target"], [m["badge"] for g in data["groups"] for m in g["models"]]


def test_files_judges_for_the_margin_the_backend_and_the_rpc_hosts_asked(
    hub: FakeHub, tiny_repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The badges are made for the target `vrampilot plan` would make from the same options
    (commands/options.py, one resolver): --margin, --gpu-backend and --rpc count, never ignored."""
    _, roomy = _badges(capsys, tiny_repo, "--vram", "8GiB", "--ctx", "4096")
    assert {b["fit"] for b in roomy} == {"gpu"}
    # The whole card kept free for the driver: nothing goes on it.
    _, kept = _badges(capsys, tiny_repo, "--vram", "8GiB", "--margin", "8GiB", "--ctx", "4096")
    assert {b["fit"] for b in kept} == {"cpu"} and all(b["n_gpu_layers"] == 0 for b in kept)

    # No card here runs under CUDA: refused in one line, as `plan --gpu-backend cuda` is.
    assert main(["hub", "files", tiny_repo, "--gpu-backend", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vrampilot: --gpu-backend cuda: no GPU here runs under CUDA") and "\n" not in err
    assert main(["hub", "files", tiny_repo, "--vram", "8GiB", "--gpu-backend", "vulkan"]) == 2
    assert "--gpu-backend picks the backend of this machine's GPUs" in capsys.readouterr().err

    host = start_rpc_host(free_port())
    try:
        endpoint = f"127.0.0.1:{host.argv[host.argv.index('-p') + 1]}"
        target, badges = _badges(capsys, tiny_repo, "--cpu-only", "--rpc", f"{endpoint}=1GiB", "--ctx", "4096")
        assert target.startswith(f"RPC host {endpoint}") and "1.00 GiB pinned" in target
        assert {b["fit"] for b in badges} == {"gpu"}  # the host takes the layers
        _, alone = _badges(capsys, tiny_repo, "--cpu-only", "--ctx", "4096")
        assert {b["fit"] for b in alone} == {"cpu"}
    finally:
        host.stop()
