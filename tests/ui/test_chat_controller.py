"""The chat controller on its own, without the window: its views and the plan and documents
controllers it asks, a context on this test's own data folder planning for a fixed CPU machine, and
the embedded model loaded and answering through the real engine thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from tests.ui.conftest import FAST_PINS, heard
from vrampilot.engine import GenerationStats, SamplingParams
from vrampilot.paths import embedded_model_path
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.chat.chat_list import ChatList
from vrampilot.ui.chat.controller import ChatController, ChatState
from vrampilot.ui.chat.documents_controller import DocumentsController
from vrampilot.ui.chat.view import ChatView
from vrampilot.ui.library.controller import LibraryController
from vrampilot.ui.library.view import LibraryView
from vrampilot.ui.plan.controller import LoadState, PlanController
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.speed_controller import SpeedController
from vrampilot.ui.plan.view import PlanView


class Answers:
    """What the user answers to each confirmation, and what was asked."""

    def __init__(self) -> None:
        self.yes = True
        self.asked: list[str] = []

    def __call__(self, title: str, _text: str) -> bool:
        self.asked.append(title)
        return self.yes


@pytest.fixture
def answers() -> Answers:
    return Answers()


@pytest.fixture
def chats(qtbot: QtBot, app_context: AppContext, answers: Answers) -> Iterator[ChatController]:
    ctx = app_context
    model = embedded_model_path()
    assert model is not None
    ctx.prefs.set_pins_for(model, FAST_PINS)
    views = ChatView(), ChatList(), PlanView(), LibraryView(), HardwareView()
    for v in views:
        qtbot.addWidget(v)
    chat_view, chat_list, plan_view, library_view, hardware_view = views
    chat_view.sampling.set_params(SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    library = LibraryController(ctx, library_view)
    plans = PlanController(ctx, SpeedController(ctx), plan_view, library, hardware_view, confirm=answers)
    documents = DocumentsController(ctx)
    controller = ChatController(ctx, chat_view, chat_list, plans, documents, confirm=answers)
    with qtbot.waitSignal(plans.plan_shown, timeout=20000):
        plans.start(None)
    yield controller
    plans.shutdown()
    documents.shutdown()


def test_a_question_loads_the_model_and_the_reply_is_stored_and_measured(qtbot: QtBot, chats: ChatController) -> None:
    states, measured = heard(chats.state_changed), heard(chats.reply_measured)
    chats.send("Name one colour.")
    assert chats.chat_id is not None and chats.busy
    qtbot.waitUntil(lambda: not chats.busy, timeout=120000)
    assert states == [ChatState.LOADING, ChatState.GENERATING, ChatState.IDLE]
    assert chats.plans.load_state is LoadState.LOADED
    chat = chats.ctx.conversations.chat(chats.chat_id)
    assert [m.role for m in chat.messages] == ["user", "assistant"]
    assert chat.messages[0].content == "Name one colour." and chat.messages[1].content.strip()
    [stats] = measured
    assert isinstance(stats, GenerationStats) and 0 < stats.completion_tokens <= 12 and stats.decode_tps > 0
    assert chats.chat_list.ids() == [chats.chat_id]

    chats.send("   ")  # nothing to send: nothing happens
    assert not chats.busy and len(chats.ctx.conversations.chat(chats.chat_id).messages) == 2


def test_rename_export_and_delete_ask_and_say_what_happened(
    qtbot: QtBot, chats: ChatController, answers: Answers, tmp_path: Path
) -> None:
    chat = chats.ctx.conversations.create(model_path=None, system_prompt="", backend=chats.backend_key)
    chats.ctx.conversations.ask(chat.id, "What is a turbine?")
    chats.refresh_list()
    chats.open_chat(chat.id)
    assert chats.chat_id == chat.id and not chats.busy
    chats.rename(chat.id, "Turbines")
    assert chats.ctx.conversations.chat(chat.id).title == "Turbines"

    status = heard(chats.status)
    target = tmp_path / "turbines.md"
    chats.export(chat.id, "markdown", target)
    assert status[-1] == f"Exported to {target}" and "What is a turbine?" in target.read_text()
    nowhere = tmp_path / "no-such-folder" / "turbines.md"
    chats.export(chat.id, "markdown", nowhere)
    assert status[-1].startswith(f"Could not export to {nowhere}: ") and "Errno" not in status[-1]

    answers.yes = False
    chats.delete(chat.id)
    assert answers.asked == ["Delete chat?"] and chats.chat_list.ids() == [chat.id]  # kept: the user said no
    answers.yes = True
    chats.delete(chat.id)
    assert chats.chat_list.ids() == [] and chats.chat_id is None
