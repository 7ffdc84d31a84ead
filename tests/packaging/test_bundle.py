"""Smoke tests of the built PyInstaller bundle (VRAMPILOT_BUNDLE=dist/vrampilot; make package-test).

Every command runs the bundle's own executable, from an empty directory with a minimal
environment: the answers prove what the bundle carries (Python, Qt, llama.cpp, the model).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.documents.writers import write_encrypted_pdf
from tests.packaging.conftest import ARTIFACTS, PACKAGING, Runner, serve_and_ask
from vrampilot.ui.qt_libs import debian_package

# 347 MiB measured (Debian 12, CPU and Vulkan): the embedded model 94, Qt 85 (ICU data 31 of it),
# the engine 61 (14 CPU variants 18, the Vulkan module 27 (its shaders), llama-server/ggml-rpc-server/
# llama-bench with the libraries only they need 10), numpy and OpenBLAS 41, cryptography 14 (AES
# PDFs), and since the agents the MCP SDK with pydantic, starlette and uvicorn (about 15 MiB). The
# budget catches what should never ship (torch, the type checker, a second Qt), not a few MiB; the
# installer files themselves (about 187 MB each) have theirs in test_bundle_vulkan.
SIZE_BUDGET_BYTES = 380 * 1024 * 1024
# The CUDA variant adds NVIDIA's cuBLAS (cublasLt alone is 515 MiB), cudart and the CUDA module.
CUDA_SIZE_BUDGET_BYTES = SIZE_BUDGET_BYTES + 1024 * 1024 * 1024
# The driver's own library: never shipped, not a Debian package of one name (nvidia-driver,
# libnvidia-compute-*, the .run installer); without it the CUDA module does not load and says so.
DRIVER_LIBRARIES = {"libcuda.so.1"}


def exe(bundle_dir: Path) -> Path:
    return bundle_dir / "vrampilot"


def test_version(bundle_dir: Path, run_exe: Runner) -> None:
    from vrampilot import __version__

    result = run_exe(exe(bundle_dir), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"vrampilot {__version__}"


def test_doctor_reports_the_bundled_llama_backend(bundle_dir: Path, run_exe: Runner) -> None:
    result = run_exe(exe(bundle_dir), "doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    llama = report["llama_cpp"]
    assert llama["error"] is None, llama
    assert llama["version"] == "0.3.36"
    assert isinstance(llama["supports_gpu_offload"], bool)  # CPU or CUDA: the bundle says which
    assert llama["system_info"]
    # The bundle carries the dispatched engine: a CPU variant chosen for this machine, by the recipe.
    manifest = json.loads((bundle_dir / "_internal" / "llama_cpp" / "lib" / "vrampilot-engine.json").read_text())
    assert llama["backend_mode"] == "dispatched", llama["cpu_dispatch"]
    assert llama["recipe_key"] == manifest["recipe_key"]
    assert llama["cpu_variant"] in manifest["cpu_variants"]
    assert "x64" in manifest["cpu_variants"] and "sse42" in manifest["cpu_variants"]  # the oldest CPUs too


@pytest.mark.parametrize(("qemu_cpu", "variant"), [("Haswell", "haswell"), ("Nehalem", "sse42")])
def test_the_bundled_libraries_run_on_older_cpus(bundle_dir: Path, qemu_cpu: str, variant: str, tmp_path: Path) -> None:
    """The installer's own llama.cpp files, as an older CPU (qemu-user). The bundle's bootloader
    re-executes itself, which qemu-user cannot follow, so a process qemu keeps (this venv's
    Python) loads the bundle's llama_cpp/lib instead."""
    from tests.llamacpp.test_dispatch import assert_llama_cpp_runs_the_variant, decode
    from vrampilot.paths import embedded_model_path

    model = embedded_model_path()
    assert model is not None
    lib = bundle_dir / "_internal" / "llama_cpp" / "lib"
    run = decode(model, qemu_cpu=qemu_cpu, lib_dir=lib, home=tmp_path)
    assert Path(run["lib_dir"]) == lib
    assert run["variant"] == variant, run["dispatch"]
    assert_llama_cpp_runs_the_variant(run)
    assert run["text"].strip()


