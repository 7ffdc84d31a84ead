"""The one rule for other plans: the neighbours a plan lists, what gives VRAM back first, and the
pins a change makes (planner/search/alternatives.py)."""

from __future__ import annotations

from pathlib import Path

from testkit.gguf_models import write_qwen25_7b_q4_k_m
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search import alternatives as alt
from vrampilot.planner.settings import Settings


def test_neighbours_are_distinct_and_never_the_plan_itself(tmp_path: Path) -> None:
    spec = load_model_spec(write_qwen25_7b_q4_k_m(tmp_path / "m.gguf"))
    s = Settings(n_ctx=32768, n_gpu_layers=spec.n_layer + 1)
    found = alt.neighbours(spec, s, has_gpu=True)
    labels = [label for label, _ in found]
    cands = [c for _, c in found]
    assert s not in cands and len(set(cands)) == len(cands)
    assert labels[:2] == ["64K context", "16K context"]
    assert "one fewer GPU layer" in labels and "all layers on the GPU" not in labels
    assert "flash attention off" in labels
    # Without a GPU there is no layer to move.
    assert not any("GPU" in label for label, _ in alt.neighbours(spec, s.with_(n_gpu_layers=0), has_gpu=False))


def test_next_ctx_steps_by_powers_of_two() -> None:
    assert (alt.next_ctx(32768, up=True), alt.next_ctx(32768, up=False)) == (65536, 16384)
    assert (alt.next_ctx(20000, up=True), alt.next_ctx(20000, up=False)) == (32768, 16384)


def test_freeing_changes_quantize_first_then_context_then_layers() -> None:
    steps = list(alt.freeing_changes(Settings(n_ctx=16384, n_gpu_layers=3)))
    assert [label for label, _ in steps] == [
        "q8_0 KV cache",
        "q8_0 KV cache, 8K context",
        "8K context",
        "q8_0 KV cache, 4K context",
        "4K context",
        "1 fewer GPU layer (2 on the GPU)",
        "2 fewer GPU layers (1 on the GPU)",
    ]
    # A quantized cache is not offered again.
    assert [label for label, _ in alt.freeing_changes(Settings(n_ctx=4096, type_k="q8_0", type_v="q8_0"))] == []


def test_the_pins_a_change_makes() -> None:
    old = Settings(n_ctx=32768, n_gpu_layers=29, n_ubatch=2048)
    new = old.with_(n_gpu_layers=28, devices=("CUDA0",))
    assert alt.changed_pins(old, new) == {"n_gpu_layers": 28}  # --device is not a pin
    assert set(alt.PINNABLE) >= {"n_ctx", "type_k", "type_v", "n_gpu_layers", "tensor_split"}
    held = alt.held_pins(Pins(n_threads=4), old, alt.VRAM_FIELDS, {"type_k": "q8_0"})
    assert held == Pins(n_ctx=32768, n_gpu_layers=29, n_ubatch=2048, n_batch=2048, n_threads=4, type_k="q8_0")
    assert (
        alt.describe_change(old, new.with_(n_ctx=16384))
        == "GPU layers 29 -> 28, context 32K -> 16K, devices () -> ('CUDA0',)"
    )
