"""Start the app as a user does (`launch_gui`, offscreen) and report what they saw: the dialogs and
notices it showed, whether the window opened, the exit code. Used by test_data_folder.py, which
damages or locks the data folder first. Prints one line "RESULT <json>".

Every dialog is answered and an opened window is closed once it has shown, so the run ends by
itself; a start that neither opens nor refuses is ended after DEADLINE_S with exit code 99.
"""

from __future__ import annotations

import json
import os
import sys
from typing import cast

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

DEADLINE_S = 240.0


def main() -> dict[str, object]:
    from vrampilot.ui.launch import launch_gui

    # instance() is typed as the QCoreApplication base; here it is a QApplication.
    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    seen: list[str] = []
    opened: list[bool] = []

    def look() -> None:
        box = app.activeModalWidget()
        if isinstance(box, QMessageBox):  # a start refused: the dialog, answered
            seen.append(box.text())
            box.accept()
        # Looked up by name: importing the window here would do, before the app's own checks, what
        # they are there to catch (the engine's import writes to the cache folder).
        windows = [w for w in app.topLevelWidgets() if type(w).__name__ == "MainWindow" and w.isVisible()]
        if windows:
            notices = [w for w in app.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
            seen.extend(n.text() for n in notices)
            opened.append(True)
            windows[0].close()
            return
        QTimer.singleShot(100, look)

    QTimer.singleShot(100, look)
    QTimer.singleShot(int(DEADLINE_S * 1000), lambda: app.exit(99))
    code = launch_gui()
    return {"exit_code": code, "dialogs": seen, "window_opened": bool(opened)}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
