"""Chatting about an image in the real window, on real llama.cpp: the embedded SmolLM2 with a
random-weight LLaVA-style projector (testkit/mmproj.py) beside it. The Plan panel finds the
projector and plans it (on, then kept on the CPU, its reason given); images are attached by a drop
onto the input, refused in one line when bad (the typed text stays), shown as thumbnails, copied
into the data folder, sent through the projector, sent again on regenerate and after a restart."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from testkit.mmproj import write_projector
from tests import waits
from tests.images import png_bytes
from tests.ui.conftest import FAST_PINS, OpenWindow, open_chat, screenshot
from vrampilot.engine import SamplingParams
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow

pytestmark = pytest.mark.slow
IMAGE_TOKENS = 256  # the 224-pixel mlp projector: (224 / 14)^2 patches


@pytest.fixture
def vision_model(tmp_path: Path, embedded_model: Path) -> Path:
    """The embedded model in a folder of its own, with a projector that fits it beside it (as the
    Hub's "with its vision projector" download leaves them)."""
    folder = tmp_path / "models"
    folder.mkdir()
    model = folder / embedded_model.name
    model.symlink_to(embedded_model)
    write_projector(folder / "mmproj-model-f16.gguf", "mlp", n_embd_text=576, image_size=224)
    from vrampilot.ui.prefs import Prefs

    prefs = Prefs()
    prefs.set_pins_for(model, FAST_PINS)
    prefs.set_sampling(SamplingParams(temperature=0.0, max_tokens=8, seed=1))
    prefs.sync()
    return model


def _drop(w: MainWindow, *files: Path) -> bool:
    """Drop files onto the chat's input, as a file manager does; whether the drag was taken."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(f)) for f in files])
    target = w.chat_view.input.viewport()  # where a drop lands on a text box
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, buttons, mods)
    enter.ignore()
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    QApplication.sendEvent(target, QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, buttons, mods))
    return True


def test_chat_about_an_image_in_the_window(
    open_window: OpenWindow, qtbot: QtBot, vision_model: Path, tmp_path: Path, home: Path
) -> None:
    w = open_window(initial_model=str(vision_model))
    view, pv = w.chat_view, w.plan_view
    control = pv.projector
    waits.until(qtbot, lambda: control.on.isEnabled(), cpu_s=30)
    assert control.file.text() == "mmproj-model-f16.gguf beside the model fits it"
    assert w.plans.plan is not None and not w.plans.plan.settings.mmproj_path

    pictures = tmp_path / "pictures"
    pictures.mkdir()
    png = png_bytes(64, 48)
    (pictures / "gradient.png").write_bytes(png)
    (pictures / "notes.png").write_bytes(b"plain text, not an image")
    (pictures / "cut.png").write_bytes(png[: len(png) // 2])

    # Without the projector an image is not sent: the text and the image stay.
    qtbot.keyClicks(view.input, "What is in this picture?")
    assert _drop(w, pictures / "gradient.png")
    assert view.attachments.paths() == [pictures / "gradient.png"]
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    assert "images need the model's vision projector" in view.banner_text.text()
    assert view.input.toPlainText() == "What is in this picture?"
    assert view.attachments.paths() == [pictures / "gradient.png"]
    assert w.ctx.store.list_chats() == []

    # Bad images are refused in one line each; nothing else is lost.
    assert _drop(w, pictures / "notes.png", pictures / "cut.png")
    assert view.banner_text.text() == (
        "Not attached: notes.png: not an image this engine reads (PNG, JPEG, GIF or BMP); "
        "cut.png: the image is damaged or cut short (it could not be decoded)"
    )
    assert view.attachments.paths() == [pictures / "gradient.png"]
    assert view.input.toPlainText() == "What is in this picture?"
    screenshot(w, "vision-attach-refused")

    # The projector on: planned on the CPU (a CPU plan), its reason given.
    qtbot.mouseClick(control.on, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.plans.plan is not None and bool(w.plans.plan.settings.mmproj_path), cpu_s=60)
    plan = w.plans.plan
    assert plan is not None and plan.memory.projector is not None
    assert Path(plan.settings.mmproj_path) == vision_model.parent / "mmproj-model-f16.gguf"
    reasons = pv.reasons.text()
    assert "Vision projector mmproj-model-f16.gguf (mlp) on the CPU" in reasons
    assert f"{IMAGE_TOKENS} tokens per image (224x224)" in reasons
    assert control.cpu.isEnabled()
    for widget, name in ((control.parentWidget(), "vision-plan-settings"), (pv.reasons, "vision-plan-reasons")):
        assert widget is not None
        screenshot(widget, name)
    # "Let the planner choose everything" keeps it: the projector is the user's choice.
    qtbot.mouseClick(pv.findChild(type(pv.load_button), "reset_pins"), Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.plans.plan is not None and w.plans.plan.pins.n_ctx is None, cpu_s=60)
    assert w.plans.plan is not None and w.plans.plan.settings.mmproj_path
    w.plans.set_pins(replace(FAST_PINS, mmproj_path=w.plans.plan.settings.mmproj_path))  # small again
    waits.until(qtbot, lambda: w.plans.plan is not None and w.plans.plan.settings.n_ctx == 1024, cpu_s=60)

    # Sent: loaded with the projector, the image evaluated through it.
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    assert view.input.toPlainText() == "" and view.attachments.paths() == []
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=300)
    chat_id = open_chat(w)
    stored = w.ctx.store.messages(chat_id)
    assert [m.role for m in stored] == ["user", "assistant"], view.banner_text.text()
    image = stored[0].images[0]
    kept = w.ctx.conversations.images.path(image)
    assert home in kept.parents and kept.read_bytes() == png and image.name == "gradient.png"
    first = stored[1].stats
    assert first is not None and first["prompt_tokens"] > IMAGE_TOKENS
    bubble = view.messages()[0]
    assert len(bubble.thumbnails) == 1 and not bubble.thumbnails[0].pixmap().isNull()
    assert bubble.thumbnails[0].toolTip() == "gradient.png"
    screenshot(w, "vision-chat")
    assert w.grab().save("/tmp/vision-chat.png")

    # Regenerate sends the image again (the original is gone: the copy is what is sent).
    (pictures / "gradient.png").unlink()
    qtbot.mouseClick(view.messages()[1].regenerate_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE, cpu_s=300)
    again = w.ctx.store.messages(chat_id)[1].stats
    assert again is not None and again["prompt_tokens"] == first["prompt_tokens"]
    w.close()

    # After a restart the chat shows the thumbnail, and a follow-up still shows the model the image.
    w2 = open_window(initial_model=str(vision_model))
    assert w2.chats.chat_id == chat_id
    reopened = w2.chat_view.messages()[0]
    assert len(reopened.thumbnails) == 1 and not reopened.thumbnails[0].pixmap().isNull()
    assert w2.plans.plan is not None and w2.plans.plan.settings.mmproj_path  # kept per model
    qtbot.keyClicks(w2.chat_view.input, "And the colours?")
    qtbot.mouseClick(w2.chat_view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w2.chats.state is ChatState.IDLE and len(w2.chat_view.messages()) == 4, cpu_s=300)
    follow = w2.ctx.store.messages(chat_id)[3].stats
    assert follow is not None and follow["prompt_tokens"] > first["prompt_tokens"] + first["completion_tokens"]
    screenshot(w2, "vision-chat-after-restart")

    # Keep on CPU is a pin the plan keeps.
    qtbot.mouseClick(w2.plan_view.projector.cpu, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w2.plans.plan is not None and w2.plans.plan.pins.mmproj_cpu is True, cpu_s=60)
    shutil.rmtree(pictures)


def test_a_chat_with_documents_sends_every_kept_turns_images(
    open_window: OpenWindow, qtbot: QtBot, vision_model: Path, tmp_path: Path
) -> None:
    """Documents and images in one chat: a follow-up's prompt still holds the first question's
    image (that question was recorded with the documents, and is sent again as it was, image and
    all), so it is longer than the first prompt, not an image shorter."""
    w = open_window(initial_model=str(vision_model))
    view, control = w.chat_view, w.plan_view.projector
    waits.until(qtbot, lambda: control.on.isEnabled(), cpu_s=30)
    qtbot.mouseClick(control.on, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.plans.plan is not None and bool(w.plans.plan.settings.mmproj_path), cpu_s=60)
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe picture was drawn in 1931 by the engineer of the dam.\n")
    w.chats.documents.attach_files([notes])
    waits.until(qtbot, lambda: w.chats.documents.active, cpu_s=60)
    (tmp_path / "gradient.png").write_bytes(png_bytes(64, 48))
    qtbot.keyClicks(view.input, "What is in this picture?")
    assert _drop(w, tmp_path / "gradient.png")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=300)
    qtbot.keyClicks(view.input, "Who drew it?")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 4, cpu_s=300)
    stored = w.ctx.store.messages(open_chat(w))
    first, second = stored[1].stats, stored[3].stats
    assert first is not None and second is not None, view.banner_text.text()
    assert first["prompt_tokens"] > IMAGE_TOKENS
    assert second["prompt_tokens"] > first["prompt_tokens"] + first["completion_tokens"]
