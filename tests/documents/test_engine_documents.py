"""A document on real llama.cpp (embedded SmolLM2): prompt progress, cancel that keeps what was
read, follow-ups that evaluate only their new tokens, and KV state saved to disk and restored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.machines import cpu_machine
from tests.documents.writers import long_report
from vrampilot.documents import DocumentSet, KvStateStore, Tokenizer, extract, state_key
from vrampilot.engine import Engine, Message, PromptProgress, SamplingParams
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, seed=1)


@pytest.fixture(scope="module")
def doc_plan(embedded_model: Path) -> Plan:
    spec: ModelSpec = load_model_spec(embedded_model)
    # ubatch 64: several progress updates for a short document.
    return plan(
        spec,
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=1024, n_threads=1, n_threads_batch=1, n_ubatch=64),
    )


@pytest.fixture(scope="module")
def engine(doc_plan: Plan) -> Iterator[Engine]:
    e = Engine()
    e.load(doc_plan)
    yield e
    e.unload()


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> DocumentSet:
    path = tmp_path_factory.mktemp("d") / "review.md"
    path.write_text(long_report(n_sections=3).markdown)
    ds = DocumentSet(tokenizer.count)
    ds.attach(extract(path))
    return ds


def test_engine_counts_tokens_like_the_vocab_only_tokenizer(engine: Engine, tokenizer: Tokenizer) -> None:
    text = "Quarry Hill Water Tower, 1987 — Lotte Varga."
    assert engine.count_tokens(text) == tokenizer.count(text)


def test_progress_then_follow_up_evaluates_only_new_tokens(engine: Engine, docs: DocumentSet) -> None:
    assert docs.fit(engine.plan, reply_tokens=GREEDY.max_tokens).mode == "full"  # type: ignore[arg-type]  # the engine has loaded a plan
    first = docs.compose("", [], "Who was the chief engineer of the North Reservoir?", mode="full", n_ctx=1024)
    events: list[PromptProgress] = []
    r1 = engine.chat(first.messages, GREEDY, on_prompt_progress=events.append)
    s1 = r1.stats
    assert s1.evaluated_tokens > docs.doc_tokens
    # Updates per ubatch of 64: from 0 to everything but the last token (which the reply's first step reads).
    dones = [e.done for e in events]
    assert dones == sorted(dones) and dones[0] == 0 and dones[-1] == events[0].total == s1.evaluated_tokens
    assert len(events) >= s1.evaluated_tokens // 64
    assert events[-1].tokens_per_s > 0 and "Reading the prompt" in events[1].text()

    history = [Message("user", first.given.question), Message("assistant", r1.text)]
    second = docs.compose("", history, "And who built the Old Mill Dam?", mode="full", n_ctx=1024)
    r2 = engine.chat(second.messages, GREEDY)
    s2 = r2.stats
    new_turn = engine.count_tokens("And who built the Old Mill Dam?")
    assert s2.reused_tokens == s1.context_used  # the document and turn one stay in the cache
    assert s2.evaluated_tokens <= new_turn + 12  # chat markup, the reply's last token and closing tag
    assert s2.evaluated_tokens < 0.1 * s1.evaluated_tokens


def test_cancel_during_the_prompt_keeps_what_was_read(engine: Engine, docs: DocumentSet) -> None:
    composed = docs.compose(
        "Answer in one line.", [], "Which district does the Old Mill Dam serve?", mode="full", n_ctx=1024
    )
    cancel = threading.Event()
    seen: list[PromptProgress] = []

    def progress(p: PromptProgress) -> None:
        seen.append(p)
        if p.done >= 128:
            cancel.set()

    r = engine.chat(composed.messages, GREEDY, cancel=cancel, on_prompt_progress=progress)
    assert r.stats.stop_reason == "cancelled" and r.text == "" and r.stats.completion_tokens == 0
    kept = engine.tokens_in_cache
    assert kept >= 128 and kept < len(engine.tokenize_prompt(composed.messages))
    # Asking again continues from the part already read.
    again = engine.chat(composed.messages, GREEDY)
    assert again.stats.reused_tokens >= kept
    assert again.stats.stop_reason in ("eos", "length")


def test_state_saved_to_disk_restores_into_a_fresh_engine(
    engine: Engine, docs: DocumentSet, doc_plan: Plan, tmp_path: Path
) -> None:
    composed = docs.compose("", [], "When was the Old Mill Dam commissioned?", mode="full", n_ctx=1024)
    r1 = engine.chat(composed.messages, GREEDY)
    store = KvStateStore(tmp_path / "states")
    key = state_key(doc_plan.spec.path, engine.settings, docs.hashes)  # type: ignore[arg-type]  # the engine has loaded: settings is set
    saved = store.save(engine, key)
    assert saved.tokens == engine.tokens_in_cache and saved.nbytes > 0 and store.has(key)

    fresh = Engine()
    fresh.load(doc_plan)
    try:
        restored = store.restore(fresh, key)
        assert restored is not None and restored.tokens == saved.tokens
        assert fresh.cached_tokens() == engine.cached_tokens()
        history = [Message("user", composed.given.question), Message("assistant", r1.text)]
        follow = docs.compose("", history, "Who was its chief engineer?", mode="full", n_ctx=1024)
        r2 = fresh.chat(follow.messages, GREEDY)
        assert r2.stats.reused_tokens == r1.stats.context_used
        assert r2.stats.evaluated_tokens <= fresh.count_tokens("Who was its chief engineer?") + 12
    finally:
        fresh.unload()


def test_state_key_and_bad_state_files(engine: Engine, doc_plan: Plan, tmp_path: Path) -> None:
    s = doc_plan.settings
    key = state_key(doc_plan.spec.path, s, ["a"])
    assert key == state_key(doc_plan.spec.path, s.with_(n_threads=7), ["a"])  # threads do not change the cache
    assert key != state_key(doc_plan.spec.path, s.with_(n_ctx=2048), ["a"])
    assert key != state_key(doc_plan.spec.path, s, ["b"])
    store = KvStateStore(tmp_path)
    store.path("junk").write_bytes(b"not a state file")
    before = engine.cached_tokens()
    junk = store.restore(engine, "junk")
    assert junk is not None and junk.tokens == 0 and "no integrity record" in junk.dropped
    assert not store.path("junk").exists()
    assert engine.cached_tokens() == before  # refused before llama.cpp saw it: the cache is untouched
    assert store.restore(engine, "missing") is None
