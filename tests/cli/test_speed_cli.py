"""Measured speed from the command line: `doctor --measure`, the plan's speed basis, and `chat`
teaching the speed model: first in a data folder of the test's own (a machine nobody measured
yet), then in a copy of the one the run's `doctor --measure` measured in (tests/conftest.py
`measured_run`: the run measures this machine once, and this test is the one of that command)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot
from tests.speed_record import MeasuredRun
from vrampilot.speed import ALL_WEIGHT_TYPES

PINS = ("--ctx", "1024", "--threads", "1", "--threads-batch", "1")


@pytest.mark.slow
def test_measure_then_plan_then_chat_teaches_the_plan(tmp_path: Path, measured_run: MeasuredRun) -> None:
    env = {"VRAMPILOT_HOME": str(tmp_path / "unmeasured")}

    # Nothing measured yet: the doctor says so, and so does the plan.
    r = vrampilot("doctor", env=env)
    assert r.returncode == 0 and "Speed: not measured on this machine yet" in r.stdout
    d = json.loads(vrampilot("plan", *PINS, "--json", env=env).stdout)
    assert d["speed"]["host_rates"] == "assumed" and d["speed"]["last_measured"] is None
    assert any(x.startswith("Speed basis (cpu:") and "assumed rates" in x for x in d["reasons"])

    # Measured: the run's one `doctor --measure` (tests/conftest.py `measured_run`, which every
    # test reading a probe shares), in a data folder of its own, copied here to plan and chat in.
    # It said what it measures and for how long before it started, and each step as it started.
    assert measured_run.returncode == 0, measured_run.stderr
    assert measured_run.stderr.startswith("Measuring this machine (llama.cpp's kernels and the built-in model: ")
    assert measured_run.steps[0] == "RAM bandwidth" and "q6_k kernels (pass 2 of 2)" in measured_run.steps
    assert "Speed: measured " in measured_run.stdout and "the built-in model (SmolLM2" in measured_run.stdout
    home = tmp_path / "measured"
    shutil.copytree(measured_run.home, home)
    env = {"VRAMPILOT_HOME": str(home)}
    # Every weight type of released files, the cache types, kept for this machine.
    speed = json.loads(vrampilot("doctor", "--json", env=env).stdout)["speed"]
    probe = speed["probe"]
    assert probe["measured_at"] == measured_run.probe.measured_at
    assert {k["type"] for k in probe["kernels"]} <= set(ALL_WEIGHT_TYPES)
    assert {"q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "f16"} <= {k["type"] for k in probe["kernels"]}
    assert {a["kv_type"] for a in probe["attention"]} == {"f16", "q8_0", "q4_0"}
    assert speed["gpu"] == "assumed"
    # The built-in model ran for real, and what it taught is shown beside the kernels' figures: two
    # depths of steps at each thread count, the prompt's four ubatches at 2 and its first at 1.
    ref = probe["reference"]
    assert ref["model_name"].startswith("SmolLM2") and len(ref["decode"]) == 4 and len(ref["prefill"]) == 5
    graph = speed["graph_factors"]
    assert {r["threads"] for r in graph["decode_base"]} == {r["threads"] for r in probe["ram_read_gbps"]}
    assert all(0.5 <= r["value"] <= 3.0 for rates in graph.values() for r in rates)
    text = vrampilot("doctor", env=env).stdout
    assert "Speed: measured " in text and "RAM read" in text and "q4_1" in text
    assert "the built-in model (SmolLM2" in text and "graph costs beyond the kernels" in text
    assert "pace gauge" in text and {r["threads"] for r in probe["pace_ms"]} == {
        r["threads"] for r in probe["ram_read_gbps"]
    }

    d = json.loads(vrampilot("plan", *PINS, "--json", env=env).stdout)
    assert d["speed"]["host_rates"] == f"measured {probe['measured_at']}"
    basis = next(x for x in d["reasons"] if x.startswith("Speed basis"))
    assert f"measured on this machine {probe['measured_at'][:10]}" in basis
    assert "a run of the built-in model here corrects the kernels' sum by x" in basis

    # A reply: predicted and measured side by side, remembered for the next plan of this model.
    r = vrampilot(
        "chat", *PINS, "--prompt", "Say hello.", "--max-tokens", "16", "--temperature", "0", "--save", "--json", env=env
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["speed"]["predicted_decode_tps"] > 0 and out["speed"]["predicted_prefill_tps"] > 0
    assert 0.0 <= out["speed"]["others_cpu_share"] <= 1.0
    # The pace gauge was read right after it and compared with the probe's reading.
    assert out["speed"]["pace_share"] > 0
    # A reply on a busy machine is shown and remembered, but not learned from: set aside, saying why.
    aside = out["speed"]["set_aside"]
    busy = aside is not None and aside.startswith("other programs used ") and out["speed"]["others_cpu_share"] > 0.25
    assert busy or aside in (
        None,
        "too short to time",
        f"this machine ran at {out['speed']['pace_share']:.0%} of its usual pace",
    )
    # Learned into the backend's factors and into this model's own alike (the only model here).
    assert out["speed"]["learned_replies_of_model"] == out["speed"]["learned_replies"]
    d = json.loads(vrampilot("plan", *PINS, "--json", env=env).stdout)
    last = d["speed"]["last_measured"]
    assert last["model"] == Path(out["model"]).name
    assert last["decode_tps"] == pytest.approx(out["stats"]["decode_tps"], abs=0.02)
    assert "Last measured" in vrampilot("plan", *PINS, env=env).stdout
    # Without --json the line says what was predicted and measured.
    r = vrampilot("chat", *PINS, "--prompt", "Again.", "--max-tokens", "12", "--temperature", "0", env=env)
    assert r.returncode == 0 and "vrampilot: speed: predicted" in r.stderr
