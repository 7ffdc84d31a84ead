"""Mixture-of-experts placement (#39): the planner keeps every layer's attention on the GPU and the
routed experts of the fewest leading layers in RAM that fit (--n-cpu-moe), prices the experts in
RAM at the host's rate, honours the placement pins and explains the trade. Planned on sparse files
at the published dimensions of Qwen3-30B-A3B (Q4_K_M) and DeepSeek-V4-Flash (header only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.machines import cpu_machine
from testkit.real_shapes import write_real
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.errors import PlanError
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.memory.kv import DSV4_CSA_RATIO, DSV4_HCA_RATIO, row_bytes
from vrampilot.planner.memory.placement import experts_in_ram
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan, replan_with
from vrampilot.planner.speed_model.cpu_speed import weight_table
from vrampilot.planner.speed_model.predict import SpeedModel, kv_read_bytes, predict_speed
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.units import GIB


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    return load_model_spec(write_real("qwen3-30b-a3b", tmp_path_factory.mktemp("moe")))


@pytest.fixture(scope="module")
def flash(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    return load_model_spec(write_real("v4-flash", tmp_path_factory.mktemp("moe_v4")))


def card(gib: float, ram_gib: float = 64) -> Target:
    return resolve_target(TargetRequest(vram_bytes=int(gib * GIB)), cpu_machine(ram_gib=ram_gib, cores=8))


def test_an_8gb_card_keeps_every_attention_on_the_gpu_and_the_fewest_experts_in_ram(qwen: ModelSpec) -> None:
    target = card(8)
    p = plan(qwen, target)
    s = p.settings
    assert p.fits
    assert s.n_gpu_layers == qwen.n_layer + 1  # every layer's attention, norms and KV, and the output
    assert all(p.memory.gpu_layers) and p.memory.output_on_gpu
    assert 0 < s.n_cpu_moe < qwen.n_layer
    assert experts_in_ram(qwen, s, p.memory.gpu_layers) == (s.n_cpu_moe, qwen.n_layer)
    # The experts in RAM are in the host's memory, not the card's.
    assert p.memory.host.weights_bytes >= sum(qwen.layer_expert_bytes[: s.n_cpu_moe])
    # As few as fit: one layer's experts fewer passes the card.
    fewer = memory_breakdown(qwen, s.with_(n_cpu_moe=s.n_cpu_moe - 1), p.target, p.graph)
    assert fewer.device.total_bytes > p.target.device_budget_bytes
    assert p.memory.device.total_bytes <= p.target.device_budget_bytes
    # The CPU runs experts: it gets every physical core, not the two a full offload keeps.
    assert s.n_threads == target.cpu_physical_cores
    text = " ".join(p.reasons)
    assert f"Experts of {s.n_cpu_moe} of {qwen.n_layer} layers in RAM" in text
    assert "would decode at" in text  # the whole-layer split it was weighed against


def test_larger_cards_keep_fewer_experts_in_ram_and_decode_faster(qwen: ModelSpec) -> None:
    plans = [plan(qwen, card(gib), alternatives=False) for gib in (8, 12, 16, 24)]
    assert all(p.fits for p in plans)
    counts = [p.settings.n_cpu_moe for p in plans]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert counts[-1] == 0  # 24 GB holds the whole Q4_K_M file
    speeds = [p.speed.decode_tps for p in plans]
    assert speeds == sorted(speeds) and speeds[0] < speeds[-1]


def test_experts_in_ram_are_read_at_the_host_and_only_the_routed_share(qwen: ModelSpec) -> None:
    target = card(8)
    base = plan(qwen, target, alternatives=False).settings
    share = qwen.n_expert_used / qwen.n_expert
    previous = None
    for n in (0, 12, 24, 48):
        s = base.with_(n_cpu_moe=n)
        mem = memory_breakdown(qwen, s, target)
        sp = predict_speed(qwen, s, target, mem)
        # One token reads 8 of 128 experts of each layer whose experts are in RAM, and nothing else there.
        assert sp.host_bytes_per_token == pytest.approx(share * sum(qwen.layer_expert_bytes[:n]), rel=1e-6, abs=8)
        if previous is not None:
            assert sp.decode_tps < previous  # RAM is slower than the card
        previous = sp.decode_tps


def test_prefill_copies_only_the_experts_a_ubatch_uses(qwen: ModelSpec) -> None:
    target = card(8)
    s = plan(qwen, target, alternatives=False).settings.with_(n_cpu_moe=10)
    model = SpeedModel(qwen, s, target, memory_breakdown(qwen, s, target))
    in_ram = sum(qwen.layer_expert_bytes[:10])
    share = qwen.n_expert_used / qwen.n_expert
    assert model.host_copy_bytes(1) == pytest.approx(share * in_ram, rel=1e-6)
    assert model.host_copy_bytes(1) < model.host_copy_bytes(16) < model.host_copy_bytes(512) <= in_ram
    assert model.host_copy_bytes(512) == pytest.approx(in_ram, rel=1e-3)  # every expert gets a token


def test_a_dense_model_still_gives_up_whole_layers(tmp_path: Path) -> None:
    spec = load_model_spec(write_real("llama-405b", tmp_path))
    p = plan(spec, card(24, ram_gib=1024), alternatives=False)
    assert p.settings.n_cpu_moe == 0 and 0 < p.settings.n_gpu_layers < spec.n_layer
    with pytest.raises(PlanError, match="no routed experts"):
        plan(spec, card(24, ram_gib=1024), Pins(n_cpu_moe=2))


def test_the_alternatives_show_each_placement_with_its_speed(qwen: ModelSpec) -> None:
    p = plan(qwen, card(8))
    n = p.settings.n_cpu_moe
    by_label = {a.label: a for a in p.alternatives}
    more = [a for a in p.alternatives if a.settings.n_cpu_moe > n and a.settings.n_gpu_layers == qwen.n_layer + 1]
    fewer = by_label[f"experts of {n - 1} of {qwen.n_layer} layers in RAM"]
    whole = [a for a in p.alternatives if a.label.startswith("whole layers instead")]
    assert more and more[0].fits and more[0].speed.decode_tps < p.speed.decode_tps
    assert not fewer.fits and fewer.speed.decode_tps > p.speed.decode_tps
    assert len(whole) == 1 and whole[0].fits and whole[0].settings.n_gpu_layers <= qwen.n_layer
    # Chosen because faster than splitting whole layers.
    assert whole[0].speed.decode_tps < p.speed.decode_tps
    # The placement alternatives lead the list.
    assert p.alternatives[0] is more[0]


def test_placement_pins(qwen: ModelSpec) -> None:
    target = card(8)
    auto = plan(qwen, target, alternatives=False)
    pinned = plan(qwen, target, Pins(n_cpu_moe=auto.settings.n_cpu_moe + 4), alternatives=False)
    assert pinned.fits and pinned.settings.n_cpu_moe == auto.settings.n_cpu_moe + 4
    assert "pinned by you" in " ".join(pinned.reasons)
    every = plan(qwen, target, Pins(cpu_experts=True), alternatives=False)
    assert every.settings.n_cpu_moe == qwen.n_layer and every.settings.n_gpu_layers == qwen.n_layer + 1
    # No experts in RAM cannot fit 8 GB: one line that says so and what would.
    with pytest.raises(PlanError, match=r"no experts in RAM.*Without it: every layer's attention on the GPU"):
        plan(qwen, target, Pins(cpu_experts=False))
    with pytest.raises(PlanError, match="contradicts"):
        plan(qwen, target, Pins(cpu_experts=False, n_cpu_moe=3))
    with pytest.raises(PlanError, match=r"n_cpu_moe 49 is outside 0\.\.48"):
        plan(qwen, target, Pins(n_cpu_moe=49))
    # A larger card has room for the whole model: the pin then holds.
    assert plan(qwen, card(24), Pins(cpu_experts=False), alternatives=False).settings.n_cpu_moe == 0


def test_min_ctx_and_keep_free(qwen: ModelSpec) -> None:
    target = card(12)
    auto = plan(qwen, target, alternatives=False)
    longer = plan(qwen, target, Pins(min_ctx=65536), alternatives=False)
    assert longer.fits and longer.settings.n_ctx >= 65536
    assert longer.settings.n_cpu_moe >= auto.settings.n_cpu_moe  # the longer cache takes the experts' room
    keep = 3 * GIB
    roomy = plan(qwen, target, Pins(keep_free_bytes=keep), alternatives=False)
    assert roomy.fits and roomy.memory.device.total_bytes - roomy.memory.device.margin_bytes <= 9 * GIB
    assert roomy.settings.n_cpu_moe > auto.settings.n_cpu_moe
    # Another pin later plans for the machine as asked, not for the margin the pin made.
    back = replan_with(roomy, keep_free_bytes=None)
    assert back.settings.n_cpu_moe == auto.settings.n_cpu_moe
    # 4M tokens of cache fit neither the card nor the 64 GB of RAM.
    with pytest.raises(PlanError, match="no plan fits with at least 4096K context"):
        plan(qwen, target, Pins(min_ctx=4194304))


def test_deepseek_v4_flash_on_24gb_keeps_experts_in_ram(flash: ModelSpec) -> None:
    for ram in (128, 256):
        p = plan(flash, card(24, ram_gib=ram), alternatives=False)
        s = p.settings
        assert p.fits, p.reasons
        assert s.n_gpu_layers == flash.n_layer + 1 and 0 < s.n_cpu_moe <= flash.n_layer
        assert s.n_ctx >= 32768 and s.type_k in ("f16", "q8_0") and s.type_k == s.type_v
        assert p.memory.host.total_bytes <= p.target.host_ram_bytes


def test_deepseek_v4_decode_reads_the_compressed_attention_not_the_whole_cache(flash: ModelSpec) -> None:
    target = card(24, ram_gib=256)
    s = plan(flash, target, alternatives=False).settings.with_(n_ctx=1048576)
    mem = memory_breakdown(flash, s, target)
    n1, n2 = 524288, 1048576
    r1 = kv_read_bytes(mem, flash, n1, on_gpu=True)
    r2 = kv_read_bytes(mem, flash, n2, on_gpu=True)
    # The window and the CSA top-k are capped: what grows is each HCA layer's compressed entries
    # and each CSA layer's indexer keys, which the indexer scores in full.
    csa = sum(1 for r in flash.compress_ratios if r == DSV4_CSA_RATIO)
    hca = sum(1 for r in flash.compress_ratios if r == DSV4_HCA_RATIO)
    k_row = row_bytes(s.type_k, flash.head_dim_k * flash.n_head_kv[0])
    i_row = row_bytes(s.type_k, flash.indexer_head_size)
    grows = (n2 - n1) // DSV4_HCA_RATIO * k_row * hca + (n2 - n1) // DSV4_CSA_RATIO * i_row * csa
    assert r2 - r1 == pytest.approx(grows, rel=1e-6)
    assert r2 < 0.5 * mem.kv.total_bytes  # not a GQA-style read of the whole cache
    # The indexer's work and the cache reads slow long contexts down.
    sp = predict_speed(flash, s, target, mem)
    assert sp.decode_tps_full_ctx < sp.decode_tps
    # A prompt's attention too sees the window and the kept entries (CUDA gathers the top-k), not
    # every cell: a ubatch 1M tokens deep costs a few times one at the start, not a thousand.
    model = SpeedModel(flash, s, target, mem)
    first, deep = model.prefill_seconds(2048, 0), model.prefill_seconds(2048, n2 - 2048)
    assert first < deep < 3 * first


def test_weight_table_marks_every_expert_tensor(qwen: ModelSpec) -> None:
    """The speed model's routed matrices are the tensors --n-cpu-moe moves (one list of both)."""
    table = weight_table(qwen)
    for il in (0, 47):
        routed = sum(m.bytes_total for m in table.layers[il].matrices if m.expert_share < 1.0)
        assert routed == qwen.layer_expert_bytes[il]


