"""The CPU's speed probe on a machine with a GPU: it must time the CPU, not the GPU. With layers
kept on the host llama.cpp still sends a prompt's large products to a GPU (op_offload), so the
probe's runs of the built-in model and of the tiny step model must turn that off; on lavapipe
they otherwise took minutes and priced every CPU plan at the device's speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import waits
from tests.gpu.conftest import ROOT
from vrampilot.llamacpp import device_buffers

pytestmark = pytest.mark.slow

# The probe's own steps, from its modules as tests/speed imports them: a test of the speed package
# that sits with the GPU group for the device it needs.
CHILD = """
from vrampilot.speed.host_probe import measure_steps
from vrampilot.speed.reference_run import ReferenceSession
from vrampilot.llamacpp import capture_log, load
from vrampilot.llamacpp import list_devices
from vrampilot.paths import embedded_model_path

load()
print("devices:", [d.name for d in list_devices()])
with capture_log() as lines:
    ReferenceSession(embedded_model_path(), [1]).close()
    measure_steps([1])
for line in lines:
    if "buffer size" in line:
        print(line)
"""


def test_the_cpu_probe_runs_nothing_on_the_gpu() -> None:
    r = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600, env=dict(os.environ), cwd=ROOT
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Vulkan0" in r.stdout.splitlines()[0]  # the device is there to be (mis)used
    buffers = device_buffers(r.stdout.splitlines()[1:])
    assert buffers["model"] and buffers["compute"], r.stdout
    assert all(not name.startswith("Vulkan0") for kind in buffers.values() for name in kind), buffers


def test_doctor_measures_the_device_and_plans_price_it_as_measured(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path / "home")}
    exe = [sys.executable, "-m", "vrampilot"]
    before = waits.run([*exe, "plan"], cpu_s=300, env=env, cwd=ROOT)
    assert before.returncode == 0, before.stderr[-2000:]
    assert "not measured on this device" in before.stdout
    # Only the device's kernels (the whole probe, CPU included, is tests/cli/test_speed_cli's):
    # lavapipe computes on the CPU too, about 10 s of work here.
    r = waits.run([*exe, "doctor", "--measure", "gpus"], cpu_s=1200, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("Vulkan0 (") and "measured" in x)
    assert "GB/s reading q8_0 weights" in line and "us per kernel" in line
    assert "Speed: not measured on this machine yet" in r.stdout  # the CPU's figures were left alone
    after = waits.run([*exe, "plan"], cpu_s=300, env=env, cwd=ROOT)
    assert "llama.cpp's kernels measured on this device" in after.stdout, after.stdout
