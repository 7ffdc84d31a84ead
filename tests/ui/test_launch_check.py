"""The launch pre-check: the libraries Qt's X11 plugin needs, read from the real plugin's ELF file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vrampilot.ui import launch
from vrampilot.ui.qt_libs import debian_package, elf_needed, missing_for_xcb, qt_dir, xcb_problem

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb plugin is Linux-only")


@pytest.fixture(scope="module")
def qt() -> Path:
    found = qt_dir()
    assert found is not None and (found / "plugins" / "platforms" / "libqxcb.so").is_file()
    return found


def test_the_plugins_own_dependencies_are_read_from_its_elf_header(qt: Path) -> None:
    needed = elf_needed(qt / "plugins" / "platforms" / "libqxcb.so")
    assert "libQt6XcbQpa.so.6" in needed
    assert elf_needed(Path(__file__)) == []  # not ELF: nothing, no exception


def test_every_missing_library_is_named_with_its_package_in_one_apt_line(qt: Path) -> None:
    # A desktop without libxcb-icccm4 and libxcb-keysyms1 (the case that aborted `make run`).
    absent = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0"}
    missing = missing_for_xcb(qt, loadable=lambda soname: soname not in absent)
    assert set(missing) == absent  # found through libQt6XcbQpa, not only the plugin's direct list
    problem = xcb_problem(qt, loadable=lambda soname: soname not in absent)
    assert problem is not None
    assert "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in problem


def test_a_complete_system_has_no_problem(qt: Path) -> None:
    assert xcb_problem(qt, loadable=lambda soname: True) is None


def test_the_launcher_says_it_before_qt_aborts(qt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    # Whatever this machine has: the answer is exactly what the loader says about the plugin.
    expected = xcb_problem(qt)
    assert launch.display_problem() == expected


def test_debian_package_names() -> None:
    assert debian_package("libxcb-cursor.so.0") == "libxcb-cursor0"
    assert debian_package("libxkbcommon-x11.so.0") == "libxkbcommon-x11-0"
    assert debian_package("libEGL.so.1") == "libegl1"
