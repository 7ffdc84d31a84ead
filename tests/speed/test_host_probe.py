"""The speed probe: llama.cpp's own kernels timed on this CPU, kept per machine, measured again on
new hardware. Figures are checked for sense (positive, consistent units), never for a speed: the
machine running the tests may be busy."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tests.busy import busy_loops
from vrampilot.hardware import detect_machine
from vrampilot.speed.codec import decode, encode
from vrampilot.speed.cpu_load import BUSY_SHARE
from vrampilot.speed.host_probe import (
    ProbeCancelled,
    last_level_cache_bytes,
    measure_host,
    measure_kernels,
    missing_kernels,
    probe_outdated,
    probe_threads,
    stream_bytes,
)
from vrampilot.speed.measured import (
    PROBE_PACE_READINGS,
    HostProbe,
    MachineSpeed,
    PaceReading,
    RateAt,
    SpeedFactors,
)
from vrampilot.speed.service import detect_measured_machine
from vrampilot.speed.store import (
    FILE_NAME,
    add_kernels,
    load_machine_speed,
    machine_fingerprint,
    save_probe,
    update_machine_speed,
)


def test_probe_measures_every_kind_of_kernel(host_probe: HostProbe) -> None:
    threads = probe_threads(detect_machine().cpu.physical_cores)
    assert {r.threads for r in host_probe.ram_read_gbps} == set(threads)
    assert all(r.value > 0 for r in host_probe.ram_read_gbps)
    assert [(x.n_layer, x.n_vocab) for x in host_probe.steps] == [(2, 256), (12, 256), (2, 32768)]
    assert all(
        {r.threads for r in x.step_us} == set(threads) and all(r.value > 0 for r in x.step_us) for x in host_probe.steps
    )
    fixed = host_probe.fixed_costs(threads[-1])
    assert fixed.step_s >= 0 and fixed.layer_s >= 0 and fixed.vocab_entry_s >= 0
    assert {k.type_name for k in host_probe.kernels} == {"q4_0", "q4_1", "q8_0", "f16"}
    for k in host_probe.kernels:
        for rates in (
            k.decode_gbps,
            k.decode_short_gbps,
            k.decode_shortest_gbps,
            k.prefill_gflops,
            k.prefill_moe_gflops,
        ):
            assert {r.threads for r in rates} == set(threads)
            assert all(r.value > 0 for r in rates)
        # Each product's cost in a chain beyond its bytes: measured, never negative.
        assert {r.threads for r in k.matvec_overhead_us} == set(threads)
        assert all(r.value >= 0 for r in k.matvec_overhead_us)
        assert k.buffer in ("CPU", "CPU_REPACK")
    kinds = {(a.kv_type, a.head_dim) for a in host_probe.attention}
    assert kinds == {("f16", 64), ("f16", 256), ("q8_0", 64), ("q8_0", 256)}
    assert 0.0 <= host_probe.others_cpu_share <= 1.0
    assert host_probe.cpu_variant == detect_machine().llama.cpu_variant
    # The mat-vecs stream a matrix larger than the last-level cache, as a model's weights are; their
    # rates and the RAM read are in the same unit. Both are timings taken seconds apart on a machine
    # that may be busy (a CI run read RAM at 16.8 GB/s and a Q4_0 mat-vec at 58 between them), so the
    # bound only catches a unit slip (a thousandfold), not a speed.
    llc = last_level_cache_bytes()
    assert llc is None or stream_bytes() > llc
    assert max(r.value for k in host_probe.kernels for r in k.decode_gbps) < 30 * host_probe.ram_peak_gbps
    # The elementwise steps a prompt's tokens take, at each thread count.
    assert host_probe.elementwise is not None
    assert [e.op for e in host_probe.elementwise] == ["norm", "swiglu", "geglu", "rope"]
    assert all(
        {r.threads for r in e.ns_per_element} == set(threads) and all(r.value > 0 for r in e.ns_per_element)
        for e in host_probe.elementwise
    )
    # The pace gauge's first reading, at each thread count (speed/pace.py), kept in the record.
    assert {r.threads for r in host_probe.pace_ms} == set(threads) and all(r.value > 0 for r in host_probe.pace_ms)
    assert decode(HostProbe, json.loads(json.dumps(encode(host_probe)))) == host_probe


def test_the_built_in_model_is_read_before_and_after_the_second_kernel_pass(
    host_probe_steps: tuple[HostProbe, list[str]], embedded_model: Path
) -> None:
    # Two readings of the built-in model's run some seconds apart, the kernels' second pass between
    # them: one slow moment weighs half (speed/reference_run.py, READINGS).
    from vrampilot.speed.reference_run import PREFILL_UBATCHES, ReferenceSession

    probe, steps = host_probe_steps
    first, again = steps.index("the built-in model"), steps.index("the built-in model (again)")
    assert any("(pass 2 of 2)" in s for s in steps[first:again]) and not any("pass 2" in s for s in steps[:first])
    assert steps.index("pace gauge") > again
    ref = probe.reference
    threads = probe_threads(detect_machine().cpu.physical_cores)
    assert ref is not None and ref.model_name == embedded_model.name
    # Steps at two depths per thread count; the prompt's ubatches at the most threads, its first at
    # each smaller count.
    assert sorted((d.threads, d.depth > 1000) for d in ref.decode) == sorted(
        (t, deep) for t in threads for deep in (False, True)
    )
    assert [(p.threads, p.n_past) for p in ref.prefill] == [(t, 0) for t in threads[:-1]] + [
        (threads[-1], i * ref.n_ubatch) for i in range(PREFILL_UBATCHES)
    ]
    assert all(d.step_s > 0 for d in ref.decode) and all(p.seconds > 0 for p in ref.prefill)
    # A session not yet read has no run to give (a probe cancelled or failed before its first
    # reading keeps no reference, not an empty one).
    with ReferenceSession(embedded_model, threads) as session, pytest.raises(ValueError):
        session.result()


def test_the_pace_gauge_reads_llama_cpp_s_kernels_after_a_reply(embedded_model: Path, host_probe: HostProbe) -> None:
    from testkit.machines import measured_machine
    from vrampilot.gguf import load_model_spec
    from vrampilot.planner.calibration import reply_pace_ms
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.speed.pace import measure_pace_ms

    pace = measure_pace_ms(1)
    assert pace is not None and pace > 0
    # A CPU plan reads it at its own thread count.
    found = measured_machine(host_probe)
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed),
        Pins(n_ctx=1024, n_threads=1, n_threads_batch=1),
    )
    again = reply_pace_ms(p)
    assert again is not None and again > 0
    # A plan generating on a GPU: the CPU's pace is not what its replies measure.
    gpu = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(vram_bytes=8 << 30), found.machine, found.speed),
        Pins(n_ctx=1024),
    )
    assert gpu.settings.n_gpu_layers > 0 and reply_pace_ms(gpu) is None


def test_probe_stops_when_cancelled() -> None:
    cancel = threading.Event()
    seen: list[str] = []

    def progress(step: str) -> None:
        seen.append(step)
        if "kernels" in step:
            cancel.set()

    with pytest.raises(ProbeCancelled):
        measure_host(1, weight_types=("q8_0", "f16"), kv_types=("f16",), cancel=cancel, progress=progress)
    assert seen[-1].startswith("q8_0 kernels") and not any(x.startswith("f16 kernels") for x in seen)


def test_each_figure_keeps_the_faster_of_two_passes() -> None:
    # The probe times kernels twice, seconds apart: a slow moment in one pass counts once.
    from vrampilot.speed.host_probe import faster_attention, faster_kernels
    from vrampilot.speed.measured import AttentionRates, KernelRates, RateAt

    def rates(*values: float) -> tuple[RateAt, ...]:
        return tuple(RateAt(t, v) for t, v in zip((1, 2), values, strict=True))

    first = [
        KernelRates("q4_1", "CPU", rates(5, 8), rates(6, 8), rates(25, 36), rates(20, 30)),
        KernelRates("f16", "CPU", rates(20, 40), rates(20, 40), rates(60, 100)),
    ]
    second = [KernelRates("q4_1", "CPU", rates(4, 9), rates(6, 7), rates(24, 59), rates(21, 29))]
    first[0] = replace(first[0], matvec_overhead_us=rates(1.0, 5.0))
    second[0] = replace(second[0], matvec_overhead_us=rates(1.5, 4.0))
    q41, f16 = faster_kernels(first, second)
    # Microseconds per product: the faster pass is the smaller figure.
    assert q41 == KernelRates(
        "q4_1", "CPU", rates(5, 9), rates(6, 8), rates(25, 59), rates(21, 30), matvec_overhead_us=rates(1.0, 4.0)
    )
    assert f16 == first[1]  # measured once: as it was
    a = [AttentionRates("f16", 64, rates(8, 16), rates(30, 60), rates(4, 8))]
    b = [
        AttentionRates("f16", 64, rates(10, 12), rates(31, 50), rates(3, 9)),
        AttentionRates("q8_0", 64, rates(1, 2), rates(1, 2)),
    ]
    assert faster_attention(a, b) == [AttentionRates("f16", 64, rates(10, 16), rates(31, 60), rates(4, 9))]
    # Elementwise steps: nanoseconds, so the faster pass is the smaller figure.
    from vrampilot.speed.host_probe import faster_elementwise
    from vrampilot.speed.measured import ElementwiseRates

    e1 = [ElementwiseRates("geglu", rates(2.0, 1.1)), ElementwiseRates("norm", rates(0.6, 0.3))]
    assert faster_elementwise(e1, [ElementwiseRates("geglu", rates(1.9, 1.3))]) == [
        ElementwiseRates("geglu", rates(1.9, 1.1)),
        e1[1],
    ]


def test_a_model_s_missing_weight_types_are_measured_and_added(host_probe: HostProbe, tmp_path: Path) -> None:
    assert missing_kernels(host_probe, ("Q8_0", "q4_k", "q6_k", "type99")) == ["q4_k", "q6_k"]
    save_probe("fp", host_probe, tmp_path)
    added = measure_kernels(("q4_k",), 1)
    assert [k.type_name for k in added] == ["q4_k"]
    stored = add_kernels("fp", added, tmp_path)
    assert stored.probe is not None and stored.probe.kernel("q4_k") is not None
    assert stored.probe.kernel("q8_0") == host_probe.kernel("q8_0")


def test_records_are_kept_per_machine_and_new_hardware_measures_again(tmp_path: Path) -> None:
    found = detect_measured_machine()
    machine = found.machine
    fp = machine_fingerprint(machine.cpu, machine.ram_total_bytes, machine.llama, machine.gpus)
    assert found.speed is not None and fp == found.speed.fingerprint
    more_ram = machine_fingerprint(machine.cpu, machine.ram_total_bytes + 16 * 2**30, machine.llama, machine.gpus)
    other_cpu = machine_fingerprint(replace(machine.cpu, physical_cores=64), machine.ram_total_bytes, machine.llama, ())
    new_engine = machine_fingerprint(machine.cpu, machine.ram_total_bytes, replace(machine.llama, recipe_key="x"), ())
    assert len({fp, more_ram, other_cpu, new_engine}) == 4
    update_machine_speed(fp, lambda m: m.with_factors(SpeedFactors("cpu:x", (0.8,))), tmp_path)
    assert load_machine_speed(fp, tmp_path).factors_for("cpu:x").decode_ratios == (0.8,)
    assert load_machine_speed(more_ram, tmp_path) == MachineSpeed(more_ram)


def test_a_new_probe_drops_what_replies_taught_the_cpu_but_not_the_gpu(host_probe: HostProbe, tmp_path: Path) -> None:
    def learned(m: MachineSpeed) -> MachineSpeed:
        return m.with_factors(SpeedFactors("cpu:haswell", (0.7,))).with_factors(SpeedFactors("gpu:RTX", (0.9,)))

    update_machine_speed("fp", lambda m: learned(m).with_pace(2, 1.9), tmp_path)
    after = save_probe("fp", host_probe, tmp_path)
    assert [f.backend for f in after.factors] == ["gpu:RTX"]
    assert after.probe == host_probe
    # The pace gauge's readings start again from the new probe's (MachineSpeed.probe_read_slow
    # judges a probe by replies after it).
    assert after.paces == ()


def test_a_damaged_record_costs_a_measurement_not_a_start(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json", encoding="utf-8")
    assert load_machine_speed("fp", tmp_path) == MachineSpeed("fp")
    (tmp_path / FILE_NAME).write_text(
        json.dumps({"version": 1, "machines": {"fp": {"fingerprint": "fp", "probe": {"x": 1}}}})
    )
    assert load_machine_speed("fp", tmp_path) == MachineSpeed("fp")
    update_machine_speed("fp", lambda m: m.with_factors(SpeedFactors("cpu:x", (0.8,))), tmp_path)
    assert load_machine_speed("fp", tmp_path).factors_for("cpu:x").decode_ratios == (0.8,)


@pytest.mark.slow
def test_a_probe_beside_busy_programs_says_so_and_keeps_the_quiet_figures(
    host_probe: HostProbe, tmp_path: Path
) -> None:
    """Two CPU-bound programs beside the probe (a desktop where something compiles): the probe says
    it measured while busy, its figures stand where there is nothing better (measuring again at
    every start would never end there), and they do not replace figures taken at a quiet moment."""
    quiet = replace(host_probe, others_cpu_share=0.0, app_busy=False)
    assert not probe_outdated(quiet)
    save_probe("fp", quiet, tmp_path)
    with busy_loops(2, limit_s=300):
        taken = measure_host(1, weight_types=("q8_0",), kv_types=("f16",), reference=False)
    assert taken.busy and taken.others_cpu_share > BUSY_SHARE, taken.others_cpu_share
    assert taken.busy_note().startswith("measured while busy (other programs used ")
    kept = save_probe("fp", taken, tmp_path)
    assert kept.probe is not None and kept.probe.measured_at == quiet.measured_at
    assert kept.probe.kernel("q4_0") == quiet.kernel("q4_0")
    # Unless replies showed the quiet one read a slow moment: the app measures again then, and
    # throwing each busy result away would measure at every start.
    readings = tuple(PaceReading(1, 3.0) for _ in range(PROBE_PACE_READINGS))
    # The ignore: m.probe is the one saved above, which a lambda cannot narrow.
    slow = update_machine_speed(
        "fp",
        lambda m: replace(
            m,
            probe=replace(m.probe, pace_ms=(RateAt(1, 4.0),)),  # type: ignore[type-var]  # see above
            paces=readings,
        ),
        tmp_path,
    )
    assert slow.probe_read_slow
    replaced = save_probe("fp", taken, tmp_path).probe
    assert replaced is not None and replaced.measured_at == taken.measured_at
    # Where nothing quieter is stored, the busy figures stand, complete or not for being busy.
    busy_complete = replace(quiet, others_cpu_share=taken.others_cpu_share)
    assert not probe_outdated(busy_complete)
    alone = save_probe("other", busy_complete, tmp_path)
    assert alone.probe is not None and alone.probe.busy
    # A quiet probe replaces a busy one.
    assert save_probe("other", quiet, tmp_path).probe == quiet


def test_the_built_in_model_s_run_stops_at_its_next_check(embedded_model: Path) -> None:
    """A reading of the built-in model takes seconds (many on a busy machine): it checks for a stop
    before each ubatch and pass, so a closing window never waits for a whole reading."""
    from vrampilot.speed.reference_run import ReferenceSession

    checks: list[int] = []

    def stop_at_the_third() -> None:
        checks.append(1)
        if len(checks) == 3:
            raise ProbeCancelled

    with ReferenceSession(embedded_model, (1,)) as session:
        with pytest.raises(ProbeCancelled):
            session.read(stop_at_the_third)
        assert session.readings == 0 and len(checks) == 3


def test_the_time_a_measurement_takes_is_said_from_the_last_one(host_probe: HostProbe) -> None:
    """doctor --measure said "a few seconds" and ran past 170 s on a busy machine: it now says the
    last measurement's own time, or under a minute at a quiet moment where none was taken."""
    from vrampilot.speed.report import probe_time_text

    assert probe_time_text(None) == "under a minute at a quiet moment, minutes while other programs run"
    slow = replace(host_probe, duration_s=171.4)
    assert probe_time_text(slow) == "the last measurement took 171 s; longer while other programs run"
