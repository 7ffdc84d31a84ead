"""A model whose file name no cmd line can hold safely, in the window: Export for cmd says why
and copies nothing; bash gets a line that bash runs with the name intact."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from PySide6.QtGui import QAction, QGuiApplication
from pytestqt.qtbot import QtBot

from tests import waits
from tests.export.test_hostile_names import DUMP_ARGV
from tests.ui.conftest import OpenWindow
from vrampilot.paths import embedded_model_path
from vrampilot.server.binaries import tool_path
from vrampilot.ui.main_window import MainWindow


def test_export_refuses_for_cmd_and_quotes_for_bash(open_window: OpenWindow, qtbot: QtBot, tmp_path: Path) -> None:
    model = tmp_path / '100% "x" & \x1b[2J\nmodel.gguf'
    shutil.copy(embedded_model_path(), model)  # type: ignore[arg-type]  # the embedded model is installed here
    w: MainWindow = open_window(initial_model=str(model))
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == model, timeout=20000)
    clipboard = QGuiApplication.clipboard()
    clipboard.setText("what the user had")
    for shell in ("cmd", "powershell"):
        act = w.findChild(QAction, f"menu_export_{shell}")
        assert act is not None
        act.trigger()
        assert clipboard.text() == "what the user had"
        assert "cannot write" in w.status.text() and "rename the file" in w.status.text()
    w.findChild(QAction, "menu_export_bash").trigger()  # type: ignore[union-attr]  # the window has this menu action
    line = clipboard.text()
    dump = tmp_path / "llama-server"
    dump.write_text(DUMP_ARGV)
    dump.chmod(0o755)
    # The same line with a stand-in for llama-server that writes down the argv it was given.
    server = str(tool_path("llama-server"))
    assert server in line
    out = tmp_path / "argv"
    subprocess.run(
        ["bash", "-c", line.replace(server, str(dump))],
        env={**os.environ, "ARGV_OUT": str(out)},
        check=True,
        timeout=60,
    )
    args = out.read_bytes().split(b"\0")[:-1]
    assert args[:2] == [b"-m", os.fsencode(model)]


def test_a_megabyte_architecture_is_listed_on_one_short_line(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    """The library lists each file's architecture: a header holding a megabyte there is shown cut,
    not laid out in full (which kept the window's thread busy for seconds)."""
    from testkit.gguf_models import kv_string, write_raw_header

    hostile = write_raw_header(tmp_path / "arch.gguf", n_kv=1, body=kv_string("general.architecture", "x" * 1_000_000))
    w: MainWindow = open_window()
    w.library.add_models([hostile])
    tree = w.library_view.tree

    def cell() -> str:
        texts = [tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount())]  # type: ignore[union-attr]  # i < count
        return next((t for t in texts if t.startswith("arch.gguf")), "")

    waits.until(qtbot, lambda: "xxx" in cell(), cpu_s=30)
    assert len(cell()) < 500


def test_a_model_whose_name_is_not_utf8_is_planned_and_its_load_refused_in_one_line(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    """A Linux name may hold bytes that are not UTF-8: the window did not open with such a model
    (its library and its pins keyed the path as UTF-8). It plans it (the planner passes the bytes
    to llama.cpp); llama-cpp-python cannot open it, which the load says in one line."""
    model = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.gguf"))
    shutil.copy(embedded_model_path(), model)  # type: ignore[arg-type]  # the embedded model is installed here
    w: MainWindow = open_window(initial_model=str(model))
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == model, timeout=20000)
    assert w.plans.plan is not None and w.plans.plan.fits
    w.plans.load()
    qtbot.waitUntil(lambda: "Could not load" in w.status.text(), timeout=20000)
    assert "llama-cpp-python opens only files whose path is UTF-8 text" in w.status.text()
