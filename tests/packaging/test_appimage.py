"""The AppImage (VRAMPILOT_APPIMAGE; make package-test): a type-2 image whose payload is the bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import Runner


def test_is_an_executable_type2_appimage(appimage_file: Path) -> None:
    head = appimage_file.read_bytes()[:11]
    assert head[:4] == b"\x7fELF" and head[8:11] == b"AI\x02"
    assert os.access(appimage_file, os.X_OK)


@pytest.mark.skipif(shutil.which("unsquashfs") is None, reason="squashfs-tools missing")
def test_appdir_layout(appimage_file: Path, run_exe: Runner) -> None:
    offset = run_exe(appimage_file, "--appimage-offset")
    assert offset.returncode == 0, offset.stderr
    listing = subprocess.run(
        ["unsquashfs", "-o", offset.stdout.strip(), "-l", "-d", "", str(appimage_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for path in (
        "/AppRun",
        "/vrampilot.desktop",
        "/vrampilot.png",
        "/.DirIcon",
        "/opt/vrampilot/vrampilot",
        "/opt/vrampilot/_internal/models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "/usr/share/mime/packages/vrampilot.xml",
    ):
        assert path in listing, path


def test_runs_the_bundle(appimage_file: Path, run_exe: Runner) -> None:
    """Mounted with FUSE where the machine has it, else extracted once: the app answers either way."""
    result = run_exe(appimage_file, "plan", "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)["model"]
    assert "/opt/vrampilot/_internal/models/" in model


def test_runs_without_fuse_by_extracting(appimage_file: Path, run_exe: Runner, tmp_path: Path) -> None:
    result = run_exe(
        appimage_file, "doctor", "--json", env={"APPIMAGE_EXTRACT_AND_RUN": "1", "TMPDIR": str(tmp_path)}, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["llama_cpp"]["error"] is None
    assert list(tmp_path.glob("appimage_extracted_*/AppRun"))