def test_plan_uses_the_embedded_model_inside_the_bundle(bundle_dir: Path, run_exe: Runner) -> None:
    result = run_exe(exe(bundle_dir), "plan", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    model = Path(plan["model"])
    assert model.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model.is_relative_to(bundle_dir), f"the model came from outside the bundle: {model}"
    assert plan["fits"] is True


def test_chat_answers_one_turn(bundle_dir: Path, run_exe: Runner) -> None:
    result = run_exe(
        exe(bundle_dir),
        "chat",
        "--prompt",
        "Say hello.",
        "--max-tokens",
        "8",
        "--seed",
        "1",
        "--ctx",
        "512",
        "--threads",
        "1",
        "--json",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["reply"].strip()
    assert 0 < reply["stats"]["completion_tokens"] <= 8


def test_chat_starts_an_mcp_server_and_offers_its_tools(bundle_dir: Path, run_exe: Runner, tmp_path: Path) -> None:
    """The bundle carries the MCP SDK and what it is built on (pydantic, anyio, httpx): a chat with an
    mcp.json starts the server (here the tests' own, on this Python), lists its tool and answers
    through the bundled llama-server, where tool chats run (docs/agents.md)."""
    servers = Path(__file__).parents[1] / "agents" / "mcp_servers.py"
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"clock": {"command": sys.executable, "args": [str(servers), "clock"]}}}),
        encoding="utf-8",
    )
    result = run_exe(
        exe(bundle_dir),
        "chat",
        "--mcp",
        str(config),
        "--prompt",
        "What time is it?",
        "--max-tokens",
        "8",
        "--ctx",
        "512",
        "--threads",
        "1",
        "--json",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "MCP server clock: 1 tool" in result.stderr, result.stderr
    reply = json.loads(result.stdout)
    assert reply["served_by"] == "llama-server" and reply["reply"].strip()


def test_chat_reads_a_restricted_pdf(bundle_dir: Path, run_exe: Runner, tmp_path: Path) -> None:
    # An owner password with AES is what "restricted" PDFs use: pypdf needs cryptography to read them,
    # which a bundle trimmed too far would lose.
    pdf = write_encrypted_pdf(tmp_path / "restricted.pdf", user_password=False)
    result = run_exe(
        exe(bundle_dir),
        "chat",
        "--document",
        str(pdf),
        "--prompt",
        "What number is confidential?",
        "--max-tokens",
        "4",
        "--seed",
        "1",
        "--ctx",
        "1024",
        "--threads",
        "1",
        "--json",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr


TOOLS = ("llama-server", "ggml-rpc-server", "llama-bench")


def test_the_bundle_serves_the_embedded_model_with_its_own_llama_server(
    bundle_dir: Path, clean_env: dict[str, str], tmp_path: Path
) -> None:
    lib = bundle_dir / "_internal" / "llama_cpp" / "lib"
    for tool in TOOLS:
        assert os.access(lib / tool, os.X_OK), f"{tool} is not in the bundle's llama_cpp/lib"
    argv, reply = serve_and_ask(exe(bundle_dir), clean_env, tmp_path)
    assert Path(argv[0]) == lib / "llama-server"
    assert reply


def test_gui_opens_offscreen_and_draws_its_window(bundle_dir: Path, run_exe: Runner) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "bundle-gui.png"
    shot.unlink(missing_ok=True)
    result = run_exe(
        exe(bundle_dir),
        env={"QT_QPA_PLATFORM": "offscreen", "VRAMPILOT_SMOKE_SCREENSHOT": str(shot), "VRAMPILOT_SMOKE_SECONDS": "5"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert shot.is_file(), result.stderr
    from struct import unpack

    width, height = unpack(">II", shot.read_bytes()[16:24])
    assert width >= 640 and height >= 400


def test_torch_is_not_in_the_default_bundle(bundle_dir: Path) -> None:
    internal = bundle_dir / "_internal"
    assert not (internal / "torch").exists()
    assert not list(internal.glob("libtorch*"))
    assert not (internal / "vrampilot" / "hybrid").exists()


def test_bundle_fits_the_size_budget(bundle_dir: Path, bundle_variant: str) -> None:
    total = sum(p.stat().st_size for p in bundle_dir.rglob("*") if p.is_file() and not p.is_symlink())
    budget = CUDA_SIZE_BUDGET_BYTES if bundle_variant == "cuda" else SIZE_BUDGET_BYTES
    assert total < budget, f"{bundle_variant} bundle is {total / 2**20:.0f} MiB, budget {budget / 2**20:.0f} MiB"


def test_no_dangling_links(bundle_dir: Path) -> None:
    dangling = [p for p in bundle_dir.rglob("*") if p.is_symlink() and not p.exists()]
    assert not dangling


@pytest.mark.skipif(shutil.which("ldd") is None, reason="ldd missing")
def test_every_library_dependency_is_bundled_or_declared(bundle_dir: Path, bundle_variant: str) -> None:
    """What the bundle does not carry must be in the .deb's Depends, or the app breaks on a
    machine without it. (The check runs against this machine's libraries.)"""
    build_sh = (PACKAGING / "linux" / "build.sh").read_text()
    depends = re.search(r"^Depends: (.*)$", build_sh, flags=re.M)
    assert depends
    declared = {d.strip().split(" ")[0] for d in depends.group(1).split(",")}
    missing: dict[str, str] = {}
    tools = [bundle_dir / "_internal" / "llama_cpp" / "lib" / t for t in TOOLS]
    for path in [*bundle_dir.rglob("*.so*"), *tools]:
        if path.is_symlink() or not path.is_file():
            continue
        out = subprocess.run(
            ["ldd", str(path)], capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": ""}
        )
        for soname in re.findall(r"^\s*(\S+) => not found", out.stdout, flags=re.M):
            if not (bundle_dir / "_internal" / soname).exists() and not list(bundle_dir.rglob(soname)):
                missing.setdefault(soname, str(path.relative_to(bundle_dir)))
    if bundle_variant == "cuda":
        assert set(missing.get(s, "") for s in DRIVER_LIBRARIES) <= {"", "_internal/llama_cpp/lib/libggml-cuda.so"}
        missing = {s: by for s, by in missing.items() if s not in DRIVER_LIBRARIES}
    undeclared = {s: by for s, by in missing.items() if debian_package(s) not in declared}
    assert not undeclared, f"needed, neither bundled nor in Depends: {undeclared}"
