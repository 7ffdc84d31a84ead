"""The CLI as a user runs it: a real subprocess, real files, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.gguf_models import write_qwen25_7b_q4_k_m
from tests import waits


def vrampilot(*args: str, env: dict[str, str] | None = None, cpu_s: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, bounded by the work it does (tests/waits.py): `cpu_s` of CPU is
    far more than any command but `doctor --measure` uses (a few seconds)."""
    full_env = {**os.environ, **(env or {})}
    return waits.run([sys.executable, "-m", "vrampilot", *args], env=full_env, cpu_s=cpu_s)


@pytest.fixture(scope="module")
def qwen7b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen25_7b_q4_k_m(tmp_path_factory.mktemp("cli") / "Qwen2.5 7B Instruct Q4_K_M.gguf")


def test_version() -> None:
    r = vrampilot("--version")
    assert r.returncode == 0 and r.stdout.startswith("vrampilot ")


def test_a_reader_that_goes_away_ends_the_command_quietly(qwen7b: Path) -> None:
    """`vrampilot plan --json | head -1`: the pipe is closed before the plan is written (the read
    end is closed at once, while the command still imports), and nothing but the output is lost."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "plan", str(qwen7b), "--vram", "8GiB", "--estimate", "--json"],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    os.close(read_end)
    waits.until_true(lambda: proc.poll() is not None, cpu_s=120)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert err == ""


def test_a_program_without_streams_runs_its_command() -> None:
    """The window's program on Windows has no console, so no sys.stdout or sys.stderr (None): a
    command's printed lines are lost there, but the command runs to its end."""
    code = "import sys; sys.stdout = sys.stderr = None; from vrampilot.cli import main; sys.exit(main(['inspect']))"
    r = waits.run([sys.executable, "-c", code], cpu_s=120)
    assert r.returncode == 0, r.stderr


