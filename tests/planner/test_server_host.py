"""llama-server's own host memory in the plan (issue 57): the prompt cache (--cache-ram) and the
context checkpoints (--ctx-checkpoints) sized to what the host budget leaves, on every exported
line, and shown in the plan report. The real server's resident memory is held against it in
tests/server/test_server_ram.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from testkit.gguf_models import write_header_only
from testkit.machines import cpu_machine
from vrampilot.commands.plan_report import format_plan, plan_to_dict
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.memory.server_host import LLAMA_CACHE_RAM_MIB, LLAMA_CTX_CHECKPOINTS, PROCESS_BYTES
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB, MIB


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_prompt_cache_gets_what_the_host_budget_leaves_and_every_line_says_so(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine(ram_gib=24))
    pins = Pins(n_ctx=2048)
    roomy = plan(spec, target, pins)
    assert roomy.memory.server is not None and roomy.memory.server.cache_ram_mib == LLAMA_CACHE_RAM_MIB
    # A model without sliding-window or recurrent layers makes no checkpoints.
    assert roomy.memory.server.checkpoint_bytes == 0 and roomy.settings.ctx_checkpoints == 0
    argv = llama_server_argv(spec.path, roomy.settings)
    assert _flag(argv, "--cache-ram") == str(LLAMA_CACHE_RAM_MIB) and _flag(argv, "--ctx-checkpoints") == "0"
    engine = roomy.memory.host.total_bytes
    assert roomy.memory.served_host_bytes == engine + LLAMA_CACHE_RAM_MIB * MIB + PROCESS_BYTES

    tight = plan(spec, replace(target, host_ram_bytes=engine + PROCESS_BYTES + 100 * MIB + 5), pins)
    assert tight.fits and tight.settings.cache_ram_mib == 100
    assert tight.memory.served_host_bytes <= tight.host_budget_bytes
    assert any("prompt cache of 100.00 MiB" in r for r in tight.reasons), tight.reasons
    text = format_plan(tight)
    assert "prompt cache 100.00 MiB (--cache-ram 100)" in text, text
    assert "host under llama-server:" in text
    assert plan_to_dict(tight)["server_host"]["cache_ram_mib"] == 100
    assert "--cache-ram 100" in plan_to_dict(tight)["llama_server"]

    # Nothing left: the cache is off, and the plan says why; the model itself still fits.
    full = plan(spec, replace(target, host_ram_bytes=engine), pins)
    assert full.fits and full.settings.cache_ram_mib == 0
    assert _flag(llama_server_argv(spec.path, full.settings), "--cache-ram") == "0"
    assert any("prompt cache off (--cache-ram 0)" in r for r in full.reasons), full.reasons
    # The engine's own totals (what alternatives compare, what the in-app chat uses) are unchanged.
    assert full.memory.host.total_bytes == engine


def test_checkpoints_of_a_sliding_window_model_are_counted_and_capped(tmp_path: Path) -> None:
    """Gemma-3-27B's sliding-window cache is about 600 MiB a slot at 32K: llama-server's default of
    32 checkpoints would take 19 GiB beside it. The plan counts each and gives them at most half of
    what is left, the cache the rest; with --swa-full there are none."""
    spec = load_model_spec(write_header_only(tmp_path / "g.gguf", "gemma-3-27b"))
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine(ram_gib=32))
    p = plan(spec, target, Pins(n_ctx=32768, type_k="f16", type_v="f16"))
    server = p.memory.server
    assert server is not None
    assert server.checkpoint_bytes == p.memory.kv.swa_bytes
    assert 400 * MIB < server.checkpoint_bytes < 800 * MIB
    left = p.host_budget_bytes - p.memory.host.total_bytes - PROCESS_BYTES
    assert server.ctx_checkpoints == min(LLAMA_CTX_CHECKPOINTS, left // 2 // server.checkpoint_bytes)
    assert 0 < server.ctx_checkpoints < LLAMA_CTX_CHECKPOINTS
    assert p.memory.served_host_bytes <= p.host_budget_bytes
    assert _flag(llama_server_argv(spec.path, p.settings), "--ctx-checkpoints") == str(server.ctx_checkpoints)
    assert f"{server.ctx_checkpoints} checkpoints of" in format_plan(p)

    full = plan(spec, replace(target, host_ram_bytes=64 * GIB), Pins(n_ctx=32768, swa_full=True))
    assert full.memory.server is not None and full.memory.server.checkpoint_bytes == 0
