"""Mixture-of-experts placement on a real Vulkan device (Mesa's lavapipe): routed experts kept in
host memory by --n-cpu-moe, the rest of their layers offloaded.

For Qwen3-MoE, a Mixtral-style llama (q4_0), gpt-oss (MXFP4 experts, attention sinks) and
DeepSeek-V2 (a shared expert, a dense first layer), at n_cpu_moe 0, 1 and every layer with full
offload and at one partial -ngl, the plan's bytes on the device and on the host are llama.cpp's
buffers: weights, KV and output at the resolution of its log (0.01 MiB), the compute buffers as
llama.cpp's dry run sizes them (the plan made exact). The same placement run by the bundled
llama-server from the exported argv, and by the in-process engine, allocates the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_model
from tests.gpu.conftest import run_child as run_json_child
from tests.planner.test_moe_placement import FIXTURES
from vrampilot.gguf import load_model_spec
from vrampilot.llamacpp import device_buffers
from vrampilot.server import ServerProcess, free_port, tool_env
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
PRINT = 0.005 * MIB + 1  # half of the last printed digit, per printed line


def run_moe_child(model: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    out = run_json_child("moe_child.py", str(model), json.dumps(cases))
    assert "error" not in out, out
    return out


def cases(n_layer: int) -> list[dict[str, Any]]:
    base = {"n_ctx": 2048, "n_ubatch": 256, "n_threads": 2, "n_threads_batch": 2}
    full = [{**base, "n_gpu_layers": n_layer + 1, "n_cpu_moe": k} for k in (1, 0, n_layer)]
    small = {**base, "n_ubatch": 16, "n_gpu_layers": n_layer + 1, "n_cpu_moe": n_layer}  # the CPU runs the experts
    return [*full, {**base, "n_gpu_layers": n_layer - 1, "n_cpu_moe": 1}, small]


def assert_exact(predicted: dict[str, int], real: dict[str, int], kv_lines: int, where: str) -> None:
    for part in ("weights", "kv", "output", "compute"):
        lines = max(kv_lines, 1) if part == "kv" else 2  # compute: the dry run's print, and the real one
        assert abs(predicted[part] - real[part]) <= lines * PRINT, (where, part, predicted, real)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_each_device_holds_what_the_placement_put_there(name: str, tmp_path: Path) -> None:
    kw = dict(FIXTURES[name])
    path = write_model(tmp_path / f"{name}.gguf", kw.pop("arch"), **kw)
    spec = load_model_spec(path)
    out = run_moe_child(path, cases(spec.n_layer))
    device = out["device"]
    host_weights = []
    for r, case in zip(out["results"], cases(spec.n_layer), strict=True):
        assert r["refused"] is None
        where = f"{name} -ngl {case['n_gpu_layers']} --n-cpu-moe {case['n_cpu_moe']}"
        exact, real = r["exact"], r["measured"]
        assert_exact(exact["devices"][0], real["devices"][0], real["kv_lines"], f"{where} {device}")
        assert_exact(exact["host"], real["host"], real["kv_lines"], f"{where} host")
        # The formula the search ranks with: the same weights; with every layer offloaded its
        # compute buffers (a fit, plus the copy of a host expert) do not count less than llama.cpp
        # reserves on the device. (A partial -ngl also copies the CPU layers' weights in for
        # prefill, which the fit does not model: there only the exact plan is held to the bytes.)
        assert exact["devices"][0]["weights"] == r["formula"]["devices"][0]["weights"]
        if case["n_gpu_layers"] > spec.n_layer:
            assert r["formula"]["devices"][0]["compute"] >= real["devices"][0]["compute"] - 2 * PRINT, (where, r)
            assert r["formula"]["host"]["compute"] >= real["host"]["compute"] - 2 * PRINT, (where, r)
        host_weights.append(real["host"]["weights"])
    # More experts in host memory, more host weights (the cases: n_cpu_moe 1, 0, all, then partial)
    assert host_weights[1] <= host_weights[0] <= host_weights[2]  # deepseek2's layer 0 has no experts
    assert host_weights[1] < host_weights[2]
    # The engine loads the first placement with the same overrides: its device buffers (model,
    # KV, compute) are the plan's device total. (Its host weights are mapped from the file.)
    first = out["results"][0]["exact"]["devices"][0]
    planned = first["weights"] + first["kv"] + first["compute"]
    assert abs(out["engine"][device] - planned) <= 4 * PRINT, (out["engine"], first)


def test_llama_server_runs_the_exported_placement_as_planned(tmp_path: Path) -> None:
    path = write_model(tmp_path / "qwen3moe.gguf", "qwen3moe")
    n_layer = load_model_spec(path).n_layer
    out = run_moe_child(path, cases(n_layer)[:1])  # every layer offloaded, layer 0's experts on the CPU
    r = out["results"][0]
    argv = r["argv"]
    assert "--n-cpu-moe" in argv and argv[argv.index("--n-cpu-moe") + 1] == "1"
    port = free_port()
    # Without mmap, so that the host's model buffer holds exactly its tensors, as the plan counts.
    env = tool_env()
    if out["visible"]:
        env["GGML_VK_VISIBLE_DEVICES"] = out["visible"]
    # --no-warmup: the bundled llama-server dies (SIGSEGV) in its warm-up decode of this MoE
    # fixture on lavapipe with or without --n-cpu-moe (a llama.cpp/Mesa matter, not the
    # placement's); the buffers are all allocated before it.
    server = ServerProcess([*argv, "--port", str(port), "--load-mode", "none", "--no-warmup", "-lv", "4"], env)
    server.start()
    try:
        server.wait_ready(f"http://127.0.0.1:{port}", timeout_s=120)
        real = device_buffers(server.lines())
    finally:
        server.stop()
    device, exact = out["device"], r["exact"]
    dev, host = exact["devices"][0], exact["host"]
    assert abs(real["model"][device] - dev["weights"]) <= PRINT, (real, dev)
    assert abs(real["kv"][device] - dev["kv"]) <= PRINT, (real, dev)
    assert abs(real["compute"][device] - dev["compute"]) <= 2 * PRINT, (real, dev)
    host_model = sum(v for k, v in real["model"].items() if k != device)
    assert abs(host_model - host["weights"]) <= 2 * PRINT, (real, host)
    host_compute = sum(v for k, v in real["compute"].items() if k != device)
    assert abs(host_compute - host["compute"]) <= 2 * PRINT, (real, host)


def test_experts_in_ram_do_not_skew_the_compute_of_other_settings() -> None:
    """An exact plan with experts in RAM learns the formula's correction from the same settings
    without them: the copy of host-held experts a device makes for prefill (partly laid over dead
    activations by llama.cpp's allocator) must not shrink the graph it predicts for settings it
    did not measure (it did by 40% on DeepSeek-V2-Lite)."""
    out = run_json_child("moe_scale_child.py")
    for row in out["rows"]:
        assert abs(row["predicted"] - row["llama"]) <= 0.1 * row["llama"], row
