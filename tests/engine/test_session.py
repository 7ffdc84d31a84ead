"""Load, stream, stats, prefix reuse, cancel and context overflow on real llama.cpp."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine.conftest import GREEDY, make_plan
from vrampilot.engine import ContextOverflow, Engine, Message, NoModelLoaded, SamplingParams
from vrampilot.export import llama_cpp_kwargs
from vrampilot.gguf import ModelSpec
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target

if TYPE_CHECKING:
    import llama_cpp

pytestmark = pytest.mark.slow


def test_streams_the_reply_and_reports_stats(engine: Engine) -> None:
    pieces: list[str] = []
    reply = engine.chat([Message("user", "Name three colors.")], GREEDY, on_text=pieces.append)
    s = reply.stats
    assert reply.text and "".join(pieces) == reply.text
    assert len(pieces) > 3  # streamed, not delivered at the end
    assert s.prompt_tokens == len(engine.tokenize_prompt([Message("user", "Name three colors.")]))
    assert s.completion_tokens >= 1 and s.completion_tokens <= GREEDY.max_tokens
    assert s.stop_reason in ("eos", "length")
    # Only the last sampled token is not yet in the cache when the reply stops at max tokens.
    expected = s.prompt_tokens + s.completion_tokens - (1 if s.stop_reason == "length" else 0)
    assert s.context_used == expected == engine.tokens_in_cache
    assert s.n_ctx == engine.n_ctx == 1024
    assert 0 < s.prefill_s <= s.ttft_s
    assert s.prefill_tps > 0 and s.decode_tps > 0
    d = s.to_dict()
    assert {"prompt_tokens", "completion_tokens", "ttft_s", "decode_tps", "prefill_tps"} <= set(d)


def test_logit_bias_moves_the_text_s_tokens_as_llama_server_does(engine: Engine) -> None:
    """`--logit-bias` in-process: every token of the text gets the bias, before the other samplers."""
    question = [Message("user", "Name three colors.")]
    forced = engine.chat(question, GREEDY.with_(max_tokens=3, logit_bias=(("{", 100.0),)))
    assert forced.text == "{{{"  # the bias outweighs every other token, and the repeat penalty
    unbiased = engine.chat(question, GREEDY.with_(max_tokens=3)).text
    banned = engine.chat(question, GREEDY.with_(max_tokens=3, logit_bias=((unbiased[:1], -100.0),))).text
    assert unbiased and not banned.startswith(unbiased[:1])


def test_a_follow_up_evaluates_only_the_new_tokens(engine: Engine) -> None:
    first = [Message("system", "You are terse."), Message("user", "What is the capital of France?")]
    r1 = engine.chat(first, GREEDY)
    assert r1.stats.reused_tokens == 0 or r1.stats.reused_tokens < r1.stats.prompt_tokens
    follow = [*first, Message("assistant", r1.text), Message("user", "And of Italy?")]
    r2 = engine.chat(follow, GREEDY)
    s2 = r2.stats
    # The whole cache of turn one (prompt and reply) is kept; only the new turn is evaluated.
    assert s2.reused_tokens == r1.stats.context_used
    assert s2.evaluated_tokens == s2.prompt_tokens - r1.stats.context_used
    new_turn = len(engine.tokenize_prompt([Message("user", "And of Italy?")]))
    assert s2.evaluated_tokens <= new_turn + 4  # the closing tag of the reply, the new turn's markup
    # Regenerate: the same conversation again costs a single token.
    r3 = engine.chat(follow, GREEDY)
    assert r3.stats.evaluated_tokens == 1
    assert r3.text == r2.text  # greedy: same cache, same reply


def test_editing_an_earlier_message_reuses_the_prefix_before_it(engine: Engine) -> None:
    base = [Message("system", "Answer in one word.")]
    engine.chat([*base, Message("user", "Color of the sky?")], GREEDY)
    r = engine.chat([*base, Message("user", "Color of grass?")], GREEDY)
    system_tokens = len(engine.tokenize_prompt(base))
    assert system_tokens - 2 <= r.stats.reused_tokens < r.stats.prompt_tokens


def test_stop_during_generation_keeps_the_text_so_far(engine: Engine) -> None:
    cancel = threading.Event()
    pieces: list[str] = []

    def on_text(t: str) -> None:
        pieces.append(t)
        if len(pieces) == 3:
            cancel.set()

    long = SamplingParams(temperature=0.0, max_tokens=400, seed=1)
    r = engine.chat([Message("user", "Write a long story about a dragon.")], long, on_text=on_text, cancel=cancel)
    assert r.stats.stop_reason == "cancelled"
    assert 3 <= r.stats.completion_tokens <= 4
    assert r.text == "".join(pieces)
    # The session is usable afterwards.
    again = engine.chat([Message("user", "Say hi.")], GREEDY)
    assert again.stats.stop_reason in ("eos", "length")


def test_cancel_interrupts_a_long_prompt(spec: ModelSpec, cpu_target: Target) -> None:
    # One batch of 2048: only the abort callback can stop it before the whole prompt is evaluated.
    e = Engine()
    e.load(make_plan(spec, cpu_target, n_ctx=4096, n_batch=2048, n_ubatch=128))
    try:
        text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(120))
        msgs = [Message("user", text)]
        n_prompt = len(e.tokenize_prompt(msgs))
        assert n_prompt > 1500
        cancel = threading.Event()
        timer = threading.Timer(0.3, cancel.set)
        timer.start()
        t0 = time.perf_counter()
        r = e.chat(msgs, SamplingParams(max_tokens=8), cancel=cancel)
        elapsed = time.perf_counter() - t0
        timer.cancel()
        assert r.stats.stop_reason == "cancelled"
        assert r.text == "" and r.stats.completion_tokens == 0
        assert e.tokens_in_cache < n_prompt, "the prompt was evaluated to the end despite the cancel"
        assert elapsed < 30
        # What was cached before the abort is consistent: the next turn works and reuses it.
        r2 = e.chat([Message("user", "Say hi.")], SamplingParams(temperature=0.0, max_tokens=4))
        assert r2.stats.completion_tokens >= 1
    finally:
        e.unload()


def test_overflow_is_refused_before_anything_is_evaluated(spec: ModelSpec, cpu_target: Target) -> None:
    e = Engine()
    e.load(make_plan(spec, cpu_target, n_ctx=512))
    try:
        e.chat([Message("user", "Hi")], SamplingParams(temperature=0.0, max_tokens=2))
        cached = e.tokens_in_cache
        long = [Message("user", "word " * 600)]
        with pytest.raises(ContextOverflow) as info:
            e.chat(long, SamplingParams(max_tokens=16))
        assert info.value.prompt_tokens >= 512 and info.value.n_ctx == 512
        assert "drop the oldest turns" in str(info.value)
        assert e.tokens_in_cache == cached  # nothing was evaluated
        medium = [Message("user", "word " * 400)]
        with pytest.raises(ContextOverflow, match="plus a reply of up to 200 tokens"):
            e.chat(medium, SamplingParams(max_tokens=200))
        # Allowed to overflow: the reply stops when the context is full.
        r = e.chat(medium, SamplingParams(temperature=0.0, max_tokens=200), allow_overflow=True)
        assert r.stats.stop_reason in ("context", "eos")
        assert r.stats.context_used <= 512
    finally:
        e.unload()


def test_fit_messages_drops_whole_old_turns(engine: Engine) -> None:
    msgs = [Message("system", "Be brief.")]
    for i in range(12):
        msgs += [Message("user", f"Question {i}: " + "tell me more " * 20), Message("assistant", "answer " * 30)]
    msgs.append(Message("user", "Last question?"))
    kept = engine.fit_messages(msgs, max_tokens=128)
    assert kept[0] == msgs[0] and kept[-1] == msgs[-1]
    assert len(kept) < len(msgs)
    assert engine.check_context(kept, 128).fits
    assert [m.role for m in kept[1:]] == ["user", "assistant"] * ((len(kept) - 2) // 2) + ["user"]


def test_load_uses_the_export_builder_and_unload_frees(spec: ModelSpec, cpu_target: Target) -> None:
    p = make_plan(spec, cpu_target, n_ctx=768, type_k="q8_0", type_v="q8_0")
    seen: list[dict[str, object]] = []
    from vrampilot.engine.loader import open_llama

    def spy(path: str | Path, settings: Settings, **kw: Any) -> llama_cpp.Llama:
        seen.append(llama_cpp_kwargs(settings))
        return open_llama(path, settings, **kw)

    e = Engine(opener=spy)
    result = e.load(p)
    try:
        assert not result.backed_off
        llm = e._llm
        assert llm is not None
        assert llm.n_ctx() == 768
        assert llm.context_params.type_k == seen[0]["type_k"] == 8  # q8_0
        assert llm.context_params.n_threads == 1
        assert e.settings == p.settings
    finally:
        e.unload()
    assert not e.loaded
    with pytest.raises(NoModelLoaded):
        e.chat([Message("user", "hi")])


def test_progress_is_reported_and_cancel_aborts_the_load(spec: ModelSpec, cpu_target: Target) -> None:
    from vrampilot.engine import LoadCancelled

    values: list[float] = []
    e = Engine()
    e.load(make_plan(spec, cpu_target), progress=values.append)
    assert values and values[-1] == 1.0 and values == sorted(values)
    e.unload()

    cancel = threading.Event()

    def progress(v: float) -> None:
        if v > 0.2:
            cancel.set()

    with pytest.raises(LoadCancelled):
        e.load(make_plan(spec, cpu_target), progress=progress, cancel=cancel)
    assert not e.loaded
