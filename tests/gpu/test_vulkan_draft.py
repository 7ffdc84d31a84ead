"""A draft model on a real Vulkan device (lavapipe): llama-server's buffer lines for the draft it
loads, per device, against the plan's draft bytes; with the draft on the device and on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import run_child
from vrampilot.planner.dry_run.log_lines import matches_print

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("where", ["gpu", "cpu"])
def test_the_drafts_bytes_per_device_are_llama_servers(small_model: Path, where: str) -> None:
    # The GPU tests' small model (tests/gpu/conftest.py) as target and draft: the draft's buffers
    # are the subject, and lavapipe pays for every layer of every token on the CPU.
    out = run_child("draft_child.py", str(small_model), str(small_model), where)
    dev, plan_t, plan_d, served_t, served_d = _parts(out)
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


def test_mtp_drafting_on_the_device_is_llama_servers(tmp_path: Path) -> None:
    """Drafting with the model's MTP block, every layer on lavapipe: the draft context's cache on
    the device beside the model's, and its compute buffers (a dry run of the MTP context on the
    device) and output buffer, each equal to llama-server's lines for the MTP context."""
    from testkit.gguf_models import write_model

    model = write_model(tmp_path / "ds2-mtp.gguf", "deepseek2", n_layer=4, n_nextn=1, tokenizer="smollm2")
    out = run_child("draft_child.py", str(model), "mtp", "gpu")
    dev, plan_t, plan_d, served_t, served_d = _parts(out)
    assert dev in str(out["draft_device"])
    # The model's weights (the MTP block's included) and its device cache: its own and the draft's.
    assert matches_print(plan_t["device"]["weights"], served_t["model"][dev])
    assert abs(plan_t["device"]["kv"] - served_t["kv"][dev] - served_d["kv"][dev]) <= 2 * 5243
    assert matches_print(plan_t["device"]["compute"], served_t["compute"][dev])
    # The MTP context's own buffers: compute on the device and beside it on the host, output.
    host = sum(v for k, v in served_d["compute"].items() if k != dev)
    assert matches_print(plan_d["device"]["compute"], served_d["compute"][dev])
    assert matches_print(plan_d["host"]["compute"], host)
    assert matches_print(plan_d["host"]["output"], sum(served_d["output"].values()))
    assert plan_d["device"]["kv"] == plan_d["device"]["weights"] == 0  # those are the model's
    timings = out["timings"]
    assert isinstance(timings, dict) and timings["draft_n"] > 0


Parts = dict[str, Any]


def _parts(out: dict[str, Any]) -> tuple[str, Parts, Parts, Parts, Parts]:
    """The child's device, the plan's target and draft bytes, llama-server's target and draft lines."""
    assert "error" not in out, out
    parts = out["target"], out["draft"], out["served_target"], out["served_draft"]
    assert all(isinstance(p, dict) for p in parts), out
    return str(out["device"]), *parts
