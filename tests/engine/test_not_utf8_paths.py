"""Paths whose bytes are not UTF-8 (a Linux file system holds any bytes; Python names them with
surrogates) reach llama.cpp as the file system's bytes at every call that passes a path: the
planner's dry run, the projector's, the vocabulary reader and the engine's state files. They used
to raise `UnicodeEncodeError: ... surrogates not allowed` (str(p).encode()). Where the path goes
through llama-cpp-python, which encodes it as UTF-8 itself, it is refused in one line."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from testkit.mmproj import write_projector
from tests.engine.conftest import GREEDY, make_plan
from vrampilot.engine import Engine, Message, ModelLoadError
from vrampilot.gguf import ModelSpec
from vrampilot.llamacpp import read_vocab
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.projector import measure_clip
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file names of any bytes (Linux)")


def _not_utf8(folder: Path, name: bytes) -> Path:
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


def test_the_planner_and_the_vocabulary_reader_open_the_file_by_its_bytes(embedded_model: Path, tmp_path: Path) -> None:
    model = _not_utf8(tmp_path, b"caf\xe9.gguf")
    os.link(embedded_model, model)
    m = measure_allocations(model, Settings(n_ctx=512, n_threads=1, n_threads_batch=1))
    assert m.refused is None and m.compute_total > 0
    assert read_vocab(model) == read_vocab(embedded_model)
    proj = write_projector(_not_utf8(tmp_path, b"mmproj-caf\xe9.gguf"), n_embd_text=576)
    assert measure_clip(proj, None, False).compute_bytes


def test_the_engine_keeps_state_files_under_any_name_and_refuses_such_a_model_in_one_line(
    engine: Engine, spec: ModelSpec, cpu_target: Target, tmp_path: Path
) -> None:
    engine.chat([Message("user", "Hi")], GREEDY.with_(max_tokens=2))
    cached = engine.cached_tokens()
    saved = engine.save_state_file(_not_utf8(tmp_path, b"\xff state"))
    assert saved.tokens == len(cached)
    assert engine.load_state_file(saved.path) == len(cached)
    assert engine.cached_tokens() == cached

    model = _not_utf8(tmp_path, b"caf\xe9.gguf")
    os.link(spec.path, model)
    plan = make_plan(spec, cpu_target)
    with pytest.raises(ModelLoadError) as err:
        Engine().load(replace(plan, spec=replace(spec, path=model)))
    assert str(err.value) == (
        f"{model}: llama-cpp-python opens only files whose path is UTF-8 text, and this one's is not; "
        "rename the file or its folder (or link it under a UTF-8 name)"
    )
