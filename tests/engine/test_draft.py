"""Speculative decoding in the app's own process (llama-cpp-python's draft_model) with the plan's
settings: the same greedy reply as without drafting, the draft's acceptance counted per reply, the
draft model's buffers where the plan put them, and both models freed together."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.conftest import GREEDY, ONE_THREAD
from vrampilot.engine import Engine, Message, SamplingParams
from vrampilot.engine.draft import CountingDraft, ModelDraft
from vrampilot.engine.stats import format_summary
from vrampilot.gguf import ModelSpec
from vrampilot.planner.dry_run.log_lines import matches_print
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.draft import DraftRequest, plan_with_draft
from vrampilot.planner.target import Target

pytestmark = pytest.mark.slow
PINS = Pins(n_ctx=1024, **ONE_THREAD)  # type: ignore[arg-type]  # the thread pins by name
PRINT = 0.005 * 1024 * 1024  # half of the log's 0.01 MiB
COUNT = [Message("user", "Count from one to twenty, in words, separated by commas.")]


def _reply(
    spec: ModelSpec, target: Target, request: DraftRequest | None, messages: list[Message]
) -> tuple[str, object]:
    p = plan(spec, target, PINS) if request is None else plan_with_draft(spec, target, PINS, request)
    e = Engine()
    e.load(p)
    try:
        # No repeat penalty: the draft drafts greedily from its own logits, so with the same model
        # a penalty is the only thing that could make the target choose otherwise.
        r = e.chat(messages, SamplingParams(temperature=0.0, max_tokens=40, seed=1, repeat_penalty=1.0))
        return r.text, r.stats
    finally:
        e.unload()


def test_a_model_drafting_for_itself_gives_the_same_reply_and_accepts_every_draft(
    spec: ModelSpec, cpu_target: Target, embedded_model: Path
) -> None:
    plain, _ = _reply(spec, cpu_target, None, COUNT)
    drafted, stats = _reply(spec, cpu_target, DraftRequest("draft", embedded_model, n_draft=4), COUNT)
    assert drafted == plain  # greedy speculative decoding never changes the text
    assert stats.draft_tokens > 0 and stats.draft_accepted == stats.draft_tokens  # type: ignore[attr-defined]
    assert "accepted (100%)" in format_summary(stats.to_dict())  # type: ignore[attr-defined]


def test_ngram_drafting_counts_what_it_drafted(spec: ModelSpec, cpu_target: Target) -> None:
    repeat = [Message("user", "Repeat exactly: red green blue, red green blue, red green blue, red green blue.")]
    plain, _ = _reply(spec, cpu_target, None, repeat)
    drafted, stats = _reply(spec, cpu_target, DraftRequest("ngram", n_draft=6), repeat)
    assert drafted == plain
    assert stats.draft_tokens > 0 and 0 < stats.draft_accepted <= stats.draft_tokens  # type: ignore[attr-defined]


def test_the_draft_models_buffers_are_the_plans_and_go_with_the_model(
    spec: ModelSpec, cpu_target: Target, embedded_model: Path
) -> None:
    p = plan_with_draft(spec, cpu_target, PINS, DraftRequest("draft", embedded_model, n_draft=3), exact=True)
    assert p.draft is not None and p.draft.memory is not None
    e = Engine()
    e.load(p)
    draft = e._require().draft_model  # the loaded instance, to reach its draft
    assert isinstance(draft, CountingDraft) and isinstance(draft.inner, ModelDraft)
    host = p.draft.memory.host
    # llama.cpp's lines for the draft's load: the mapped weights, and the CPU's KV, compute and output.
    assert matches_print(host.weights_bytes, draft.inner.buffers["CPU_Mapped"])
    assert abs(host.kv_bytes + host.compute_bytes + host.output_bytes - draft.inner.buffers["CPU"]) <= 3 * PRINT
    assert e.chat([Message("user", "Hi")], GREEDY).stats.draft_tokens > 0
    e.unload()
    assert draft.inner.llm._ctx.ctx is None  # llama.cpp's context freed with the model's


def test_the_engine_refuses_mtp_drafting_in_one_line(tmp_path: Path, cpu_target: Target) -> None:
    """llama-cpp-python's draft_model= sees tokens only, not the hidden state an MTP block drafts
    from: such a plan runs in llama-server, and the engine says so before loading anything."""
    from testkit.gguf_models import write_model
    from vrampilot.engine.errors import ModelLoadError
    from vrampilot.engine.loader import open_llama
    from vrampilot.gguf import load_model_spec

    path = write_model(tmp_path / "mtp.gguf", "deepseek2", n_layer=4, n_nextn=1)
    p = plan_with_draft(load_model_spec(path), cpu_target, Pins(n_ctx=1024), DraftRequest("mtp", n_draft=2))
    with pytest.raises(ModelLoadError) as e:
        open_llama(path, p.settings)
    assert "runs in llama-server" in str(e.value) and "MTP block" in str(e.value) and "\n" not in str(e.value)
