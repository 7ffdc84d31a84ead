"""The device side of the plan against a real device's allocations: llama.cpp's Vulkan backend
on Mesa's lavapipe (a Vulkan device on the CPU, package mesa-vulkan-drivers).

These run wherever the engine has a Vulkan backend (the recipe builds one when the Vulkan headers
are new enough: Debian 13, not Debian 12) and lavapipe is installed; elsewhere they skip with the
recipe's own reason. A partial offload (12 of the embedded model's 31: the output layer and
layers 19-29) must put exactly the planned layers' weights and KV cache in the device's buffers
and a compute buffer within 5% of the plan, at several contexts and ubatch sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories.gguf_models import write_model
from vrampilot.llamacpp.backends import read_manifest
from vrampilot.paths import embedded_model_path
from vrampilot.server.binaries import lib_dir
from vrampilot.units import MIB

ROOT = Path(__file__).resolve().parents[2]
PRINT_MIB = 0.005 * MIB + 1


def _why_no_vulkan() -> str | None:
    try:
        manifest = read_manifest(lib_dir()) or {}
    except Exception as exc:
        return f"no engine: {exc}"
    if "vulkan" not in (manifest.get("gpu_backends") or []):
        skipped = manifest.get("gpu_skipped") or {}
        why = skipped.get("vulkan") if isinstance(skipped, dict) else None
        return f"the engine has no Vulkan backend ({why or 'built before the recipe had GPU backends'})"
    if not any(Path(d).glob("lvp_icd*.json") for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")):
        return "Mesa's lavapipe is not installed (apt install mesa-vulkan-drivers)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_no_vulkan() is not None, reason=str(_why_no_vulkan()))]


def _run(model: Path, ngl: int, n_ctx: int, ubatch: int) -> dict[str, object]:
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0"}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "vulkan_child.py"), str(model), str(ngl),
                        str(n_ctx), str(ubatch)], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _model(name: str, tmp_path: Path) -> Path:
    path = embedded_model_path() if name == "smollm2" else write_model(tmp_path / f"{name}.gguf", name, n_layer=6)
    assert path is not None
    return path


@pytest.mark.parametrize(
    ("model", "ngl", "n_ctx", "ubatch"),
    [("smollm2", 12, 2048, 512), ("smollm2", 12, 8192, 256), ("smollm2", 31, 4096, 512),
     ("qwen2", 4, 2048, 512), ("gemma3", 3, 4096, 256)],
)  # fmt: skip
def test_the_device_holds_what_the_plan_put_there(model: str, ngl: int, n_ctx: int, ubatch: int, tmp_path: Path) -> None:
    out = _run(_model(model, tmp_path), ngl, n_ctx, ubatch)
    assert "error" not in out, out
    name = str(out["device"])
    plan, measured = out["plan"], out["measured"]
    assert isinstance(plan, dict) and isinstance(measured, dict)
    assert abs(measured["model"][name] - plan["weights"]) <= PRINT_MIB  # exactly the planned tensors
    assert abs(measured["kv"][name] - plan["kv"]) <= PRINT_MIB  # the offloaded layers' KV, exact
    assert abs(measured["compute"][name] - plan["compute"]) <= 0.05 * measured["compute"][name]
    # -ngl counts the output layer first, then the repeating layers from the last one down
    # (llama.cpp's rule): 12 on SmolLM2 is the output and layers 19-29 of its 30.
    n_layer = int(out["n_layer"])  # type: ignore[call-overload]
    assert out["output_on_device"]
    assert out["layers"] == list(range(n_layer + 1 - min(ngl, n_layer + 1), n_layer))
