"""The Hugging Face token: stored readable by the user alone, whatever was there before, and
written nowhere else (not the app's log, settings or downloads)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.cli import main

TOKEN = "hf_secretTOKENvalue123"


def test_login_over_a_world_readable_token_file_leaves_it_private_and_the_token_nowhere_else(
    hub: FakeHub, models: Models, hf_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `hf auth login` (huggingface_hub) writes the file with the default umask: 0644.
    token_file = hf_env / "token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("hf_old")
    token_file.chmod(0o644)
    hub.add_user(TOKEN, "alice")
    repo = hub.add_repo("meta/Gated-GGUF", {"g-Q8_0.gguf": models.tiny_llama_q8}, gated=True)
    repo.granted_tokens.add(TOKEN)

    assert main(["hub", "login", "--token", TOKEN]) == 0
    assert token_file.read_text() == TOKEN
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert [p.name for p in token_file.parent.iterdir() if p.name.startswith(".token")] == []  # no leftovers

    assert main(["hub", "download", "meta/Gated-GGUF", "g-Q8_0.gguf"]) == 0
    out, err = capsys.readouterr()
    assert TOKEN not in out + err
    for f in [*hf_env.rglob("*"), *(tmp_path / "vrampilot-home").rglob("*")]:
        if f.is_file() and f != token_file:
            assert TOKEN.encode() not in f.read_bytes(), f
