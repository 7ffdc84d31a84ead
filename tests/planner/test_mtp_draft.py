"""Drafting with the model's own multi-token-prediction block (Settings.spec_type "mtp",
llama-server's `--spec-type draft-mtp`): the plan against a real llama-server's buffer lines for a
tiny DeepSeek-V2 file with one MTP block, the flags, and the refusals."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_model
from testkit.machines import cpu_machine
from testkit.spec_server import serving
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import matches_print
from vrampilot.planner.errors import PlanError
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.draft import PRIOR_MTP_P, DraftRequest, plan_with_draft, request_from_text
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target

PINS = Pins(n_ctx=4096, n_threads=1)


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the embedded model's tokenizer, so llama-server tokenizes a prompt and drafts
    return write_model(
        tmp_path_factory.mktemp("mtp") / "ds2-mtp.gguf", "deepseek2", n_layer=4, n_nextn=1, tokenizer="smollm2"
    )


def test_the_exported_line_asks_for_mtp_drafting_without_a_draft_model() -> None:
    s = Settings(n_ctx=2048, spec_type="mtp", draft_n_max=3, draft_type_k="q8_0", draft_type_v="q8_0")
    argv = llama_server_argv("/m/t.gguf", s)
    i = argv.index("--spec-type")
    assert argv[i + 1] == "draft-mtp"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "3"
    assert (argv[argv.index("-ctkd") + 1], argv[argv.index("-ctvd") + 1]) == ("q8_0", "q8_0")
    assert "-md" not in argv and "-ngld" not in argv
    assert s.drafts_mtp and s.rollback_snapshots == 3 and s.n_outputs_max == 4
    assert request_from_text("MTP") == DraftRequest("mtp")


def test_a_file_without_an_mtp_block_is_refused_in_one_line(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "plain.gguf", "deepseek2", n_layer=3)
    with pytest.raises(PlanError) as e:
        plan_with_draft(
            load_model_spec(plain),
            resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
            PINS,
            DraftRequest("mtp"),
        )
    assert "has no multi-token-prediction (MTP) block" in str(e.value) and "\n" not in str(e.value)


def test_the_plan_loads_the_block_and_counts_its_context(mtp_model: Path) -> None:
    spec = load_model_spec(mtp_model)
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    p = plan_with_draft(spec, target, PINS, DraftRequest("mtp", n_draft=2))
    plain = plan_with_draft(spec, target, PINS, DraftRequest("ngram", n_draft=2))
    assert p.settings.spec_type == "mtp" and p.settings.draft_n_max == 2
    d = p.draft
    assert d is not None and d.memory is not None and d.kind == "mtp" and d.device == "CPU"
    # the block's weights and the draft context's cache are the model's, its buffers the draft's
    assert p.memory.host.weights_bytes - plain.memory.host.weights_bytes == spec.layer_weight_bytes[-1]
    assert p.memory.kv.draft is not None
    assert p.memory.host.kv_bytes == plain.memory.host.kv_bytes + p.memory.kv.draft.bytes
    assert d.memory.host.compute_bytes > 0 and d.memory.host.output_bytes == spec.n_vocab * 4
    assert d.acceptance.p == PRIOR_MTP_P and not d.acceptance.measured
    assert 0 < d.t_draft_s < d.t_target_s  # one block and the head, not every layer
    assert any("MTP drafting" in r for r in p.reasons)


@pytest.mark.slow
@pytest.mark.parametrize("flash_attn", [True, False])
@pytest.mark.parametrize("arch", ["deepseek2", "glm4moe"])
def test_mtp_draft_bytes_equal_llama_servers(mtp_model: Path, tmp_path: Path, arch: str, flash_attn: bool) -> None:
    """llama-server drafting with the block: the model's buffers (the block's weights and the
    draft context's cache included) and the draft context's compute and output buffers, each
    equal to the plan's to the print; and it really drafts. GLM-4.5 (glm4moe, a GQA cache) is a
    family whose cache llama.cpp's dry run counts: the draft context's comes on top of it."""
    if arch == "glm4moe":
        mtp_model = write_model(tmp_path / "glm-mtp.gguf", "glm4moe", tokenizer="smollm2")
    spec = load_model_spec(mtp_model)
    assert spec.n_layer_nextn == 1
    pins = Pins(n_ctx=4096, n_threads=1, flash_attn=flash_attn)
    p = plan_with_draft(
        spec,
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        pins,
        DraftRequest("mtp", n_draft=2),
        exact=True,
    )
    d = p.draft
    assert d is not None and d.memory is not None
    with served_buffers(mtp_model, p.settings) as (target_buffers, draft_buffers, again, timings):
        kv = p.memory.kv
        assert kv.draft is not None
        pairs = (
            ("weights", p.memory.host.weights_bytes, sum(target_buffers["model"].values())),
            ("kv", kv.total_bytes - kv.draft.bytes, target_buffers["kv"]["CPU"]),
            ("compute", p.memory.host.compute_bytes, target_buffers["compute"]["CPU"]),
            ("output", p.memory.host.output_bytes, target_buffers["output"]["CPU"]),
            ("draft kv", kv.draft.bytes, draft_buffers["kv"]["CPU"]),
            ("draft compute", d.memory.host.compute_bytes, draft_buffers["compute"]["CPU"]),
            ("draft output", d.memory.host.output_bytes, draft_buffers["output"]["CPU"]),
        )
        for name, planned, real in pairs:
            assert matches_print(planned, real), f"{name}: planned {planned}, llama-server {real}"
        # reserved again for the drafter's backend sampler: the same buffer, no larger
        assert again and all(r["CPU"] <= draft_buffers["compute"]["CPU"] for r in again)
    assert timings["draft_n"] > 0


@contextmanager
def served_buffers(model: Path, settings: Settings) -> Iterator[tuple[Any, Any, Any, dict[str, Any]]]:
    with serving(model, settings) as served:
        timings = served.complete("1, 2, 3, 4, 5, 6, 7, 8,", 16)["timings"]
        target_buffers, draft_buffers = served.buffers()
        yield target_buffers, draft_buffers, served.reserves_after_drafter(), timings
