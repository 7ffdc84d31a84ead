"""Measured speed from the command line: `doctor --measure`, the plan's speed basis, and `chat`
teaching the speed model, in a data folder of the test's own (a machine nobody measured yet)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot
from vrampilot.speed.host_probe import ALL_WEIGHT_TYPES

PINS = ("--ctx", "1024", "--threads", "1", "--threads-batch", "1")


@pytest.mark.slow
def test_measure_then_plan_then_chat_teaches_the_plan(tmp_path: Path) -> None:
    env = {"VRAMPILOT_HOME": str(tmp_path)}

    # Nothing measured yet: the doctor says so, and so does the plan.
    r = vrampilot("doctor", env=env)
    assert r.returncode == 0 and "Speed: not measured on this machine yet" in r.stdout
    d = json.loads(vrampilot("plan", *PINS, "--json", env=env).stdout)
    assert d["speed"]["host_rates"] == "assumed" and d["speed"]["last_measured"] is None
    assert any(x.startswith("Speed basis (cpu:") and "assumed rates" in x for x in d["reasons"])

    # Measured: every weight type of released files, the cache types, kept for this machine.
    # About 40 s of two threads' work on a quiet 2-core machine.
    r = vrampilot("doctor", "--measure", "--json", env=env, cpu_s=1200)
    assert r.returncode == 0, r.stderr
    speed = json.loads(r.stdout)["speed"]
    probe = speed["probe"]
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
