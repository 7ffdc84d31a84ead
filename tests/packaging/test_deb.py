"""The .deb, unpacked into a scratch root with dpkg-deb -x (VRAMPILOT_DEB; make package-test)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import Runner

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb missing")


@pytest.fixture(scope="module")
def root(deb_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("deb-root")
    subprocess.run(["dpkg-deb", "-x", str(deb_file), str(target)], check=True)
    return target


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def test_control_fields(deb_file: Path) -> None:
    from vrampilot import __version__

    cuda = "cuda" in deb_file.name  # make package-cuda's vrampilot-cuda_<version>_<arch>.deb
    assert field(deb_file, "Package") == ("vrampilot-cuda" if cuda else "vrampilot")
    # Both install /opt/vrampilot and /usr/bin/vrampilot: one replaces the other.
    assert field(deb_file, "Conflicts") == field(deb_file, "Replaces") == ("vrampilot" if cuda else "vrampilot-cuda")
    assert field(deb_file, "Version") == __version__
    depends = field(deb_file, "Depends")
    assert "libc6 (>= " in depends and "libxcb-cursor0" in depends
    assert "torch" not in depends


def test_maintainer_scripts(deb_file: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-e", str(deb_file), str(tmp_path / "DEBIAN")], check=True)
    postinst = (tmp_path / "DEBIAN" / "postinst").read_text()
    assert "update-desktop-database" in postinst and "update-mime-database" in postinst
    assert os.access(tmp_path / "DEBIAN" / "postrm", os.X_OK)


def test_program_under_opt_with_a_link_in_usr_bin(root: Path) -> None:
    exe = root / "opt" / "vrampilot" / "vrampilot"
    assert exe.is_file() and os.access(exe, os.X_OK)
    assert (root / "opt/vrampilot/_internal/models/SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    link = root / "usr" / "bin" / "vrampilot"
    assert link.is_symlink() and os.readlink(link) == "/opt/vrampilot/vrampilot"


def test_started_through_a_symlink_it_finds_its_files(root: Path, tmp_path: Path, run_exe: Runner) -> None:
    """/usr/bin/vrampilot is a link: the bundle must resolve it to find _internal/."""
    link = tmp_path / "vrampilot"
    link.symlink_to(root / "opt" / "vrampilot" / "vrampilot")
    result = run_exe(link, "--version")
    assert result.returncode == 0, result.stderr


def test_menu_entry_icon_and_gguf_type(root: Path) -> None:
    share = root / "usr" / "share"
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # case-sensitive keys: the documented way
    parser.read(share / "applications" / "vrampilot.desktop")
    entry = parser["Desktop Entry"]
    assert entry["Exec"].split()[0] == "vrampilot"  # found on PATH through /usr/bin
    assert "application/x-gguf" in entry["MimeType"]
    icon = entry["Icon"]
    assert (share / "icons/hicolor/scalable/apps" / f"{icon}.svg").is_file()
    for size in (16, 32, 48, 64, 128, 256, 512):
        assert (share / f"icons/hicolor/{size}x{size}/apps/{icon}.png").is_file()
    assert (share / "mime" / "packages" / "vrampilot.xml").is_file()
    (copyright_file,) = (share / "doc").glob("*/copyright")
    assert copyright_file.parent.name in ("vrampilot", "vrampilot-cuda")  # the package's own name
    if copyright_file.parent.name == "vrampilot-cuda":
        assert "NVIDIA's license" in copyright_file.read_text()
        licences = root / "opt/vrampilot/_internal/llama_cpp/lib/cuda-licences"
        assert sorted(p.name for p in licences.iterdir()) == [
            "nvidia_cublas-License.txt",
            "nvidia_cuda_runtime-License.txt",
        ]


@pytest.mark.skipif(shutil.which("update-mime-database") is None, reason="shared-mime-info missing")
def test_mime_database_maps_gguf_after_the_postinst_step(root: Path) -> None:
    """What postinst runs, on the scratch root: *.gguf must come out as application/x-gguf."""
    mime = root / "usr" / "share" / "mime"
    subprocess.run(["update-mime-database", str(mime)], check=True, capture_output=True)
    assert "application/x-gguf:*.gguf" in (mime / "globs2").read_text()
