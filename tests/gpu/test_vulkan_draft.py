"""A draft model on a real Vulkan device (lavapipe): llama-server's buffer lines for the draft it
loads, per device, against the plan's draft bytes; with the draft on the device and on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.conftest import run_child
from vrampilot.planner.measure import matches_print

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("where", ["gpu", "cpu"])
def test_the_drafts_bytes_per_device_are_llama_servers(embedded_model: Path, where: str) -> None:
    out = run_child("draft_child.py", str(embedded_model), str(embedded_model), where)
    assert "error" not in out, out
    dev = str(out["device"])
    plan_t, plan_d = out["target"], out["draft"]
    served_t, served_d = out["served_target"], out["served_draft"]
    assert isinstance(plan_t, dict) and isinstance(plan_d, dict)
    assert isinstance(served_t, dict) and isinstance(served_d, dict)
    # The target: everything offloaded, as planned.
    assert matches_print(plan_t["device"]["weights"], served_t["model"][dev])
    assert matches_print(plan_t["device"]["kv"], served_t["kv"][dev])
    assert matches_print(plan_t["device"]["compute"], served_t["compute"][dev])
    if where == "gpu":
        # The draft beside it on the same device: its weights, its own cache, its own compute.
        by_device = out["draft_by_device"]
        assert isinstance(by_device, dict) and by_device[dev] > 0
        assert matches_print(plan_d["device"]["weights"], served_d["model"][dev])
        assert matches_print(plan_d["device"]["kv"], served_d["kv"][dev])
        assert matches_print(plan_d["device"]["compute"], served_d["compute"][dev])
        assert served_d["kv"].get("CPU", 0) == 0
    else:
        # -devd none: nothing of the draft on the device.
        assert dev not in served_d["model"] and dev not in served_d["kv"] and dev not in served_d["compute"]
        assert plan_d["device"] == {}
        assert matches_print(plan_d["host"]["kv"], served_d["kv"]["CPU"])
        assert matches_print(plan_d["host"]["compute"], sum(served_d["compute"].values()))
    timings = out["timings"]
    assert isinstance(timings, dict) and timings["draft_n"] > 0
    assert timings["draft_n_accepted"] == timings["draft_n"]  # the same model, greedy: always right
