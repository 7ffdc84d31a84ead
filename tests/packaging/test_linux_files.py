"""The Linux desktop integration files and the AppImage runtime source, checked without a build."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING

LINUX = PACKAGING / "linux"
ICONS = PACKAGING / "icons"
MIME_NS = "{http://www.freedesktop.org/standards/shared-mime-info}"


def desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keys are case-sensitive: the documented way
    parser.read(LINUX / "vrampilot.desktop", encoding="utf-8")
    return parser["Desktop Entry"]


def test_desktop_entry_opens_gguf_files_in_the_gui() -> None:
    entry = desktop_entry()
    assert entry["Type"] == "Application"
    assert entry["Icon"] == "vrampilot"
    assert entry["Terminal"] == "false"
    # `vrampilot FILE` would be parsed as a subcommand: the GUI takes the file after `gui`.
    assert entry["Exec"] == "vrampilot gui %f"
    assert "application/x-gguf" in entry["MimeType"].split(";")


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_validates() -> None:
    result = subprocess.run(["desktop-file-validate", str(LINUX / "vrampilot.desktop")], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_mime_xml_declares_gguf_by_glob_and_magic() -> None:
    root = ET.parse(LINUX / "vrampilot-mime.xml").getroot()
    assert root.tag == f"{MIME_NS}mime-info"
    (mime,) = root.findall(f"{MIME_NS}mime-type")
    assert mime.get("type") == "application/x-gguf"
    assert [g.get("pattern") for g in mime.findall(f"{MIME_NS}glob")] == ["*.gguf"]
    match = mime.find(f"{MIME_NS}magic/{MIME_NS}match")
    assert match is not None and (match.get("value"), match.get("offset")) == ("GGUF", "0")


@pytest.mark.skipif(shutil.which("update-mime-database") is None, reason="shared-mime-info not installed")
def test_mime_xml_compiles_into_a_mime_database(tmp_path: Path) -> None:
    packages = tmp_path / "mime" / "packages"
    packages.mkdir(parents=True)
    shutil.copy(LINUX / "vrampilot-mime.xml", packages / "vrampilot.xml")
    subprocess.run(["update-mime-database", str(tmp_path / "mime")], check=True, capture_output=True)
    globs = (tmp_path / "mime" / "globs2").read_text()
    assert "application/x-gguf:*.gguf" in globs


def test_icons_exist_in_every_size_the_packages_install() -> None:
    from struct import unpack

    assert (ICONS / "vrampilot.svg").read_text().lstrip().startswith("<svg")
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        data = (ICONS / f"vrampilot-{size}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert unpack(">II", data[16:24]) == (size, size)
    ico = (ICONS / "vrampilot.ico").read_bytes()
    assert ico[:4] == b"\x00\x00\x01\x00" and unpack("<H", ico[4:6])[0] >= 4


@pytest.mark.parametrize("script", ["deb/postinst", "deb/postrm", "appimage/AppRun", "build.sh"])
def test_shell_scripts_parse(script: str) -> None:
    path = LINUX / script
    shell = "bash" if script.endswith(".sh") else "sh"
    assert path.stat().st_mode & 0o111, f"{script} must be executable"
    subprocess.run([shell, "-n", str(path)], check=True)


def test_maintainer_scripts_refresh_menu_and_mime_caches() -> None:
    for name in ("postinst", "postrm"):
        text = (LINUX / "deb" / name).read_text()
        assert "update-desktop-database" in text and "update-mime-database" in text


def test_spec_keeps_torch_out_and_bundles_the_model_where_paths_looks() -> None:
    spec = (PACKAGING / "vrampilot.spec").read_text()
    compile(spec, "vrampilot.spec", "exec")
    assert '"torch"' in spec and '"vrampilot.hybrid"' in spec
    assert '(str(model), "models")' in spec
    from vrampilot.paths import EMBEDDED_MODEL_FILE

    assert EMBEDDED_MODEL_FILE == "SmolLM2-135M-Instruct.Q4_1.gguf"


def _runtime_build_deps() -> bool:
    return (
        shutil.which("gcc") is not None
        and Path("/usr/include/squashfuse/ll.h").exists()
        and Path("/usr/include/fuse3/fuse_lowlevel.h").exists()
    )


@pytest.mark.skipif(not _runtime_build_deps(), reason="gcc, libsquashfuse-dev or libfuse3-dev missing")
def test_appimage_runtime_runs_an_appdir_by_extraction(tmp_path: Path) -> None:
    """Our runtime, on a tiny AppDir: the no-FUSE path (extract once, run AppRun) and the offset."""
    if shutil.which("mksquashfs") is None:
        pytest.skip("squashfs-tools missing")
    runtime = tmp_path / "runtime"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-static",
            "-o",
            str(runtime),
            str(LINUX / "appimage" / "runtime.c"),
            "-I/usr/include/squashfuse",
            "-I/usr/include/fuse3",
            "-lsquashfuse_ll",
            "-lsquashfuse",
            "-lfuse3",
            "-lzstd",
            "-llzma",
            "-llz4",
            "-llzo2",
            "-lz",
            "-lpthread",
            "-ldl",
        ],
        check=True,
        capture_output=True,
    )
    appdir = tmp_path / "AppDir"
    (appdir / "sub").mkdir(parents=True)
    (appdir / "sub" / "hello.txt").write_text("hello from the image\n")
    (appdir / "link").symlink_to("sub/hello.txt")
    apprun = appdir / "AppRun"
    apprun.write_text('#!/bin/sh\necho "args=$*"; cat "$APPDIR/link"; echo "image=$APPIMAGE"\n')
    apprun.chmod(0o755)
    image = tmp_path / "squash"
    subprocess.run(
        ["mksquashfs", str(appdir), str(image), "-root-owned", "-noappend", "-comp", "zstd", "-quiet", "-no-progress"],
        check=True,
        capture_output=True,
    )
    appimage = tmp_path / "Test.AppImage"
    data = bytearray(runtime.read_bytes())
    data[8:11] = b"AI\x02"
    appimage.write_bytes(bytes(data) + image.read_bytes())
    appimage.chmod(0o755)

    offset = subprocess.run([str(appimage), "--appimage-offset"], capture_output=True, text=True, check=True)
    assert int(offset.stdout) == runtime.stat().st_size
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "APPIMAGE_EXTRACT_AND_RUN": "1"}
    result = subprocess.run([str(appimage), "a", "b c"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["args=a b c", "hello from the image", f"image={appimage}"]
