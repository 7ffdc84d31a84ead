"""The instruction probes: right encodings, a real SIGILL seen as "cannot run", and the cache."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vrampilot.llamacpp import cpu_probe
from vrampilot.llamacpp.cpu_probe import FEATURES, INSTRUCTIONS, probe_cpu, run_feature, run_probes

pytestmark = pytest.mark.skipif(not cpu_probe.is_x86_64(), reason="the probes are x86-64 machine code")

# The kernel hides a feature from /proc/cpuinfo when it has not enabled its state, except AMX,
# which it may list while a VM keeps the tile state off: the flags each feature needs.
CPUINFO_FLAGS = {
    "SSE42": ["sse4_2"],
    "AVX": ["avx"],
    "F16C": ["f16c"],
    "FMA": ["fma"],
    "AVX2": ["avx2"],
    "BMI2": ["bmi2"],
    "AVX_VNNI": ["avx_vnni"],
    "AVX512": ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"],
    "AVX512_VBMI": ["avx512vbmi"],
    "AVX512_VNNI": ["avx512_vnni"],
    "AVX512_BF16": ["avx512_bf16"],
    "AMX_TILE": ["amx_tile"],
    "AMX_INT8": ["amx_int8"],
}


def _cpuinfo_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(shutil.which("as") is None, reason="GNU as is not installed")
def test_every_encoding_is_what_gnu_as_assembles(tmp_path: Path) -> None:
    for feature, instructions in INSTRUCTIONS.items():
        source = tmp_path / f"{feature}.s"
        source.write_text(".intel_syntax noprefix\n" + "".join(f"{asm}\n" for asm, _ in instructions))
        obj = tmp_path / f"{feature}.o"
        subprocess.run(["as", "-o", str(obj), str(source)], check=True)
        raw = tmp_path / f"{feature}.bin"
        subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
        assert raw.read_bytes().hex() == "".join(enc for _, enc in instructions), feature


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="compares with Linux's /proc/cpuinfo")
def test_probe_agrees_with_the_kernel_on_this_machine() -> None:
    probe = run_probes()
    flags = _cpuinfo_flags()
    assert probe.method == "executed"
    assert [r.name for r in probe.results] == list(FEATURES)
    assert probe.runs("SSE42"), "every x86-64 machine this project runs on has SSE4.2"
    for r in probe.results:
        if r.runs:  # nothing runs that the kernel does not list
            assert all(f in flags for f in CPUINFO_FLAGS[r.name]), r
        elif not r.name.startswith("AMX"):  # the kernel lists only what it enabled, AMX aside
            assert not all(f in flags for f in CPUINFO_FLAGS[r.name]), r
        if not r.runs:
            assert r.note


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX: the instruction runs in a forked child")
def test_an_instruction_the_cpu_lacks_is_caught_as_sigill_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = run_probes()
    missing = [r.name for r in probe.results if not r.advertised and not r.name.startswith("AMX")]
    if missing:  # a real feature this CPU lacks
        feature = missing[-1]
    else:  # a CPU with every probed feature (CI's Xeons with AMX): ud2, undefined on every x86-64 CPU
        feature = "UD2"
        monkeypatch.setitem(cpu_probe._CODE, feature, bytes.fromhex("0f0bc3"))  # ud2; ret
    runs, note = run_feature(feature)
    assert not runs
    assert "SIGILL" in note


def test_probe_is_cached_per_cpu_and_redone_when_the_cpu_changes(tmp_path: Path) -> None:
    cache = tmp_path / "cpu-probe.json"
    first = probe_cpu(cache)
    assert json.loads(cache.read_text())["fingerprint"] == first.fingerprint

    # A cache entry made on this CPU is believed as it is (the probe is not run again) ...
    doctored = dataclasses.replace(
        first, results=tuple(dataclasses.replace(r, note="from cache") for r in first.results)
    )
    cache.write_text(json.dumps(dataclasses.asdict(doctored)))
    assert all(r.note == "from cache" for r in probe_cpu(cache).results)

    # ... one made on another CPU (or under an emulator's CPUID) is not.
    cache.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(doctored, fingerprint="another-cpu"))))
    again = probe_cpu(cache)
    assert again.fingerprint == first.fingerprint
    assert not any(r.note == "from cache" for r in again.results)

    cache.write_text("{ not json")
    assert probe_cpu(cache).fingerprint == first.fingerprint
