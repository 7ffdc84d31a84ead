"""The CPU speed model's arithmetic on measured rates: weights at each type's measured rate, attention
per KV type and context, short prompts bound by streaming the weights, experts, thread counts, and
what the plan says about where its figures come from. Probes here are data values (what the probe
would have measured), so each test knows the answer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from testkit.machines import cpu_machine, measured_target, uniform_probe
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.speed_model.cpu_speed import CpuRates, weight_table
from vrampilot.planner.speed_model.predict import SpeedModel
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import HostProbe, RateAt


@pytest.fixture(scope="module")
def q8_llama(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    path = write_model(
        tmp_path_factory.mktemp("m") / "llama-q8.gguf",
        "llama",
        weight_type="q8_0",
        n_layer=4,
        n_embd=256,
        n_head=4,
        n_head_kv=2,
        n_ff=512,
        n_vocab=4096,
    )
    return load_model_spec(path)


def _model(spec: ModelSpec, probe: HostProbe | None, pins: Pins | None = None, cores: int = 1) -> SpeedModel:
    target = measured_target(TargetRequest(cpu_only=True), probe, cores=cores)
    p = plan(spec, target, pins or Pins(n_ctx=4096, n_threads=1, n_threads_batch=1))
    return SpeedModel(spec, p.settings, target, p.memory)


def test_decoding_reads_every_matrix_at_its_measured_rate(q8_llama: ModelSpec) -> None:
    slow, fast = _model(q8_llama, uniform_probe(5.0)), _model(q8_llama, uniform_probe(10.0))
    # Node cost is zero in these probes, attention cost is the same: the weights' time halves.
    table = weight_table(q8_llama)
    assert table.output is not None
    weights = sum(m.bytes_active for layer in table.layers for m in layer.matrices) + table.output.bytes_active
    assert slow.decode_seconds(1) - fast.decode_seconds(1) == pytest.approx(weights / 10e9, rel=1e-6)


def test_each_mat_vec_of_a_decode_step_pays_its_cost_as_a_node_of_a_chain(q8_llama: ModelSpec) -> None:
    """Small matrices in a chain ran below one large matrix's rate (2 threads here: 1.4x their
    bytes' time): the probe's cost per product is charged once per matrix, output included."""
    plain = uniform_probe(10.0, threads=(1, 2))
    kernels = tuple(replace(k, matvec_overhead_us=(RateAt(1, 1.0), RateAt(2, 5.0))) for k in plain.kernels)
    chained = replace(plain, kernels=kernels)
    table = weight_table(q8_llama)
    n_mats = sum(len(layer.matrices) for layer in table.layers) + 1
    for threads, us in ((1, 1.0), (2, 5.0)):
        pins = Pins(n_ctx=4096, n_threads=threads, n_threads_batch=threads)
        extra = _model(q8_llama, chained, pins, cores=2).decode_seconds(1) - _model(
            q8_llama, plain, pins, cores=2
        ).decode_seconds(1)
        assert extra == pytest.approx(n_mats * us * 1e-6, rel=1e-6)
    # A record from before the probe timed it prices the products by their bytes alone.
    assert CpuRates(plain, 2).matvec_overhead_s("q8_0", 2) == 0.0
    assert CpuRates(chained, 2).matvec_overhead_s("q8_0", 2) == pytest.approx(5e-6)


def test_decoding_slows_as_the_context_fills_at_the_cache_type_s_attention_rate(q8_llama: ModelSpec) -> None:
    probe = uniform_probe(attention_gflops={"f16": 20.0, "q8_0": 5.0})
    f16 = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=1, n_threads_batch=1, type_k="f16", type_v="f16"))
    q8 = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=1, n_threads_batch=1, type_k="q8_0", type_v="q8_0"))
    assert f16.decode_seconds(4000) > f16.decode_seconds(300)
    grow_f16 = f16.decode_seconds(4000) - f16.decode_seconds(256)
    grow_q8 = q8.decode_seconds(4000) - q8.decode_seconds(256)
    assert grow_q8 == pytest.approx(4 * grow_f16, rel=1e-6)  # a quarter of the rate, four times the time
    # Only the cells in use cost (the kernel skips the masked rest of llama.cpp's padded view).
    assert f16.decode_seconds(2000) - f16.decode_seconds(1000) == pytest.approx(grow_f16 * 1000 / 3744, rel=1e-6)


def test_query_heads_that_share_a_kv_head_stream_it_from_ram_once(tmp_path: Path) -> None:
    from vrampilot.speed import AttentionRates, RateAt

    # f16 attention at 20 GFLOP/s in the CPU's caches, 10 from RAM: streaming doubles a cell's cost.
    probe = replace(
        uniform_probe(),
        attention=tuple(
            AttentionRates("f16", d, (RateAt(1, 20.0),), (RateAt(1, 20.0),), (RateAt(1, 10.0),)) for d in (64, 256)
        ),
    )
    pins = Pins(n_ctx=4096, n_threads=1, n_threads_batch=1, type_k="f16", type_v="f16", flash_attn=True)
    growth = {}
    for n_kv in (4, 1):
        spec = load_model_spec(
            write_model(tmp_path / f"kv{n_kv}.gguf", "llama", n_layer=2, n_embd=256, n_head=4, n_head_kv=n_kv, n_ff=512)
        )
        m = _model(spec, probe, pins)
        growth[n_kv] = m.decode_seconds(4000) - m.decode_seconds(256)
    # Per cell: 4 query heads' arithmetic, plus one RAM read per KV head (as costly as a head's
    # arithmetic here): 4 + 4 with a KV head each, 4 + 1 with one KV head for all four.
    assert growth[1] / growth[4] == pytest.approx(5 / 8, rel=1e-6)


def test_sliding_window_layers_stop_growing_at_their_window(tmp_path: Path) -> None:
    swa = load_model_spec(write_model(tmp_path / "g.gguf", "gemma3", n_layer=6, sliding_window=512))
    full = load_model_spec(write_model(tmp_path / "g0.gguf", "gemma3", n_layer=6, sliding_window=0))
    m_swa, m_full = _model(swa, uniform_probe()), _model(full, uniform_probe())
    grow_swa = m_swa.decode_seconds(4000) - m_swa.decode_seconds(1)
    grow_full = m_full.decode_seconds(4000) - m_full.decode_seconds(1)
    assert 0 < grow_swa < grow_full / 2  # 1 layer in 6 sees the whole context
    # Past the window only that layer grows: a query sees the 512-token window, not the window
    # and the ubatch the sliding cache holds (the kernel skips the masked cells).
    late_swa = m_swa.decode_seconds(1000) - m_swa.decode_seconds(600)
    late_full = m_full.decode_seconds(1000) - m_full.decode_seconds(600)
    assert late_swa == pytest.approx(late_full / 6, rel=1e-6)


def test_a_sliding_window_goes_at_the_pace_of_the_thread_whose_slice_holds_it(tmp_path: Path) -> None:
    from vrampilot.planner.speed_model.cpu_speed import decode_attention_imbalance as uneven

    # Gemma 3's sliding cache is a ring of 1024 cells (the 512-token window and a ubatch), split
    # over 2 threads by halves of the view. The 1001st token's window is cells 489-1000: 23 in the
    # first half, 489 in the second.
    assert uneven(1001, 1024, 4, 2, "f16", window=512) == pytest.approx(2 * 489 / 512)
    # Past the ring's end the positions go round: the 1101st token's window is cells 589-1023 and
    # 0-76, 77 + 435.
    assert uneven(1101, 1024, 4, 2, "f16", window=512) == pytest.approx(2 * 435 / 512)
    # Until the window is full a sliding layer splits as any other; one thread waits for no other.
    assert uneven(300, 1024, 4, 2, "f16", window=512) == uneven(300, 8192, 4, 2, "f16") > 1.5
    assert uneven(1001, 1024, 4, 1, "f16", window=512) == 1.0
    # So at 2 threads the sliding layers' steps cost more at 1000 tokens than at 600, though both
    # see 512 cells (the window sits across the halves at 600), where at 1 thread only the full
    # layer grows.
    spec = load_model_spec(write_model(tmp_path / "g.gguf", "gemma3", n_layer=6, sliding_window=512))
    full = load_model_spec(write_model(tmp_path / "g0.gguf", "gemma3", n_layer=6, sliding_window=0))
    probe = uniform_probe(threads=(1, 2))
    for threads, more in ((1, False), (2, True)):
        pins = Pins(n_ctx=4096, n_threads=threads, n_threads_batch=threads, type_k="f16", type_v="f16")
        m_swa, m_full = _model(spec, probe, pins, cores=2), _model(full, probe, pins, cores=2)
        late_swa = m_swa.decode_seconds(1000) - m_swa.decode_seconds(600)
        late_full = m_full.decode_seconds(1000) - m_full.decode_seconds(600)
        assert (late_swa > 1.5 * late_full / 6) is more


def test_a_short_prompt_costs_at_least_one_pass_over_the_weights(q8_llama: ModelSpec) -> None:
    m = _model(q8_llama, uniform_probe(decode_gbps=10.0, prefill_gflops=1000.0))
    table = weight_table(q8_llama)
    layer_bytes = sum(mat.bytes_total for layer in table.layers for mat in layer.matrices)
    assert m.prefill_seconds(4) >= layer_bytes / 10e9
    # A long prompt is compute-bound: tokens/s no longer depend on streaming.
    assert m.prefill_seconds(512) / 512 < m.prefill_seconds(4) / 4


def test_experts_read_their_share_when_decoding_and_run_the_expert_kernel_for_prompts(tmp_path: Path) -> None:
    spec = load_model_spec(
        write_model(
            tmp_path / "moe.gguf",
            "qwen3moe",
            weight_type="q8_0",
            n_expert=8,
            n_expert_used=2,
            n_ff_expert=128,
            n_embd=256,
        )
    )
    table = weight_table(spec)
    experts = [m for layer in table.layers for m in layer.matrices if m.expert_share < 1]
    assert experts and all(m.bytes_active == pytest.approx(m.bytes_total / 4) for m in experts)
    same = _model(spec, uniform_probe(prefill_gflops=50.0, moe_gflops=50.0))
    slower = _model(spec, uniform_probe(prefill_gflops=50.0, moe_gflops=10.0))
    assert slower.prefill_seconds(512) > 1.5 * same.prefill_seconds(512)
    assert slower.decode_seconds(1) == same.decode_seconds(1)


def test_more_threads_use_the_rates_measured_with_them(q8_llama: ModelSpec) -> None:
    probe = uniform_probe(threads=(1, 4))  # rates x4 at 4 threads
    one = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=1, n_threads_batch=1), cores=4)
    four = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=4, n_threads_batch=4), cores=4)
    assert four.decode_seconds(1) == pytest.approx(one.decode_seconds(1) / 4)
    assert four.prefill_seconds(512) == pytest.approx(one.prefill_seconds(512) / 4)


def test_decode_attention_goes_at_the_pace_of_the_busiest_thread(q8_llama: ModelSpec) -> None:
    from vrampilot.planner.speed_model.cpu_speed import decode_attention_imbalance as uneven

    # An f16 cache split over 2 threads by cells: each takes half of the view padded to 256 cells,
    # the masked tail costs nothing, so the first thread does 640 of 1031 cells.
    assert uneven(1031, 8192, 9, 2, "f16") == pytest.approx(2 * 640 / 1031)
    assert uneven(4129, 8192, 9, 2, "f16") == pytest.approx(2 * 2176 / 4129)
    assert uneven(1280, 8192, 9, 2, "f16") == 1.0 and uneven(1031, 8192, 9, 1, "f16") == 1.0
    # A quantized cache (or a view under 512 cells) is split by query heads: 9 heads on 2 threads
    # are 5 + 4 of them, 8 heads 4 + 4.
    assert uneven(1031, 8192, 9, 2, "q8_0") == pytest.approx(10 / 9)
    assert uneven(100, 8192, 9, 2, "f16") == pytest.approx(10 / 9)
    assert uneven(1031, 8192, 8, 2, "q8_0") == 1.0
    # So at 2 threads a step costs the same all through a view of 1280 cells (1025 to 1279 in the
    # cache: the first thread's 640), then grows with the next view; at 1 thread it grows all along.
    probe = uniform_probe(threads=(1, 2))
    two = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=2, n_threads_batch=2, type_k="f16", type_v="f16"), cores=2)
    one = _model(q8_llama, probe, Pins(n_ctx=4096, n_threads=1, n_threads_batch=1, type_k="f16", type_v="f16"), cores=2)
    assert two.decode_seconds(1030) == pytest.approx(two.decode_seconds(1270), rel=1e-3)
    assert two.decode_seconds(1300) > two.decode_seconds(1270)
    assert one.decode_seconds(1270) > one.decode_seconds(1030)


def test_the_plan_says_what_is_measured_and_what_is_assumed(tmp_path: Path, embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)  # Q4_1 and Q8_0 weights
    measured = plan(
        spec,
        measured_target(TargetRequest(cpu_only=True), uniform_probe(types=("q4_0", "q8_0"))),
        Pins(n_ctx=2048),
    )
    basis = measured.reasons[-1]
    assert "measured on this machine 2026-12-01" in basis and "RAM 20.0 GB/s" in basis
    assert "q4_1 estimated from q4_0" in basis  # the nearest measured type in bits per weight
    assert "not yet corrected by a measured reply" in basis
    assumed = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=2048))
    assert "assumed rates (RAM 50 GB/s" in assumed.reasons[-1]
    assert measured.target.host_bandwidth_source == "measured 2026-12-01"
    assert assumed.target.host_bandwidth_source == "assumed"


def test_on_a_gpu_the_bandwidth_efficiency_is_said_to_be_assumed(embedded_model: Path) -> None:
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.units import GIB

    p = plan(load_model_spec(embedded_model), resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine()))
    basis = p.reasons[-1]
    assert basis.startswith("Speed basis (gpu:")
    assert "288 GB/s (assumed)" in basis and "assumed to be reached (not measured on this device" in basis


def test_predictions_follow_the_probe_not_the_assumed_constants(q8_llama: ModelSpec) -> None:
    base = plan(
        q8_llama,
        measured_target(TargetRequest(cpu_only=True), uniform_probe(10.0)),
        Pins(n_ctx=2048, n_threads=1),
    )
    fast = uniform_probe(20.0, 100.0, attention_gflops={"f16": 40.0})
    twice = plan(q8_llama, measured_target(TargetRequest(cpu_only=True), fast), Pins(n_ctx=2048, n_threads=1))
    # Every rate doubled, and these probes have no fixed costs: every time halves.
    assert twice.speed.decode_tps == pytest.approx(2 * base.speed.decode_tps)
    assert twice.speed.prefill_tps == pytest.approx(2 * base.speed.prefill_tps)
    # The alternatives use the same rates: a quantized cache is slower here, as the probe said.
    probe = uniform_probe(attention_gflops={"f16": 20.0, "q8_0": 2.0})
    p = plan(
        q8_llama,
        measured_target(TargetRequest(cpu_only=True), probe),
        Pins(n_ctx=4096, n_threads=1),
    )
    q8 = next(a for a in p.alternatives if a.label == "q8_0 KV cache")
    assert q8.speed.decode_tps_full_ctx < p.speed.decode_tps_full_ctx


def test_a_prompt_pays_each_layer_s_norms_activation_and_rope_per_token(tmp_path: Path) -> None:
    from vrampilot.speed import ElementwiseRates, RateAt

    shape = {"weight_type": "q8_0", "n_layer": 2, "n_embd": 256, "n_head": 4, "n_head_kv": 1, "n_ff": 512}
    gemma = load_model_spec(write_model(tmp_path / "g.gguf", "gemma3", head_dim=64, **shape))  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each
    llama = load_model_spec(write_model(tmp_path / "l.gguf", "llama", **shape))  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each
    g, ll = weight_table(gemma).layers[0].elementwise, weight_table(llama).layers[0].elementwise
    # Gemma 3: a gated GELU, per-head Q and K norms over all their heads, norms after attention and
    # the feed-forward; a Llama block: two norms and a gated SiLU. RoPE over the Q and K heads.
    assert ("geglu", 512) in g and ("norm", 4 * 64) in g and ("norm", 64) in g and ("rope", 5 * 64) in g
    assert sorted(ll) == [("norm", 256), ("norm", 256), ("rope", 5 * 64), ("swiglu", 512)]
    ns = {"norm": 0.5, "swiglu": 0.2, "geglu": 2.0, "rope": 1.0}
    timed = replace(uniform_probe(), elementwise=tuple(ElementwiseRates(op, (RateAt(1, v),)) for op, v in ns.items()))
    for spec in (gemma, llama):
        before, after = _model(spec, replace(timed, elementwise=None)), _model(spec, timed)
        per_token = sum(ns[op] * 1e-9 * n for layer in weight_table(spec).layers for op, n in layer.elementwise)
        assert after.prefill_seconds(1024) - before.prefill_seconds(1024) == pytest.approx(1024 * per_token)
        # A decode step's per-token work is in the tiny model's measured steps already.
        assert after.decode_seconds(100) == before.decode_seconds(100)


def test_a_row_s_mat_vec_rate_follows_its_length_between_those_measured() -> None:
    from vrampilot.planner.speed_model.cpu_speed import CpuRates
    from vrampilot.speed import KernelRates, RateAt

    def at(v: float) -> tuple[RateAt, ...]:
        return (RateAt(1, v),)

    # Rows of 512 / 1024 / 4096 at 20 / 30 / 40 GB/s (short rows slower, as Q4_1 with 2 threads).
    k = KernelRates("q4_1", "CPU", at(40.0), at(30.0), at(50.0), at(50.0), decode_shortest_gbps=at(20.0))
    rates = CpuRates(replace(uniform_probe(), kernels=(k,)), 1)
    assert rates.decode_gbps("q4_1", 1, 4096) == pytest.approx(40.0)
    assert rates.decode_gbps("q4_1", 1, 1024) == pytest.approx(30.0)
    assert rates.decode_gbps("q4_1", 1, 512) == pytest.approx(20.0)
    assert rates.decode_gbps("q4_1", 1, 724) == pytest.approx(25.0, rel=1e-3)  # halfway in log2
    assert rates.decode_gbps("q4_1", 1, 2048) == pytest.approx(35.0)
    assert rates.decode_gbps("q4_1", 1, 256) == pytest.approx(20.0)  # constant outside
    assert rates.decode_gbps("q4_1", 1, 16384) == pytest.approx(40.0)
    # A record from before rows of 512 were timed keeps the 1024-row rate below 1024.
    old = CpuRates(replace(uniform_probe(), kernels=(replace(k, decode_shortest_gbps=()),)), 1)
    assert old.decode_gbps("q4_1", 1, 576) == pytest.approx(30.0)
