"""HybridChat: the hybrid backend behind a chat, fed by the real llama.cpp engine's template and tokenizer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from testkit.gguf_models import write_model
from vrampilot.engine import Engine, EngineError, Message, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.hybrid.backend import HybridChat, torch_available, unsupported_reason
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, seed=1)


@pytest.fixture(scope="module")
def engine(embedded_model: Path) -> Iterator[Engine]:
    e = Engine()
    found = detect_measured_machine()
    # One thread: see tests/engine/conftest.py (busy 2-core machines).
    e.load(
        plan(
            load_model_spec(embedded_model),
            resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed),
            Pins(n_ctx=1024, n_threads=1, n_threads_batch=1),
        )
    )
    yield e
    e.unload()


def test_torch_is_found_and_only_llama_family_files_are_accepted(embedded_model: Path, tmp_path: Path) -> None:
    assert torch_available()
    assert unsupported_reason(embedded_model) is None
    qwen = write_model(tmp_path / "tiny-qwen2.gguf", "qwen2")
    reason = unsupported_reason(qwen)
    assert reason is not None and "'qwen2' is not supported" in reason and "Llama-family" in reason


@pytest.mark.slow
def test_turns_stream_extend_the_cache_and_stop(engine: Engine, embedded_model: Path) -> None:
    chat = HybridChat(embedded_model, threads=1)
    assert chat.usage() == KvCacheUsage(0, 0, 0) and not chat.prepared
    pieces: list[str] = []
    usages: list[KvCacheUsage] = []
    history = [Message("user", "Name a colour.")]
    first = chat.chat(engine, history, GREEDY, on_text=pieces.append, on_usage=usages.append)
    assert chat.prepared and first.load_s > 0
    assert first.text and "".join(pieces) == first.text
    s = first.stats
    assert s.prompt_tokens == len(engine.tokenize_prompt(history)) and s.reused_tokens == 0
    assert 0 < s.completion_tokens <= GREEDY.max_tokens and s.stop_reason in ("eos", "length")
    # The meter's numbers are the session's: a short chat sits inside the raw window, so all of it is held.
    session = chat.session
    assert session is not None
    assert usages[-1] == first.kv == KvCacheUsage(session.kv_bytes_held(), session.full_cache_bytes(), session.n_tokens)
    assert first.kv.full_f16_bytes == session.n_tokens * 30 * 3 * 64 * 2 * 2  # SmolLM2: 30 layers, 3 KV heads
    assert first.kv.held_bytes == first.kv.full_f16_bytes

    # The follow-up's prompt (llama.cpp's tokens of the stored text) starts with what the cache
    # holds, so only the new turn is fed.
    history += [Message("assistant", first.text), Message("user", "And another one?")]
    second = chat.chat(engine, history, GREEDY)
    assert second.load_s == 0.0
    assert second.stats.reused_tokens == s.context_used
    assert second.stats.evaluated_tokens == second.stats.prompt_tokens - s.context_used

    # Stop after the first piece: the text so far is the reply, marked cancelled.
    cancel = threading.Event()
    history += [Message("assistant", second.text), Message("user", "Write a long poem about the sea.")]
    stopped = chat.chat(
        engine, history, SamplingParams(temperature=0.0, max_tokens=200), on_text=lambda _t: cancel.set(), cancel=cancel
    )
    assert stopped.stats.stop_reason == "cancelled" and stopped.stats.completion_tokens == 1


def test_the_engine_must_hold_the_same_file(tmp_path: Path) -> None:
    chat = HybridChat(tmp_path / "other.gguf")
    with pytest.raises(EngineError, match=r"load other\.gguf first"):
        chat.chat(Engine(), [Message("user", "hi")], GREEDY)


def test_the_hybrid_backend_refuses_images_in_one_line(embedded_model: Path, tmp_path: Path) -> None:
    """The torch model has no vision tower: a conversation with an image is refused, not answered
    as if the image were not there (the window shows the message; the chat stays usable)."""
    from tests.images import png_bytes
    from vrampilot.errors import UserError
    from vrampilot.hybrid.backend import HybridBackend

    (tmp_path / "a.png").write_bytes(png_bytes(8, 8))
    backend = HybridBackend(embedded_model, threads=1)
    with pytest.raises(UserError, match="the experimental hybrid backend reads no images: switch this chat's backend"):
        backend.reply(
            Engine(),
            [Message("user", "What is this?", images=(str(tmp_path / "a.png"),))],
            SamplingParams(max_tokens=4),
            on_text=lambda _t: None,
            on_report=lambda _r: None,
            cancel=threading.Event(),
            trim=False,
        )
    assert not backend.chat.prepared  # refused before reading the model into torch
