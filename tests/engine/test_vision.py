"""Images in the in-process engine, on real llama.cpp: the embedded SmolLM2 (n_embd 576) with a
random-weight LLaVA-style projector (testkit/mmproj.py) loaded where the plan counted it, an
image turn evaluated through it, and images it cannot take refused in one line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.mmproj import write_projector
from tests.engine.conftest import GREEDY, make_plan
from tests.images import png_bytes
from vrampilot.cli import main
from vrampilot.engine import ContextOverflow, Engine
from vrampilot.engine.vision import MAX_IMAGE_BYTES, ImageError, projector_of
from vrampilot.gguf import ModelSpec
from vrampilot.message import Message
from vrampilot.planner.memory.projector import clip_buffers
from vrampilot.planner.target import Target
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
PRINT_RESOLUTION = 0.005 * MIB + 1


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("vision")
    write_projector(d / "mmproj.gguf", "mlp", n_embd_text=576, image_size=224)  # 256 tokens per image
    (d / "a.png").write_bytes(png_bytes(40, 30))
    return d


@pytest.fixture(scope="module")
def engine(spec: ModelSpec, cpu_target: Target, files: Path) -> Iterator[Engine]:
    e = Engine()
    e.load(make_plan(spec, cpu_target, mmproj_path=str(files / "mmproj.gguf")))
    yield e
    e.unload()


def test_the_projector_is_loaded_as_planned(engine: Engine) -> None:
    assert engine.plan is not None and engine.plan.memory.projector is not None
    planned = engine.plan.memory.projector
    projector = projector_of(engine._require())
    assert projector is not None
    printed = clip_buffers(projector.log_lines)
    assert printed.backend == "CPU"  # a CPU plan keeps it on the CPU
    assert abs(planned.weights_bytes - printed.model_bytes) <= PRINT_RESOLUTION
    assert abs(planned.compute_bytes - printed.compute_bytes["CPU"]) <= PRINT_RESOLUTION


def test_an_image_turn_counts_the_image_tokens(engine: Engine, files: Path) -> None:
    text = engine.chat([Message("user", "What is in the picture?")], GREEDY)
    seen = engine.chat([Message("user", "What is in the picture?", images=(str(files / "a.png"),))], GREEDY)
    assert seen.text and seen.stats.completion_tokens > 0
    assert seen.stats.prompt_tokens == text.stats.prompt_tokens + 256
    # The next text-only turn starts over: no cached position of the image is taken for a token.
    again = engine.chat([Message("user", "What is in the picture?")], GREEDY)
    assert again.text == text.text


def test_images_it_cannot_take_are_refused_in_one_line(engine: Engine, files: Path) -> None:
    png = png_bytes(40, 30)
    cases = {
        "notes.png": b"plain text, not an image",
        "cut.png": png[: len(png) // 2],
    }
    for name, data in cases.items():
        (files / name).write_bytes(data)
    big = files / "big.png"
    with open(big, "wb") as fh:
        fh.write(png)
        fh.truncate(MAX_IMAGE_BYTES + 1)
    expected = {
        "notes.png": "notes.png: not an image this engine reads (PNG, JPEG, GIF or BMP)",
        "cut.png": "cut.png: the image is damaged or cut short (it could not be decoded)",
        "big.png": "big.png: 32.0 MiB is too large (at most 32 MiB)",
        "gone.png": "gone.png: cannot read the image (No such file or directory)",
    }
    for name, message in expected.items():
        with pytest.raises(ImageError) as err:
            engine.chat([Message("user", "x", images=(str(files / name),))], GREEDY)
        assert str(err.value) == message
    # The engine stays usable.
    assert engine.chat([Message("user", "Hi")], GREEDY).text


def test_an_image_that_does_not_fit_the_context_is_refused(engine: Engine, files: Path) -> None:
    with pytest.raises(ContextOverflow):
        engine.chat([Message("user", "x", images=(str(files / "a.png"),) * 4)], GREEDY)  # 4 x 256 > 1024


def test_without_a_projector_images_are_refused(spec: ModelSpec, cpu_target: Target, files: Path) -> None:
    e = Engine()
    e.load(make_plan(spec, cpu_target, n_ctx=512))
    try:
        with pytest.raises(ImageError, match="this plan has no vision projector"):
            e.chat([Message("user", "x", images=(str(files / "a.png"),))], GREEDY)
    finally:
        e.unload()


def test_chat_command_with_an_image(embedded_model: Path, files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["chat", str(embedded_model), "--cpu-only", "--ctx", "1024", "--threads", "1", "--threads-batch", "1"]
    argv += ["--mmproj", str(files / "mmproj.gguf"), "--image", str(files / "a.png"), "--prompt", "Describe it."]
    assert main([*argv, "--max-tokens", "4", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["mmproj_path"] == str(files / "mmproj.gguf")
    assert out["stats"]["prompt_tokens"] > 256
    assert out["speed"] is None  # an image's encoding teaches the speed model nothing
    assert os.path.isfile(files / "a.png")
