"""The vision projector on a real Vulkan device (Mesa's lavapipe): the plan puts it where
llama-server's clip.cpp does (the first GPU, or the CPU with --no-mmproj-offload) and counts the
bytes clip.cpp printed there, for two projector types; the in-process engine loads it there too.
The text model is the GPU tests' small one (tests/gpu/conftest.py): the projector is the subject."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.gguf_models import TINY
from testkit.mmproj import write_projector
from tests.gpu.conftest import run_child
from tests.images import png_bytes
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
PRINT_RESOLUTION = 0.005 * MIB + 1  # clip.cpp prints MiB with two decimals
SMALL_N_EMBD = TINY["llama"].n_embd  # the small model's width: the projector's output feeds it


@pytest.mark.parametrize("kind", ["mlp", "gemma3"])
@pytest.mark.parametrize("keep_on_cpu", [False, True], ids=["offloaded", "no-mmproj-offload"])
def test_projector_bytes_on_the_device_llama_cpp_uses(
    tmp_path: Path, small_model: Path, kind: str, keep_on_cpu: bool
) -> None:
    mmproj = write_projector(
        tmp_path / f"mmproj-{kind}.gguf", kind, n_embd_text=SMALL_N_EMBD, image_size=224, n_merge=4
    )
    pins = {"n_ctx": 2048, "n_gpu_layers": 99, "mmproj_cpu": keep_on_cpu or None}
    out = run_child("projector_child.py", "server", str(small_model), str(mmproj), json.dumps(pins))
    assert "error" not in out, out
    plan, printed = out["plan"], out["printed"]
    assert abs(plan["weights"] - printed["model"]) <= PRINT_RESOLUTION
    if keep_on_cpu:
        assert "--no-mmproj-offload" in out["argv"]
        assert printed["backend"] == "CPU" and plan["device"] == -1
        assert set(printed["compute"]) == {"CPU"}
        assert abs(plan["compute"] - printed["compute"]["CPU"]) <= PRINT_RESOLUTION
        assert plan["device_projector"] == [0]
        assert plan["host_projector"] == plan["weights"] + plan["compute"]
        return
    assert "--no-mmproj-offload" not in out["argv"]
    device = out["device_name"]
    assert printed["backend"] == device and plan["device"] == 0
    assert abs(plan["compute"] - printed["compute"][device]) <= PRINT_RESOLUTION
    # clip.cpp's CPU buffer beside the device's one (printed only above one byte)
    assert abs(plan["host_compute"] - printed["compute"].get("CPU", 0)) <= PRINT_RESOLUTION
    assert plan["device_projector"] == [plan["weights"] + plan["compute"]]
    assert plan["host_projector"] == plan["host_compute"]


@pytest.mark.parametrize("keep_on_cpu", [False, True], ids=["offloaded", "no-mmproj-offload"])
def test_the_engine_loads_it_where_the_plan_counted_it(tmp_path: Path, small_model: Path, keep_on_cpu: bool) -> None:
    mmproj = write_projector(tmp_path / "mmproj.gguf", "gemma3", n_embd_text=SMALL_N_EMBD, image_size=224, n_merge=4)
    pins = {"n_ctx": 2048, "n_gpu_layers": 99, "mmproj_cpu": keep_on_cpu or None}
    (tmp_path / "a.png").write_bytes(png_bytes(40, 30))
    image = str(tmp_path / "a.png")
    out = run_child("projector_child.py", "engine", str(small_model), str(mmproj), json.dumps(pins), image)
    assert "error" not in out, out
    plan, printed = out["plan"], out["printed"]
    where = "CPU" if keep_on_cpu else out["device_name"]
    assert printed["backend"] == where and plan["device"] == (-1 if keep_on_cpu else 0)
    assert abs(plan["weights"] - printed["model"]) <= PRINT_RESOLUTION
    assert abs(plan["compute"] - printed["compute"][where]) <= PRINT_RESOLUTION
    assert out["prompt_tokens"] > plan["image_tokens"] == 16  # the image turn went through the projector
