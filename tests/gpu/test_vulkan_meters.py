"""The meters on a Vulkan device during a reply: llama.cpp's device API for the device, its own
buffers for this app where the driver reports no use (lavapipe has no VK_EXT_memory_budget),
compared with the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.conftest import run_child
from vrampilot.llamacpp import probe_vulkan

pytestmark = pytest.mark.slow
PRINT_BYTES = 4 * (0.005 * 1024 * 1024 + 1)  # llama.cpp prints each of the four buffers to 0.01 MiB


@pytest.mark.parametrize("ngl", [2, 5], ids=["some-layers", "all-layers"])
def test_the_meters_read_the_vulkan_device_during_a_reply(ngl: int, small_model: Path) -> None:
    out = run_child("meters_child.py", str(ngl), str(small_model))
    device = next(d for d in probe_vulkan().devices)
    assert out["devices"] == [{"name": device.name, "vendor": "Vulkan", "total": out["devices"][0]["total"]}]
    assert out["devices"][0]["total"] > 0
    assert out["tokens"] > 0 and len(out["during"]) >= 2
    for reading in out["during"]:
        assert reading["name"] == device.name and reading["source"] == "llama.cpp"
        # What llama.cpp allocated on the device is what the plan put there.
        assert abs(reading["process"] - out["plan_device_bytes"]) <= PRINT_BYTES, (reading, out["plan_device_bytes"])
        assert reading["planned"] == out["plan_device_bytes"]
        if device.memory_budget:
            assert reading["used"] is not None and reading["used"] >= reading["process"] * 0.9
        else:  # the heap's size reported as free: no figure rather than a wrong one
            assert reading["used"] is None and reading["free"] is None
    if not device.memory_budget:
        assert "reports no memory use" in out["status"]
    assert out["after_process"] is None  # unloaded: nothing of this app's is left on the device
