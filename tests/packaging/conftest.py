"""Packaging checks. Two kinds:

- static ones (installer scripts compile, desktop entry and MIME XML are valid, the uninstaller
  undoes the installer): always run, in `make test`, skipping where a tool is missing;
- smoke tests of *built* artifacts: run by `make package-test`, which points at them with
  VRAMPILOT_BUNDLE (the PyInstaller onedir), VRAMPILOT_DEB, VRAMPILOT_APPIMAGE and
  VRAMPILOT_SETUP_EXE (the Windows installer, `make package-windows-test`); deselected
  (said in the run's header, not skipped) when those are unset, so `make test` never starts a
  stale bundle left in dist/ and no skip stands for them.

The bundle runs from a temporary directory with a minimal environment (no PYTHONPATH, no venv,
HOME and VRAMPILOT_HOME in tmp), so nothing can come from the source checkout.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
ARTIFACTS = REPO / "test-artifacts" / "packaging"


_ARTIFACTS = {
    "bundle_dir": "VRAMPILOT_BUNDLE",
    "deb_file": "VRAMPILOT_DEB",
    "appimage_file": "VRAMPILOT_APPIMAGE",
    "setup_exe": "VRAMPILOT_SETUP_EXE",  # the Windows installer, tested under Wine (make package-windows-test)
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of a built artifact whose variable is unset leave the run (`make package-test` runs them)."""
    unset = {f for f, var in _ARTIFACTS.items() if not os.environ.get(var)}
    left = [i for i in items if unset & set(getattr(i, "fixturenames", ()))]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [i for i in items if i not in left]
        _DESELECTED.append(len(left))


_DESELECTED: list[int] = []


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if not _DESELECTED:
        return None
    return (
        f"{sum(_DESELECTED)} tests of built installers deselected: `make package-test` runs them after `make package`"
    )


def _artifact(var: str) -> Path:
    value = os.environ.get(var)
    if not value:  # deselected above; a direct call still says why
        pytest.fail(f"{var} is not set (make package-test sets it after make package)")
    path = Path(value).resolve()
    if not path.exists():
        pytest.fail(f"{var}={value} does not exist: run `make package` first")
    return path


@pytest.fixture(scope="session")
def bundle_dir() -> Path:
    return _artifact("VRAMPILOT_BUNDLE")


CUDA_MANIFEST = "vrampilot-cuda.json"  # packaging/engine/cuda.py's, which only the CUDA variant carries


def bundle_variant_of(bundle: Path) -> str:
    """The variant: "cuda" for make package-cuda's bundle, else "default"."""
    return "cuda" if (bundle / "_internal" / "llama_cpp" / "lib" / CUDA_MANIFEST).is_file() else "default"


@pytest.fixture(scope="session")
def bundle_variant(bundle_dir: Path) -> str:
    return bundle_variant_of(bundle_dir)


@pytest.fixture(scope="session")
def deb_file() -> Path:
    return _artifact("VRAMPILOT_DEB")


@pytest.fixture(scope="session")
def appimage_file() -> Path:
    return _artifact("VRAMPILOT_APPIMAGE")


@pytest.fixture(scope="session")
def setup_exe() -> Path:
    return _artifact("VRAMPILOT_SETUP_EXE")


@pytest.fixture(scope="session")
def clean_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("bundle-home")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "VRAMPILOT_HOME": str(home / "vrampilot"),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }


Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def run_exe(clean_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Runner:
    """Run an executable from an empty directory with the clean environment."""
    cwd = tmp_path_factory.mktemp("bundle-cwd")

    def run(
        exe: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *args],
            cwd=cwd,
            env={**clean_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return run


def serve_and_ask(exe: Path | list[str], env: dict[str, str], cwd: Path) -> tuple[list[str], str]:
    """Start `exe serve` (the bundle's own llama-server) on a free loopback port, ask one chat
    completion, stop it with Ctrl-C; the llama-server command line it ran, and the reply.
    `exe` may be a command (["wine", "C:\\...\\vrampilot-cli.exe"]: Wine turns SIGINT into Ctrl-C)."""
    import http.client
    import json
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [str(exe)] if isinstance(exe, Path) else exe
    proc = subprocess.Popen(
        [*command, "serve", "--json", "--port", str(port), "--ctx", "1024", "--threads", "1"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        argv = [str(a) for a in json.loads(line)["argv"]]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 6}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        reply = json.loads(conn.getresponse().read())
        conn.close()
        return argv, str(reply["choices"][0]["message"]["content"])
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(60)
        assert status == 0, f"serve ended with {status} on Ctrl-C: {proc.stderr.read() if proc.stderr else ''}"
