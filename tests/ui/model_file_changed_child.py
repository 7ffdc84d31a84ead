"""The window with a loaded model whose file is cut on disk between two questions (see
test_model_file_changed.py). A SIGBUS would end this process, hence a child. argv[1]: the model
(a copy of the embedded one). Prints one RESULT line of JSON of what the user saw."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import cast

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from PySide6.QtWidgets import QApplication, QPushButton

from tests.ui.disk_full_child import wait


def main(model: Path) -> dict[str, object]:
    from tests.ui.conftest import FAST_PINS, seed_prefs
    from vrampilot.gguf import read_gguf
    from vrampilot.ui.app_context import build_context
    from vrampilot.ui.chat.controller import ChatState
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.plan.controller import LoadState
    from vrampilot.ui.prefs import Prefs
    from vrampilot.ui.services import build_services

    # instance() is typed as the QCoreApplication base; here it is a QApplication.
    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    seed_prefs(max_tokens=6)
    prefs = Prefs()
    prefs.set_pins_for(model, FAST_PINS)
    prefs.sync()
    ctx = build_context()
    w = MainWindow(ctx, build_services(ctx), initial_model=str(model))
    w.show()
    out: dict[str, object] = {
        "planned": wait(app, lambda: w.plans.plan is not None and w.plans.model_path == model, 60)
    }

    def ask(text: str) -> bool:
        w.chat_view.input.setPlainText(text)
        w.chat_view.send_button.click()
        return wait(app, lambda: w.chats.state is ChatState.IDLE and not w.ctx.tasks.is_running("plan"), 180)

    out["first"] = ask("Name a colour.") and [m.role for m in w.chat_view.messages()] == ["user", "assistant"]
    os.truncate(model, read_gguf(model).data_offset_bytes)  # cut in place, as a tool rewriting it would
    out["second_idle"] = ask("Another one?")
    out["banner"] = w.chat_view.banner_text.text() if w.chat_view.banner_visible() else ""
    out["load_state"] = w.plans.load_state.value
    out["stored"] = [m.role for m in ctx.store.messages(w.chats.chat_id)]  # type: ignore[arg-type]  # chat_id: set once a message was sent
    retry = w.chat_view.banner.findChild(QPushButton, "answer")
    if retry is not None:  # Try again: the file is loaded as it is now, and llama.cpp refuses it
        retry.click()
        wait(app, lambda: w.chats.state is ChatState.IDLE and w.plans.load_state is not LoadState.LOADING, 120)
        out["retry_banner"] = w.chat_view.banner_text.text() if w.chat_view.banner_visible() else ""
    out["send_enabled"] = w.chat_view.send_button.isEnabled()
    w.shutdown()
    ctx.close()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))), flush=True)