def test_a_command_imports_only_its_own_module() -> None:
    """`vrampilot inspect` does not pay for the Hub client or the chat's imports; --help lists every command."""
    code = (
        "import sys; from vrampilot.cli import build_parser; build_parser(['inspect', '--json']); "
        "print(sorted(m for m in sys.modules if m.startswith(('vrampilot.commands.', 'vrampilot.hub.client'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "['vrampilot.commands.common', 'vrampilot.commands.inspect']"
    help_text = vrampilot("--help").stdout
    assert all(name in help_text for name in ("doctor", "export", "rpc-host", "hub", "hybrid-eval"))


def test_doctor_json_without_nvidia() -> None:
    r = vrampilot("doctor", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {"gpus", "cpu", "ram", "nvml", "llama_cpp", "warnings"} <= d.keys()
    assert d["gpus"] == [] and d["nvml"]["available"] is False
    assert d["cpu"]["logical_cores"] >= 1 and d["ram"]["total_bytes"] > 0
    assert "Traceback" not in r.stderr


def test_measuring_the_gpus_where_there_is_none_is_refused_in_one_line() -> None:
    r = vrampilot("doctor", "--measure", "gpus", env={"VRAMPILOT_SOFTWARE_GPU": "0"})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "vrampilot: no GPU that llama.cpp offloads to here: nothing to measure (`vrampilot doctor` lists the devices)"
    )


def test_doctor_text() -> None:
    r = vrampilot("doctor")
    assert r.returncode == 0
    assert "NVML" in r.stdout and "CPU" in r.stdout


def test_inspect_embedded_json() -> None:
    r = vrampilot("inspect", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["architecture"] == "llama" and d["layers"] == 30 and d["kv_heads"] == 3
    assert (
        d["weights"]["total_bytes"]
        == sum(d["weights"]["per_layer_bytes"])
        + d["weights"]["token_embd_bytes"]
        + d["weights"]["output_bytes"]
        + d["weights"]["other_bytes"]
    )


def test_inspect_text() -> None:
    r = vrampilot("inspect")
    assert r.returncode == 0
    assert "Architecture" in r.stdout and "llama" in r.stdout


def test_inspect_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello, this is not a model\n" * 10)
    r = vrampilot("inspect", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "not a GGUF file" in lines[0]


def test_plan_json_contract(qwen7b: Path) -> None:
    r = vrampilot("plan", str(qwen7b), "--vram", "8GiB", "--ctx", "65536", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["settings"]) == {
        "n_ctx",
        "type_k",
        "type_v",
        "n_gpu_layers",
        "n_batch",
        "n_ubatch",
        "n_threads",
        "n_threads_batch",
        "flash_attn",
        "swa_full",
        # 64K is past Qwen2.5's trained 32K: YaRN lifts llama-server's cap (planner/memory/rope.py)
        "rope_scale",
        "yarn_orig_ctx",
    }
    for comp in ("weights", "kv", "compute", "output", "margin", "total"):
        assert set(d["memory"][comp]) == {"device", "host"}
    assert d["memory"]["total"]["device"] <= d["budget"]["device_bytes"] == 8 * 1024**3
    assert d["fits"] is True and d["settings"]["type_k"] == "q8_0"
    assert d["speed"]["decode_tps"] > 0 and d["speed"]["prefill_tps"] > 0
    assert d["reasons"] and d["alternatives"]
    alt = d["alternatives"][0]
    assert {"settings", "memory_total", "fits", "speed"} <= alt.keys()
    assert "-ctk q8_0" in d["llama_server"] and "-c 65536" in d["llama_server"]
    # The compute buffer comes from llama.cpp's own allocator unless --estimate asks for the formula.
    assert d["compute_source"] == "llama.cpp"
    est = json.loads(vrampilot("plan", str(qwen7b), "--vram", "8GiB", "--ctx", "65536", "--json", "--estimate").stdout)
    assert est["compute_source"] == "estimate"
    assert est["memory"]["compute"]["device"] != d["memory"]["compute"]["device"]


def test_plan_verify_shows_plan_and_formula_against_llama_cpp(qwen7b: Path) -> None:
    r = vrampilot("plan", str(qwen7b), "--vram", "8GiB", "--ctx", "65536", "--verify", "--json")
    v = json.loads(r.stdout)["verify"]
    assert v["compute"]["predicted"] == v["compute"]["llama_cpp"]  # the exact plan's number, fresh load
    assert v["compute"]["formula"] != v["compute"]["llama_cpp"]
    assert "llama.cpp's own allocator" in vrampilot("plan", str(qwen7b), "--vram", "8GiB").stdout


def test_plan_text_and_cpu_only() -> None:
    r = vrampilot("plan", "--cpu-only")
    assert r.returncode == 0, r.stderr
    assert "CPU only" in r.stdout and "Why" in r.stdout and "llama-server" in r.stdout


def test_plan_gpu_profile_and_unknown_profile(qwen7b: Path) -> None:
    r = vrampilot("plan", str(qwen7b), "--gpu", "rtx 4090", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert "4090" in d["target"] and d["settings"]["n_gpu_layers"] == 29
    r = vrampilot("plan", str(qwen7b), "--gpu", "RTX 9999 Hyper")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_plan_that_does_not_fit(qwen7b: Path) -> None:
    r = vrampilot("plan", str(qwen7b), "--vram", "2GiB", "--ngl", "29", "--ctx", "32768", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["fits"] is False


def test_export_shells(qwen7b: Path) -> None:
    for shell, marker in (("bash", "'"), ("powershell", "'"), ("cmd", '"')):
        r = vrampilot("export", str(qwen7b), "--vram", "8GiB", "--shell", shell, "--port", "8080")
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip()
        assert line.count("\n") == 0 and "-m " in line and marker + str(qwen7b.parent) in line
        for flag in ("-c 32768", "-ngl 29", "-ctk f16", "-ctv f16", "-fa on", "-ub ", "-t ", "-tb ", "--port 8080"):
            assert flag in line, (flag, line)


def test_export_for_a_profile_is_portable(qwen7b: Path) -> None:
    """A plan for a GPU profile exports a line for that GPU's machine (issue 58, item 7): nothing of
    this one (its bundled llama-server, GGML_BACKEND_PATH, folders, core count), and says so."""
    for shell in ("bash", "powershell", "cmd"):
        r = vrampilot("export", str(qwen7b), "--gpu", "rtx 4090", "--shell", shell)
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip()
        assert line.startswith("llama-server -m "), line
        assert "Qwen2.5 7B Instruct Q4_K_M.gguf" in line and str(qwen7b.parent) not in line
        assert "GGML_BACKEND_PATH" not in line and " -t " not in line and " -tb " not in line
        assert "-ngl " in line and "-c " in line
        assert "portable line for that GPU's machine" in r.stderr
