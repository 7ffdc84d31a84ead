"""The Windows installer script: it compiles with makensis (NSIS runs on Linux), against a dummy
payload shaped like the PyInstaller onedir, and its uninstaller removes what the installer wrote."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING

NSI = PACKAGING / "windows" / "vrampilot.nsi"


@pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis missing (apt-get install nsis)")
def test_installer_script_compiles(tmp_path: Path) -> None:
    payload = tmp_path / "vrampilot"
    (payload / "_internal" / "models").mkdir(parents=True)
    for name in ("vrampilot.exe", "vrampilot-cli.exe"):
        (payload / name).write_bytes(b"MZ dummy")
    (payload / "_internal" / "models" / "model.gguf").write_bytes(b"GGUF")
    out = tmp_path / "VRAMPilot-0.0.0-setup.exe"
    target = "-XTarget amd64-unicode"  # the 64-bit stub, as packaging/windows/build.py builds it
    result = subprocess.run(
        ["makensis", "-V2", "-WX", target, "-DVERSION=0.0.0", f"-DSOURCE_DIR={payload}", f"-DOUTFILE={out}", str(NSI)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr  # -WX: a warning fails too
    assert out.read_bytes()[:2] == b"MZ"
    pe = out.read_bytes()
    machine = pe[int.from_bytes(pe[0x3C:0x40], "little") + 4 :][:2]
    assert machine == b"\x64\x86", "not a 64-bit (AMD64) installer"


def _sections(text: str) -> tuple[str, str]:
    """Installer and uninstaller parts: uninstaller sections are named "un.…"."""
    install: list[str] = []
    uninstall: list[str] = []
    for block in re.findall(r"^Section\b.*?^SectionEnd", text, flags=re.S | re.M):
        header = block.splitlines()[0]
        (uninstall if re.search(r'"un\.', header) else install).append(block)
    return "\n".join(install), "\n".join(uninstall)


def _expand(text: str, value: str) -> str:
    defines = dict(re.findall(r'^!define\s+(\w+)\s+"([^"]*)"', text, flags=re.M))
    for _ in range(3):
        value = re.sub(r"\$\{(\w+)\}", lambda m: defines.get(m.group(1), m.group(0)), value)
    return value


def test_uninstaller_removes_every_registry_key_and_shortcut_the_installer_writes() -> None:
    text = NSI.read_text()
    install, uninstall = _sections(text)
    written = {
        (root, _expand(text, key))
        for root, key in re.findall(r'WriteReg(?:Str|DWORD|ExpandStr)\s+(HK\w+)\s+"([^"]+)"', install)
    }
    deleted_keys = {
        (root, _expand(text, key))
        for root, key in re.findall(r'DeleteRegKey\s+(?:/ifempty\s+)?(HK\w+)\s+"([^"]+)"', uninstall)
    }
    deleted_values = {
        (root, _expand(text, key)) for root, key in re.findall(r'DeleteRegValue\s+(HK\w+)\s+"([^"]+)"', uninstall)
    }
    assert written
    for root, key in written:
        covered = any(root == r and (key == k or key.startswith(k + "\\")) for r, k in deleted_keys | deleted_values)
        assert covered, f"the uninstaller leaves {root}\\{key} behind"
    for link in re.findall(r'CreateShortCut\s+"([^"]+)"', install):
        assert f'Delete "{link}"' in uninstall, f"the uninstaller leaves the shortcut {link}"
    assert "WriteUninstaller" in install and 'Delete "$INSTDIR\\uninstall.exe"' in uninstall


def test_installer_offers_desktop_shortcut_and_gguf_association() -> None:
    text = NSI.read_text()
    assert re.search(r'^Section /o "Desktop shortcut"', text, flags=re.M), "desktop shortcut: optional, off"
    assert '"Software\\Classes\\.gguf\\OpenWithProgids"' in text
    assert 'gui "%1"' in text  # the GUI subcommand takes the double-clicked file