def test_two_cards_and_rpc_hosts_place_experts_too(qwen: ModelSpec) -> None:
    from dataclasses import replace

    from tests.planner.test_devices import two_gpu_machine
    from vrampilot.export import llama_server_argv
    from vrampilot.hardware import RpcDeviceMemory, RpcHost
    from vrampilot.planner.target import TargetRequest, resolve_target

    machine = replace(two_gpu_machine(), ram_total_bytes=64 * GIB, ram_available_bytes=64 * GIB)
    # 11.5 + 7.5 GB free: the 17 GiB of weights and a 32K cache do not fit, so experts go to RAM.
    two = resolve_target(TargetRequest(), machine)
    hosts = [RpcHost("192.168.1.20:50052", "7.0.0", (RpcDeviceMemory(0, 6 * GIB, 8 * GIB),), rtt_ms=0.4)]
    rpc = resolve_target(
        TargetRequest(rpc_hosts=tuple(hosts), rpc_budget_bytes={"192.168.1.20:50052": 6 * GIB}), cpu_machine(ram_gib=64)
    )
    for target in (two, rpc):
        p = plan(qwen, target, alternatives=False)
        s = p.settings
        assert p.fits, p.reasons
        assert s.n_gpu_layers == qwen.n_layer + 1 and 0 < s.n_cpu_moe < qwen.n_layer
        for c, gpu in zip(p.memory.per_device, target.gpus, strict=True):
            assert c.total_bytes <= gpu.memory_budget_bytes
            if target is two:
                # The split weighs the light leading layers as light: neither card keeps room for
                # another layer's experts (a split by layer count left the second 0.55 GiB).
                assert gpu.memory_budget_bytes - c.total_bytes < max(qwen.layer_expert_bytes)
        argv = llama_server_argv(qwen.path, s)
        assert argv[argv.index("--n-cpu-moe") + 1] == str(s.n_cpu_moe)
    assert (
        plan(qwen, two, alternatives=False).settings.n_cpu_moe < plan(qwen, rpc, alternatives=False).settings.n_cpu_moe
    )


