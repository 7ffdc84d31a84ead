"""The engine runs on every x86-64 CPU: natively here, and as older CPUs under qemu-user.

qemu-x86_64 runs this machine's own Python and llama.cpp as a Haswell (AVX2, no AVX-512) or a
Nehalem (SSE4.2 only). A build with code for a newer CPU than the one emulated dies with SIGILL
there, as it would on such a user's desktop; the dispatched build must load the variant for the
emulated CPU and give the same greedy tokens as natively.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vrampilot.llamacpp import cpu_probe

HERE = Path(__file__).resolve().parent
CHILD = HERE / "decode_child.py"
N_TOKENS = 4
QEMU = shutil.which("qemu-x86_64")

pytestmark = pytest.mark.skipif(not cpu_probe.is_x86_64(), reason="x86-64 CPU variants")


def decode(
    model: Path, *, qemu_cpu: str | None = None, lib_dir: Path | None = None, home: Path, repeats: int = 1
) -> dict[str, Any]:
    env = {**os.environ, "VRAMPILOT_HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.pop("VRAMPILOT_CPU_VARIANT", None)
    if lib_dir is not None:
        env["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    cmd = [sys.executable, str(CHILD), str(model), str(N_TOKENS), str(repeats)]
    if qemu_cpu is not None:
        cmd = [require_qemu(), "-cpu", qemu_cpu, *cmd]
        # numpy's bundled OpenBLAS picks its kernels at import by its own CPU detection, which
        # under qemu-user on an AMD family 26 host chose AVX code for the emulated Nehalem (import
        # numpy died with SIGILL, numpy 1.26 to 2.4 alike; pinned to Nehalem it ran). OpenBLAS is
        # not what this test checks: it gets the emulated CPU's kernels by name, llama.cpp's
        # dispatch still finds the CPU by itself.
        env["OPENBLAS_CORETYPE"] = qemu_cpu
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode} under {qemu_cpu or 'this CPU'}:\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def require_qemu() -> str:
    if QEMU is None:
        if os.environ.get("VRAMPILOT_REQUIRE_QEMU"):
            pytest.fail("qemu-x86_64 is required here (Debian package qemu-user)")
        pytest.skip("qemu-x86_64 not installed (Debian package qemu-user)")
    return QEMU


# Features llama.cpp's system info reports per CPU backend, named as in the variant table.
REPORTED = (
    "AVX",
    "F16C",
    "FMA",
    "AVX2",
    "BMI2",
    "AVX_VNNI",
    "AVX512",
    "AVX512_VBMI",
    "AVX512_VNNI",
    "AVX512_BF16",
    "AMX_INT8",
)


def assert_llama_cpp_runs_the_variant(run: dict[str, Any]) -> None:
    """llama.cpp itself (not just our record) has exactly the chosen CPU module registered."""
    cpu_parts = [part for part in run["system_info"].split("CPU : ")[1:]]
    assert len(cpu_parts) == 1, run["system_info"]  # one CPU backend, not ours plus ggml's pick
    reported = {k.strip() for k, _, v in (f.partition("=") for f in cpu_parts[0].split("|")) if v.strip() == "1"}
    for feature in REPORTED:
        assert (feature in reported) == (feature in run["features"]), (feature, run["variant"], run["system_info"])


@pytest.fixture(scope="module")
def native(embedded_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return decode(embedded_model, home=tmp_path_factory.mktemp("native"))


def test_natively_the_best_variant_this_cpu_really_runs_is_loaded(native: dict[str, Any]) -> None:
    from vrampilot.llamacpp.backends import choose_variant, read_manifest

    assert native["mode"] == "dispatched", native["dispatch"]
    manifest = read_manifest(Path(native["lib_dir"]))
    assert manifest is not None
    expected = choose_variant(manifest["cpu_variants"], cpu_probe.run_probes())  # type: ignore[arg-type]  # the manifest's JSON list
    assert expected is not None and native["variant"] == expected.name
    assert "CPU" in native["registered"]
    assert_llama_cpp_runs_the_variant(native)
    assert len(native["tokens"]) == N_TOKENS and native["text"].strip()


def test_the_variant_loaded_here_reads_a_batched_prompt(embedded_model: Path, tmp_path: Path) -> None:
    """A prompt of 60-odd tokens in ubatches of 32: every weight is multiplied as a matrix, the
    kernels a decode of one token never reaches. On a CPU with AMX the sapphirerapids variant runs
    its tile kernels here, which died with SIGILL when GCC 12 dropped the tile configuration's
    stores (packaging/engine/build.py, AMX_COMPAT_HEADER)."""
    batched = decode(embedded_model, home=tmp_path, repeats=12)
    assert batched["prompt_tokens"] > 32, batched
    assert len(batched["tokens"]) == N_TOKENS and batched["text"].strip()


@pytest.mark.slow
@pytest.mark.parametrize(("qemu_cpu", "variant"), [("Haswell", "haswell"), ("Nehalem", "sse42")])
def test_an_older_cpu_gets_its_own_variant_and_the_same_answer(
    embedded_model: Path, native: dict[str, Any], qemu_cpu: str, variant: str, tmp_path: Path
) -> None:
    emulated = decode(embedded_model, qemu_cpu=qemu_cpu, home=tmp_path)
    assert emulated["mode"] == "dispatched"
    assert emulated["variant"] == variant, emulated["dispatch"]
    assert_llama_cpp_runs_the_variant(emulated)
    # Greedy tokens of a 135M model over 4 steps: instruction sets round differently, but not
    # enough to change the first tokens of "The capital of France is".
    assert emulated["tokens"] == native["tokens"]
