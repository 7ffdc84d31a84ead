"""The Vulkan module loads where it can and never hurts where it cannot: no loader, no driver, a
broken driver manifest, a driver that crashes or hangs when asked. Each runs the real product
path (`vrampilot doctor --json` in a fresh process, with VRAMPILOT_SOFTWARE_GPU=1 so that lavapipe
would otherwise be used) and must end with the CPU engine, one line saying what is missing, and
no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import ROOT, hiding_the_vulkan_loader, need
from vrampilot.llamacpp import probe_vulkan


def doctor(env: dict[str, str], prefix: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    r = subprocess.run(
        [*prefix, sys.executable, "-m", "vrampilot", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    return json.loads(r.stdout)["llama_cpp"], r.stderr


def icd_manifest(path: Path, library: str) -> Path:
    path.write_text(
        json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.3.0"}})
    )
    return path


def fake_driver(tmp_path: Path, body: str) -> Path:
    """A Vulkan driver library whose loading does `body` (abort, hang): what a broken driver does."""
    if shutil.which("gcc") is None:
        need("gcc is needed to build the broken drivers these tests load")
    src = tmp_path / "driver.c"
    src.write_text(
        "#include <stdlib.h>\n#include <unistd.h>\n"
        f"__attribute__((constructor)) static void on_load(void) {{ {body}; }}\n"
        "void *vk_icdGetInstanceProcAddr(void *i, const char *n) { return 0; }\n"
    )
    lib = tmp_path / "libbroken_icd.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return icd_manifest(tmp_path / "broken_icd.json", str(lib))


def test_with_lavapipe_the_module_loads_and_the_device_is_listed() -> None:
    llama, _ = doctor({})
    assert "Vulkan" in llama["backends"]
    assert any(d["backend"] == "Vulkan" for d in llama["devices"])
    assert "software Vulkan device, used" in str(llama["vulkan_status"])


def test_software_devices_are_not_used_unless_asked() -> None:
    llama, _ = doctor({"VRAMPILOT_SOFTWARE_GPU": "0"})
    assert "Vulkan" not in llama["backends"]
    assert not any(d["backend"] == "Vulkan" for d in llama["devices"])
    assert "software Vulkan device, not used" in str(llama["vulkan_status"])


def test_no_driver_at_all(tmp_path: Path) -> None:
    llama, _ = doctor({"VK_ICD_FILENAMES": str(tmp_path / "nothing.json")})
    assert "Vulkan" not in llama["backends"]
    status = str(llama["vulkan_status"])
    assert status.startswith("Vulkan: the loader found no Vulkan driver") and "nothing.json does not exist" in status
    assert "apt install" in status and "\n" not in status


def test_a_manifest_naming_a_missing_driver(tmp_path: Path) -> None:
    manifest = icd_manifest(tmp_path / "gone.json", str(tmp_path / "libgone.so"))
    llama, _ = doctor({"VK_ICD_FILENAMES": str(manifest)})
    assert "Vulkan" not in llama["backends"]
    assert "libgone.so, which is not there" in str(llama["vulkan_status"])


def test_a_driver_that_crashes_when_loaded(tmp_path: Path) -> None:
    llama, _ = doctor({"VK_ICD_FILENAMES": str(fake_driver(tmp_path, "abort()"))})
    assert "Vulkan" not in llama["backends"]
    assert "killed the process (signal 6)" in str(llama["vulkan_status"])
    assert any(d["backend"] == "CPU" for d in llama["devices"])


def test_a_driver_that_hangs_costs_the_deadline_not_the_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VK_ICD_FILENAMES", str(fake_driver(tmp_path, "sleep(3600)")))
    started = time.monotonic()
    probe = probe_vulkan(deadline_s=2.0)
    assert probe.status == "driver-failed" and "did not answer within 2 s" in probe.detail
    assert time.monotonic() - started < 60  # the child was killed, not waited for


def test_no_vulkan_loader() -> None:
    """The loader hidden for real (a private mount namespace with /dev/null over it)."""
    llama, _ = doctor({}, prefix=hiding_the_vulkan_loader())
    assert "Vulkan" not in llama["backends"]
    status = str(llama["vulkan_status"])
    assert status.startswith("Vulkan: no Vulkan loader") and "apt install libvulkan1" in status
