"""The window with layers on a Vulkan device (lavapipe): planned for Vulkan0, loaded, shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.conftest import ROOT

pytestmark = pytest.mark.slow
ARTIFACTS = ROOT / "test-artifacts" / "gpu"


def test_the_window_plans_and_loads_layers_on_the_vulkan_device(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "window-vulkan.png"
    shot.unlink(missing_ok=True)
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "window_child.py"), str(shot)], capture_output=True,
                       text=True, timeout=600, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["Vulkan0"] and "llvmpipe" in out["target"]
    assert out["n_gpu_layers"] > 0
    assert shot.is_file() and shot.stat().st_size > 10_000
