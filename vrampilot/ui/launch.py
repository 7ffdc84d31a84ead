"""`vrampilot` / `vrampilot gui`: open the main window, or say in one line why it cannot open.

PySide6 is imported only here, lazily, so the CLI works on machines without a display or Qt libs.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtGui import QIcon

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


def _window_icon() -> QIcon | None:
    from PySide6.QtGui import QIcon

    from vrampilot.paths import resources_dir

    try:
        path = resources_dir() / "icons" / "vrampilot.png"
    except FileNotFoundError:
        return None
    return QIcon(str(path)) if path.is_file() else None


def launch_gui(model: str | None = None) -> int:
    """The composition root: build the application context, then the window around it."""
    problem = display_problem()
    if problem:
        print(f"vrampilot: cannot open the app window: {problem}; {CLI_HINT}", file=sys.stderr)
        return 1
    try:
        from PySide6.QtCore import QObject, Signal
        from PySide6.QtWidgets import QApplication, QMessageBox
    except ImportError as exc:
        print(f"vrampilot: cannot open the app window: PySide6 is not usable ({exc}); {CLI_HINT}", file=sys.stderr)
        return 1

    from vrampilot.errors import UserError
    from vrampilot.paths import data_dir
    from vrampilot.ui.instance import InstanceLock

    try:
        # Creating the data folder fails too on a read-only mount where it does not exist yet.
        instance = InstanceLock(data_dir())
        first = instance.acquire()
    except OSError as exc:  # the data folder cannot be written at all (read-only, no inodes left)
        text = f"VRAM Pilot cannot start: {exc.filename or 'the data folder'}: {exc.strerror or exc}"
        print(f"vrampilot: {text}", file=sys.stderr)
        # Started from a menu there is no terminal to read that line in: a dialog too.
        existing = QApplication.instance()
        _app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
        QMessageBox.critical(None, "VRAM Pilot", text)
        return 1
    if not first:
        if instance.ask_first_to_raise():
            print("vrampilot: already open for this data folder: its window was raised", file=sys.stderr)
            return 0
        print(f"vrampilot: another VRAM Pilot holds {data_dir()} and does not answer", file=sys.stderr)
        return 1

    from vrampilot.ui.app_context import build_context
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.services import build_services
    from vrampilot.ui.theme import apply_theme

    # Worker threads (engine loop, sampler, pool tasks) run Python too; a shorter GIL switch
    # interval hands the GUI thread the interpreter sooner, so a busy worker cannot hold the event
    # loop for several 5 ms default slices in a row.
    sys.setswitchinterval(0.001)
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setApplicationName("VRAM Pilot")
    app.setOrganizationName("VRAMPilot")
    # Lets Wayland and the desktop match the window to the menu entry (vrampilot.desktop).
    app.setDesktopFileName("vrampilot")
    icon = _window_icon()
    if icon is not None:
        app.setWindowIcon(icon)
    apply_theme(app)
    try:
        ctx = build_context()
    except (UserError, OSError) as exc:
        # A full or read-only disk, a database from a newer version: say so, in a window and here.
        text = f"VRAM Pilot cannot start: {exc}"
        print(f"vrampilot: {text}", file=sys.stderr)
        QMessageBox.critical(None, "VRAM Pilot", text)
        instance.release()
        return 1
    window = MainWindow(ctx, build_services(ctx), initial_model=model)

    class _Raiser(QObject):
        requested = Signal()

    raiser = _Raiser()
    raiser.requested.connect(window.raise_window)
    instance.serve(raiser.requested.emit)  # a second start asks, from the listener's thread
    window.show()
    if ctx.prefs.problem:
        # Said once, here and in a box that does not hold the window up (the app works meanwhile).
        print(f"vrampilot: {ctx.prefs.problem}", file=sys.stderr)
        notice = QMessageBox(QMessageBox.Icon.Warning, "VRAM Pilot", ctx.prefs.problem, parent=window)
        notice.setObjectName("settings_problem")
        notice.setModal(False)
        notice.show()
    code = app.exec()
    window.shutdown()
    ctx.close()
    instance.release()
    return int(code)
