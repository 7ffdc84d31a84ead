"""The vision projector on the command line, through the real entry point: inspect describes one,
plan/export take it (or find it beside the model), chat refuses images it cannot take in one line
(the image turn itself: tests/engine/test_vision.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from testkit.mmproj import write_projector
from tests.images import png_bytes
from vrampilot.cli import main


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_model(tmp_path / "lm.gguf", "llama")  # n_embd 128
    write_projector(tmp_path / "mmproj-lm-F16.gguf", "mlp", n_embd_text=128, image_size=224)
    return tmp_path


def test_inspect_a_projector(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(folder / "mmproj-lm-F16.gguf")]) == 0
    out = capsys.readouterr().out
    assert "Vision projector  mlp" in out and "Output width      128" in out
    assert "256 tokens per image (224x224)" in out
    assert main(["inspect", str(folder / "mmproj-lm-F16.gguf"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["projector"]
    assert d["projector_type"] == "mlp" and d["output_embd"] == 128 and d["image_tokens"] == 256


def test_inspect_a_model_names_the_projector_beside_it(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(folder / "lm.gguf")]) == 0
    assert "mmproj-lm-F16.gguf beside it fits" in capsys.readouterr().out
    assert main(["inspect", str(folder / "lm.gguf"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vision_projector"] == str(folder / "mmproj-lm-F16.gguf")


def test_export_passes_the_projector(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lm = str(folder / "lm.gguf")
    assert main(["export", lm, "--vram", "8GiB", "--ctx", "1024", "--mmproj", "auto"]) == 0
    line = capsys.readouterr().out
    assert f"--mmproj {folder / 'mmproj-lm-F16.gguf'}" in line and "--no-mmproj-offload" not in line
    assert main(["export", lm, "--vram", "8GiB", "--ctx", "1024", "--mmproj", "auto", "--no-mmproj-offload"]) == 0
    assert "--no-mmproj-offload" in capsys.readouterr().out


def test_no_projector_beside_and_chat_are_refused_in_one_line(
    folder: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = write_model(tmp_path_factory.mktemp("alone") / "lm.gguf", "llama")
    assert main(["plan", str(alone), "--cpu-only", "--mmproj", "auto"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"vrampilot: no vision projector that fits lm.gguf beside it (mmproj*.gguf in {alone.parent})"
    image = folder / "a.png"
    image.write_bytes(png_bytes(8, 8))
    assert main(["chat", str(folder / "lm.gguf"), "--image", str(image), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "vrampilot: --image needs the model's vision projector: add --mmproj FILE (or --mmproj auto)"
    assert (
        main(["chat", str(folder / "lm.gguf"), "--mmproj", "auto", "--image", str(image), "--save", "--prompt", "hi"])
        == 2
    )
    assert "saved chats and documents do not keep images yet" in capsys.readouterr().err
