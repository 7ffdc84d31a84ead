"""`vrampilot` / `vrampilot gui`: open the main window, or say in one line why it cannot open.

PySide6 is imported only here, lazily, so the CLI works on machines without a display or Qt libs.
"""

from __future__ import annotations

import os
import sys

CLI_HINT = "use the command line instead: vrampilot doctor | plan | chat (see vrampilot --help)"


def display_problem() -> str | None:
    """Why Qt could not open a window here, or None. Checked before Qt aborts with its own error."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform.split(";")[0] in ("offscreen", "minimal", "vnc", "eglfs", "linuxfb"):
        return None
    if not sys.platform.startswith("linux"):
        return None
    wayland = bool(os.environ.get("WAYLAND_DISPLAY"))
    x11 = bool(os.environ.get("DISPLAY"))
    if not wayland and not x11:
        return "no display found (neither DISPLAY nor WAYLAND_DISPLAY is set)"
    if x11 and not wayland:
        from vrampilot.ui.qt_libs import xcb_problem

        return xcb_problem()
    return None


def _window_icon():  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QIcon

    from vrampilot.paths import resources_dir

    try:
        path = resources_dir() / "icons" / "vrampilot.png"
    except FileNotFoundError:
        return None
    return QIcon(str(path)) if path.is_file() else None


def launch_gui(model: str | None = None) -> int:
    problem = display_problem()
    if problem:
        print(f"vrampilot: cannot open the app window: {problem}; {CLI_HINT}", file=sys.stderr)
        return 1
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:
        print(f"vrampilot: cannot open the app window: PySide6 is not usable ({exc}); {CLI_HINT}", file=sys.stderr)
        return 1

    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.theme import apply_theme

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("VRAM Pilot")
    app.setOrganizationName("VRAMPilot")
    # Lets Wayland and the desktop match the window to the menu entry (vrampilot.desktop).
    app.setDesktopFileName("vrampilot")
    icon = _window_icon()
    if icon is not None:
        app.setWindowIcon(icon)
    apply_theme(app)  # type: ignore[arg-type]
    window = MainWindow(initial_model=model)
    window.show()
    code = app.exec()
    window.shutdown()
    return int(code)
