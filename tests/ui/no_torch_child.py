"""The app's real window start (`launch_gui`) in a process where `import torch` fails, as on a machine
without the optional `hybrid` extra (see test_no_torch.py).

argv[1]: the module names to refuse, comma-separated: "torch", or "torch,vrampilot.hybrid" as in the
installers' bundle, which leaves the whole package out. A meta-path finder placed first refuses them
(and their submodules) and records every attempt, before anything from the app is imported. The
window opens offscreen on a chat stored with the hybrid backend, answers it with llama.cpp, and the
process prints one JSON line of what it saw.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

REFUSED = tuple(sys.argv[1].split(",")) if len(sys.argv) > 1 else ("torch",)
BLOCKED: list[str] = []


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if any(fullname == name or fullname.startswith(name + ".") for name in REFUSED):
            BLOCKED.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by the test)", name=fullname)
        return None


sys.meta_path.insert(0, _NoTorch())

import json  # noqa: E402
from collections.abc import Callable  # noqa: E402

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtGui import QStandardItemModel  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def _wait(cond: Callable[[], bool], cpu_s: float) -> bool:
    """Run the event loop until `cond()`, bounded by work (tests/waits.py). Not QTest.qWait:
    PySide6 holds the GIL while it sleeps, which starves the app's worker threads (an import of
    torch took 90 s instead of 2)."""
    from tests import waits

    def turn() -> None:
        loop = QEventLoop()
        QTimer.singleShot(20, loop.quit)
        loop.exec()

    return waits.holds(turn, cond, cpu_s=cpu_s)


def main() -> int:
    from vrampilot.engine import SamplingParams
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.plan import Pins
    from vrampilot.storage import ChatStore
    from vrampilot.ui.chat.controller import ChatState
    from vrampilot.ui.launch import launch_gui
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.prefs import Prefs

    qapp = QApplication.instance() or QApplication(sys.argv[:1])
    # A chat saved when torch was still installed, reopened at start; one thread and few tokens.
    store = ChatStore()
    chat = store.create_chat(backend="hybrid")
    store.close()
    model = embedded_model_path()
    assert model is not None
    prefs = Prefs()
    prefs.set_pins_for(model, Pins(n_ctx=1024, n_threads=1, n_threads_batch=1))
    prefs.set_sampling(SamplingParams(temperature=0.0, max_tokens=6, seed=1))
    prefs.set_last_chat(chat.id)
    prefs.sync()
    out: dict[str, object] = {}

    def drive() -> None:
        try:
            w = next(x for x in QApplication.topLevelWidgets() if isinstance(x, MainWindow))
            out["window"] = _wait(lambda: w.plans.plan is not None, cpu_s=120)
            view = w.chat_view
            combo = view.backend
            index = combo.findData("hybrid")
            model_ = combo.model()
            assert isinstance(model_, QStandardItemModel)
            out["hybrid_listed"] = index >= 0
            out["hybrid_label"] = combo.itemText(index)
            out["hybrid_enabled"] = model_.item(index).isEnabled()
            out["hybrid_tooltip"] = model_.item(index).toolTip()
            out["combo_tooltip"] = combo.toolTip()
            out["chat_id"] = w.chats.chat_id == chat.id
            out["backend_shown"] = view.current_backend()
            out["note"] = view.backend_note.text() if not view.backend_note.isHidden() else ""
            view.input.setPlainText("Hi!")
            view.send_button.click()
            out["replied"] = _wait(lambda: len(view.messages()) == 2 and w.chats.state is ChatState.IDLE, cpu_s=240)
            stored = w.ctx.store.messages(chat.id)
            out["reply"] = stored[-1].content if stored else ""
            out["reply_stats"] = stored[-1].stats if stored else None
            out["torch_in_sys_modules"] = "torch" in sys.modules
            w.close()
        except Exception as exc:  # reported in the JSON line: the test shows it
            out["error"] = f"{type(exc).__name__}: {exc}"
            qapp.quit()

    QTimer.singleShot(0, drive)
    code = launch_gui()
    out["exit_code"] = code
    out["blocked_imports"] = BLOCKED
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
