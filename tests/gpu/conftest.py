"""The GPU path on a real Vulkan device: Mesa's lavapipe where no GPU is present.

Every test here runs with VRAMPILOT_SOFTWARE_GPU=1, which lets the planner and llama.cpp use a
software Vulkan device as if it were a GPU. Where the engine has no Vulkan module or no Vulkan
driver is installed the tests skip with the reason, except under VRAMPILOT_REQUIRE_GPU=1 (what
.ci/run sets): there a missing device fails the run, since CI promises the GPU path.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from tests import waits
from vrampilot.llamacpp import SOFTWARE_GPU_ENV, loader_name, probe_vulkan, read_manifest
from vrampilot.server.binaries import lib_dir

REQUIRE_ENV = "VRAMPILOT_REQUIRE_GPU"


def need(why: str) -> None:
    """What a test of the GPU path cannot run without: a failure where CI promises that path
    (VRAMPILOT_REQUIRE_GPU=1), a skip elsewhere."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1: {why}")
    pytest.skip(why)


def hiding_the_vulkan_loader() -> tuple[str, ...]:
    """A command prefix that runs its command with the system's Vulkan loader hidden for real: a
    private mount namespace with /dev/null over it (root and unshare, as in CI)."""
    found = [
        Path(d) / loader_name()
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
    ]
    loaders = sorted({str(p.resolve()) for p in found if p.exists()})
    if os.geteuid() != 0 or shutil.which("unshare") is None or not loaders:
        need("hiding the Vulkan loader needs root, unshare (util-linux) and an installed loader")
    mounts = " && ".join(f"mount --bind /dev/null {loader}" for loader in loaders)
    return ("unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh")


@functools.cache
def why_no_vulkan() -> str | None:
    """Asked once per session (a fork and the loader each time otherwise)."""
    try:
        manifest = read_manifest(lib_dir()) or {}
    except Exception as exc:
        return f"no engine: {exc}"
    if "vulkan" not in cast(list[str], manifest.get("gpu_backends") or []):  # the manifest's JSON list
        skipped = manifest.get("gpu_skipped") or {}
        why = skipped.get("vulkan") if isinstance(skipped, dict) else None
        return f"the engine has no Vulkan backend ({why or 'built before the recipe had GPU backends'})"
    probe = probe_vulkan()
    if not probe.devices:
        return f"{probe.describe(True)} (for lavapipe: apt install mesa-vulkan-drivers)"
    return None


@pytest.fixture(autouse=True)
def vulkan_device(monkeypatch: pytest.MonkeyPatch) -> None:
    why = why_no_vulkan()
    if why is not None:
        need(f"no Vulkan device: {why}")
    monkeypatch.setenv(SOFTWARE_GPU_ENV, "1")


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real llama GGUF, 4 layers 128 wide with the embedded model's tokenizer and chat template,
    for tests whose subject is the GPU path rather than the model: lavapipe runs the shaders on the
    CPU, and the 135M embedded model (30 layers, 576 wide) costs about four times the CPU per load
    and reply (49 s against 13 s for the meters' reply)."""
    from testkit.gguf_models import write_model

    return write_model(tmp_path_factory.mktemp("gpu-model") / "tiny-llama.gguf", "llama", tokenizer="smollm2")


def run_child(script: str, *args: str, cpu_s: float = 1200) -> dict[str, Any]:
    """Run tests/gpu/<script> in a fresh interpreter (llama.cpp reads VRAMPILOT_SOFTWARE_GPU when
    its backends load, once per process) and return the JSON object of its last output line. Bounded
    by the work its process tree does (tests/waits.py: `cpu_s` of CPU, or no work for minutes), not
    the clock: lavapipe's shaders on a busy machine took over 300 s for one MTP reply."""
    # The script's own folder heads sys.path, not the checkout: testkit and tests come from ROOT.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    r = waits.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / script), *args],
        cpu_s=cpu_s,
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result
