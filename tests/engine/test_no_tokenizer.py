"""A GGUF with weights but no tokenizer (llama.cpp's "none" vocabulary, as conversion tools and
our own fixtures write): llama.cpp loads it, then aborts the whole process on its first tokenize.
A chat with it must be one clear line, not the app gone."""

from __future__ import annotations

from pathlib import Path

from testkit.gguf_models import write_model
from tests.cli.test_cli import vrampilot
from vrampilot.gguf import load_model_spec


def test_the_header_says_whether_a_file_has_a_tokenizer(tmp_path: Path, embedded_model: Path) -> None:
    assert load_model_spec(write_model(tmp_path / "weights.gguf", "llama", n_layer=2)).tokenizer_model is None
    assert load_model_spec(embedded_model).tokenizer_model == "gpt2"


def test_chat_with_a_file_without_a_tokenizer_says_so_in_one_line(tmp_path: Path) -> None:
    model = write_model(tmp_path / "weights only.gguf", "llama", n_layer=2)
    r = vrampilot(
        "chat",
        str(model),
        "--prompt",
        "hi",
        "--max-tokens",
        "4",
        "--threads",
        "1",
        env={"VRAMPILOT_HOME": str(tmp_path / "home")},
    )
    assert r.returncode == 2, r.stderr[-2000:]  # was 134: GGML_ASSERT "Tokenizer not initialized"
    assert r.stderr.strip().splitlines()[-1] == (
        "vrampilot: weights only.gguf has no tokenizer (no tokenizer.ggml.model in its header): it can be planned "
        "and loaded, but llama.cpp cannot turn text into its tokens; chat with a GGUF made for inference"
    )
