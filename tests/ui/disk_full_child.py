"""The window on a full disk, in a private mount namespace with a small tmpfs as VRAMPILOT_HOME
(see test_disk_full_window.py). Prints one JSON line of what the user saw.

argv[1]: "reply" (the disk fills while a reply streams) or "start" (it is full before the app starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton

HOME = Path(os.environ["VRAMPILOT_HOME"])
FILLER = HOME / "filler.bin"


def fill() -> None:
    free = shutil.disk_usage(HOME).free
    with contextlib.suppress(OSError), open(FILLER, "wb") as f:
        f.write(b"\0" * free)


def wait(app: QApplication, cond: Callable[[], object], cpu_s: float) -> bool:
    """Turns of the event loop until `cond()`, bounded by work (tests/waits.py), not the clock."""
    from tests import waits

    def turn() -> None:
        app.processEvents()
        time.sleep(0.01)

    return waits.holds(turn, cond, cpu_s=cpu_s)


def reply() -> dict[str, object]:
    from tests.ui.conftest import seed_prefs
    from vrampilot.ui.app_context import build_context
    from vrampilot.ui.chat.controller import ChatState
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.services import build_services

    # instance() is typed as the QCoreApplication base; here it is a QApplication.
    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    seed_prefs(max_tokens=6)
    ctx = build_context()
    w = MainWindow(ctx, build_services(ctx))
    w.show()
    out: dict[str, object] = {"planned": wait(app, lambda: w.plans.plan is not None, cpu_s=120)}
    # The disk fills up while the reply streams: after the question was stored.
    ctx.engine.text.connect(lambda _t: None if FILLER.exists() else fill())
    w.chat_view.input.setPlainText("Hi!")
    w.chat_view.send_button.click()
    out["idle"] = wait(app, lambda: w.chats.state is ChatState.IDLE and w.chat_view.banner_visible(), cpu_s=240)
    out["banner"] = w.chat_view.banner_text.text()
    out["send_enabled"] = w.chat_view.send_button.isEnabled()
    out["reply_on_screen"] = [m.role for m in w.chat_view.messages()]
    out["stored_before"] = [m.role for m in ctx.store.messages(w.chats.chat_id)]  # type: ignore[arg-type]  # chat_id: set once a message was sent
    FILLER.unlink()
    save = w.chat_view.banner.findChild(QPushButton, "save_again")
    out["save_again"] = save is not None
    if save is not None:
        save.click()
        app.processEvents()
    out["stored_after"] = [m.role for m in ctx.store.messages(w.chats.chat_id)]  # type: ignore[arg-type]  # chat_id: set once a message was sent
    w.shutdown()
    ctx.close()
    return out


def start() -> dict[str, object]:
    from vrampilot.ui.launch import launch_gui

    fill()
    # instance() is typed as the QCoreApplication base; here it is a QApplication.
    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    seen: list[str] = []

    def answer_the_dialog() -> None:
        box = app.activeModalWidget()
        if isinstance(box, QMessageBox):
            seen.append(box.text())
            box.accept()
        else:
            QTimer.singleShot(100, answer_the_dialog)

    QTimer.singleShot(100, answer_the_dialog)
    code = launch_gui()
    return {"exit_code": code, "dialog": seen}


if __name__ == "__main__":
    result = reply() if sys.argv[1] == "reply" else start()
    print("RESULT " + json.dumps(result))
