"""A context typo (`--ctx 99999999999`) must cost a plan no more memory than a small, stated bound.

llama.cpp's dry run allocates its KV cache's cell table on the host, 48 bytes a token, even without
the weights: `plan --ctx 30000000` took 1.5 GB for a plan that did not fit, and 99999999999 passed
20 GB before it was killed. Now a context past llama.cpp's own limit is refused in one line, one
the formula already rules out is not asked of llama.cpp, and llama.cpp is asked up to 1M tokens
(planner/dry_run/measure.py's DRY_RUN_MAX_CTX) at most.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from testkit.machines import cpu_machine
from tests import waits
from tests.cli.test_cli_bounds import one_line_error
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.dry_run import graph
from vrampilot.planner.dry_run.graph import graph_compute
from vrampilot.planner.dry_run.measure import DRY_RUN_MAX_CTX, MeasureError, measure_allocations
from vrampilot.planner.errors import PlanError
from vrampilot.planner.plan import MAX_CTX, Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB, MIB

pytest.importorskip("llama_cpp")

# A plan's peak resident memory may exceed the plan of the model's own context by this much, at
# any --ctx: the dry run's cell tables at DRY_RUN_MAX_CTX (48 MiB a cache) and the noise of a
# Python process. Before the bounds, --ctx 30000000 added 1.4 GiB.
PEAK_ALLOWANCE_BYTES = 160 * MIB


@pytest.fixture(scope="module")
def spec(embedded_model: Path) -> ModelSpec:
    return load_model_spec(embedded_model)


@pytest.mark.parametrize("pin", ["n_ctx", "min_ctx"])
def test_a_context_past_what_llama_cpp_takes_is_refused_in_one_line(spec: ModelSpec, pin: str) -> None:
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    with pytest.raises(PlanError) as err:
        plan(spec, target, Pins(**{pin: 99_999_999_999}), exact=True)  # type: ignore[arg-type]  # one field by name
    assert "99999999999 tokens is more than llama.cpp can take (at most 2147483392)" in str(err.value)
    assert MAX_CTX % 256 == 0 and MAX_CTX + 256 == 1 << 31  # llama.cpp pads to 256 and counts in int32


def test_a_size_the_formula_rules_out_is_not_asked_of_llama_cpp(spec: ModelSpec) -> None:
    """1M tokens of SmolLM2's cache are 22 GiB: on 8 GiB of RAM no compute buffer changes that."""
    small = resolve_target(TargetRequest(cpu_only=True), cpu_machine(ram_gib=8))
    asked = len(graph._results)
    p = plan(spec, small, Pins(n_ctx=1 << 20), exact=True)
    assert not p.fits and p.compute_source == "estimate"
    assert len(graph._results) == asked  # no dry run
    # Where it could fit, llama.cpp is asked as before.
    big = resolve_target(TargetRequest(cpu_only=True), cpu_machine(ram_gib=64))
    assert plan(spec, big, Pins(n_ctx=1 << 20), exact=True).compute_source == "llama.cpp"


def test_the_dry_run_is_asked_up_to_its_bound_and_the_formula_beyond(spec: ModelSpec) -> None:
    at = Settings(n_ctx=DRY_RUN_MAX_CTX, n_threads=1, n_threads_batch=1)
    assert graph_compute(spec.path, at) is not None
    past = at.with_(n_ctx=DRY_RUN_MAX_CTX + 256)
    assert graph_compute(spec.path, past) is None
    with pytest.raises(MeasureError, match=f"up to {DRY_RUN_MAX_CTX} tokens, not {DRY_RUN_MAX_CTX + 256}"):
        measure_allocations(spec.path, past)
    # A plan there that may fit (a card of 4 TiB) is sized by the formula, and says so.
    p = plan(
        spec, resolve_target(TargetRequest(vram_bytes=4096 * GIB), cpu_machine()), Pins(n_ctx=30_000_000), exact=True
    )
    assert p.fits and p.compute_source == "estimate"
    assert any("llama.cpp is asked for contexts up to 1024K" in w for w in p.warnings), p.warnings


PEAK = """
import resource, sys
from vrampilot.cli import main
try:
    code = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
sys.exit(code)
"""


def _peak_bytes(tmp_path: Path, *args: str) -> tuple[int, int]:
    """Exit status and peak resident bytes of `vrampilot ARGS` (Linux: ru_maxrss is in KiB)."""
    out = tmp_path / "peak"
    r = waits.run([sys.executable, "-c", PEAK, str(out), *args], cpu_s=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, int(out.read_text())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB (Linux)")
def test_a_huge_context_costs_a_plan_no_more_memory_than_a_small_bound(embedded_model: Path, tmp_path: Path) -> None:
    model = str(embedded_model)
    code, base = _peak_bytes(tmp_path, "plan", model, "--cpu-only")
    assert code == 0
    # Ruled out by the formula on this machine; past the dry run's bound on a 4 TiB card, where it fits.
    for args in (["--cpu-only", "--ctx", "30000000"], ["--vram", "4TiB", "--ctx", "30000000"]):
        code, peak = _peak_bytes(tmp_path, "plan", model, *args)
        assert code in (0, 1)
        assert peak - base < PEAK_ALLOWANCE_BYTES, f"{args}: {(peak - base) / MIB:.0f} MiB over the plain plan"


@pytest.mark.parametrize("command", ["plan", "export", "chat"])
def test_the_typo_is_refused_by_every_command_that_plans(command: str) -> None:
    extra = ["--prompt", "hi"] if command == "chat" else []
    r = waits.run([sys.executable, "-m", "vrampilot", command, "--ctx", "99999999999", *extra], cpu_s=60)
    assert one_line_error(r).endswith(
        "--ctx: must be at most 2147483392 (the most llama.cpp takes: its positions are 32-bit), not 99999999999 "
        f"(see vrampilot {command} --help)"
    )
