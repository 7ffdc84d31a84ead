"""The GPU backend pin on a real Vulkan device (lavapipe): pinned to Vulkan, the plan names the
device to llama-server (--device Vulkan0) and to the engine, and both put the model there; pinned
to CUDA on a machine without it, the CLI refuses in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot
from tests.gpu.conftest import run_child
from vrampilot.llamacpp import read_manifest
from vrampilot.server.binaries import lib_dir


@pytest.mark.slow
def test_the_pin_to_vulkan_runs_the_model_on_vulkan0_in_llama_server_and_the_engine(embedded_model: Path) -> None:
    out = run_child("gpu_backend_child.py", str(embedded_model))
    assert out["devices"] == ["Vulkan0"] and out["device_arg"] == "Vulkan0"
    assert isinstance(out["n_gpu_layers"], int) and out["n_gpu_layers"] > 0
    assert "Vulkan0" in out["served_model_buffers"]
    reasons = out["reasons"]
    assert isinstance(reasons, list) and any("runs as Vulkan0 (Vulkan): pinned by you" in r for r in reasons)
    engine = out["engine_bytes"]
    assert isinstance(engine, dict) and (engine["Vulkan0"] or 0) > 0


def test_the_pin_to_cuda_without_cuda_is_refused_in_one_line(embedded_model: Path) -> None:
    gpus = (read_manifest(lib_dir()) or {}).get("gpu_backends")
    if isinstance(gpus, list) and "cuda" in gpus:
        pytest.skip("this engine has CUDA: the pin is not refused here")
    r = vrampilot("plan", str(embedded_model), "--gpu-backend", "cuda", "--estimate")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("vrampilot: --gpu-backend cuda: no GPU here runs under CUDA (this machine has llvmpipe")
    assert "(Vulkan0)" in lines[0]
