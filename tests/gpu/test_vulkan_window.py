"""The window with layers on a Vulkan device (lavapipe): planned for Vulkan0, loaded, shown, a
question answered, and the meters showing the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.conftest import ROOT
from tests.speed_record import save_measured_record
from vrampilot.speed import HostProbe

pytestmark = pytest.mark.slow
ARTIFACTS = ROOT / "test-artifacts" / "gpu"


def test_the_window_plans_and_loads_layers_on_the_vulkan_device(
    tmp_path: Path, host_probe: HostProbe, small_model: Path
) -> None:
    # A returning user whose CPU was measured: the window measures only the device it has no rates
    # for (a few seconds), not the CPU probe beside the load and the reply.
    save_measured_record(tmp_path / "home", host_probe)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot, meters = ARTIFACTS / "window-vulkan.png", ARTIFACTS / "window-vulkan-meters.png"
    shot.unlink(missing_ok=True)
    meters.unlink(missing_ok=True)
    # PYTHONPATH: the child imports tests.waits, and a script sees only its own folder.
    env = {
        **os.environ,
        "VRAMPILOT_HOME": str(tmp_path / "home"),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "window_child.py"), str(shot), str(meters), str(small_model)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["Vulkan0"] and "llvmpipe" in out["target"]
    assert out["n_gpu_layers"] > 0
    assert shot.is_file() and shot.stat().st_size > 10_000 and meters.is_file()
    # The meters read the device through llama.cpp: lavapipe's driver reports no use, so this
    # app's figure is llama.cpp's own buffers, and the status bar says so rather than "0 B".
    assert "llvmpipe" in out["vram_title"]
    assert any("llama.cpp's buffers" in c for c in out["vram_captions"]), out["vram_captions"]
    assert "VRAM this app" in out["status_bar"] and "VRAM 0 B" not in out["status_bar"]