def test_back_off_and_spill_advice_move_experts_before_context_or_layers(qwen: ModelSpec) -> None:
    from vrampilot.meters.spill import suggest_replan
    from vrampilot.planner.search.alternatives import backoff_cost, is_backoff

    p = plan(qwen, card(8))
    # After a failed allocation, more experts in RAM is a back-off (it needs less VRAM and gives
    # up nothing else), and it costs less than half the context.
    more = next(a for a in p.alternatives if a.settings == p.settings.with_(n_cpu_moe=a.settings.n_cpu_moe))
    assert more.settings.n_cpu_moe > p.settings.n_cpu_moe and is_backoff(p, more)
    half = next(a for a in p.alternatives if a.settings == p.settings.with_(n_ctx=p.settings.n_ctx // 2))
    assert is_backoff(p, half) and backoff_cost(p, more) < backoff_cost(p, half)
    # Spilling 300 MiB (plus the advice's headroom) on a q8_0 plan: a few more layers' experts in
    # RAM free it (0.36 GiB each), before any context is given up.
    advice = suggest_replan(p, 300 * 2**20)
    assert advice is not None and advice.label.startswith("experts of ")
    assert p.settings.n_cpu_moe < (advice.pins.n_cpu_moe or 0) <= p.settings.n_cpu_moe + 4
    assert advice.pins.n_ctx == p.settings.n_ctx and advice.frees_bytes >= 300 * 2**20
    assert plan(qwen, card(8), advice.pins, alternatives=False).settings.n_cpu_moe == advice.pins.n_cpu_moe


def test_tensors_kept_in_ram_by_a_users_pattern_are_read_there(qwen: ModelSpec) -> None:
    """-ot patterns that keep the same experts in RAM as --n-cpu-moe cost the same bytes and the
    same speed: the speed model counts what is kept in RAM by name, whichever way it was asked."""
    spec, target = qwen, card(24)
    base = plan(spec, target, alternatives=False).settings
    by_count = base.with_(n_cpu_moe=10)
    by_pattern = base.with_(n_cpu_moe=0, cpu_tensor_patterns=(r"blk\.[0-9]\.ffn_(up|down|gate)_exps",))
    mem_count, mem_pattern = memory_breakdown(spec, by_count, target), memory_breakdown(spec, by_pattern, target)
    assert mem_count.device.weights_bytes == mem_pattern.device.weights_bytes
    assert mem_count.host.weights_bytes == mem_pattern.host.weights_bytes
    fast = predict_speed(spec, base, target, memory_breakdown(spec, base, target)).decode_tps
    count_tps = predict_speed(spec, by_count, target, mem_count).decode_tps
    pattern_tps = predict_speed(spec, by_pattern, target, mem_pattern).decode_tps
    assert count_tps == pytest.approx(pattern_tps) and pattern_tps < fast
