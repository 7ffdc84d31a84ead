"""The experimental hybrid-cache backend in the real window, on the embedded model: chosen per chat,
stored with it, streaming into the same chat view, stoppable, and metered in bytes held."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests import waits
from tests.ui.conftest import MAX_WORK_S, OpenWindow, StallMeter, open_chat, screenshot, seed_prefs
from vrampilot.storage import BACKEND_HYBRID, BACKEND_LLAMA
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

# Looser than the llama.cpp flow's 50 ms: torch takes the GIL back between its kernels (30 layers,
# several ops each, per token), where llama.cpp runs a whole token without it.


def _reply_done(w: MainWindow) -> bool:
    return w.chats.state is ChatState.IDLE


def _pick(w: MainWindow, backend: str) -> None:
    """As the user picks it from the selector in the chat's header."""
    view = w.chat_view
    view.backend.setCurrentIndex(view.backend.findData(backend))


def test_hybrid_chat_streams_stops_and_meters_bytes_held(open_window: OpenWindow, qtbot: QtBot) -> None:
    seed_prefs(max_tokens=8)
    w: MainWindow = open_window()
    view = w.chat_view
    assert view.current_backend() == BACKEND_LLAMA and view.backend_available(BACKEND_HYBRID)
    assert view.backend_note.isHidden() and w.meters_panel.kv_box.isHidden()

    _pick(w, BACKEND_HYBRID)
    note = view.backend_note.text()
    assert not view.backend_note.isHidden()
    assert "DeepSeek-V4-style" in note and "4-bit" in note and "torch" in note
    assert "of the f16 cache" in note and "perplexity" in note and "passkey" in note  # what it measured
    assert not w.meters_panel.kv_box.isHidden()
    assert w.meters_panel.kv_label.text().startswith("KV cache held: nothing yet")
    # The support check (off the GUI thread) accepts SmolLM2, a Llama: the choice stays.
    waits.until(qtbot, lambda: str(w.plans.model_path) in w.chats.model_checks, cpu_s=30)
    assert w.chats.model_checks[str(w.plans.model_path)] is None and w.chats.backend_key == BACKEND_HYBRID

    meter = StallMeter()
    meter.start()
    view.input.setPlainText("Name a colour.")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    assert w.ctx.store.get_chat(open_chat(w)).backend == BACKEND_HYBRID
    waits.until(qtbot, lambda: len(view.streamed_text()) > 0, cpu_s=60)
    assert not view.backend.isEnabled()  # no switching mid-reply
    waits.until(qtbot, lambda: _reply_done(w) and len(view.messages()) == 2, cpu_s=60)
    meter.stop()
    print(meter.report())
    assert meter.max_work_s < MAX_WORK_S, meter.report()

    stored = w.ctx.store.messages(open_chat(w))
    assert [m.role for m in stored] == ["user", "assistant"] and stored[1].content
    stats = stored[1].stats
    assert stats is not None and stats["backend"] == BACKEND_HYBRID
    assert 0 < stats["kv_bytes_held"] <= stats["kv_full_f16_bytes"] and stats["kv_tokens"] == stats["context_used"]
    print(
        f"hybrid reply: {stats['completion_tokens']} tokens at {stats['decode_tps']} tokens/s, "
        f"first token {stats['ttft_s']} s, KV held {stats['kv_bytes_held']} of {stats['kv_full_f16_bytes']} B"
    )
    assert "hybrid cache (torch)" in view.messages()[1].stats.text()
    assert view.backend.isEnabled()
    # The meters show the session's own numbers, in the panel and the status bar.
    hybrid = w.chats.backend
    session = hybrid.chat.session  # type: ignore[attr-defined]  # the chat backend is the hybrid one here
    assert session is not None
    held, full = session.kv_bytes_held(), session.full_cache_bytes()
    assert (held, full) == (stats["kv_bytes_held"], stats["kv_full_f16_bytes"])
    kv_text = w.meters_panel.kv_label.text()
    assert kv_text.startswith("KV cache held: ") and "for the full f16 cache (" in kv_text
    assert kv_text == hybrid.usage().text()  # type: ignore[attr-defined]  # the chat backend is the hybrid one here
    assert "KV held" in w.meters_status.label.text()
    w.right_tabs.setCurrentWidget(w.meters_panel)
    screenshot(w, "hybrid-01-reply")

    # Stop: a long reply, stopped after its first text; the partial reply is kept and marked, and
    # the follow-up extended the cache instead of starting over.
    view.sampling.max_tokens.setValue(200)
    view.input.setPlainText("Write a long story about a dragon.")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: len(view.streamed_text()) > 0, cpu_s=60)
    qtbot.mouseClick(view.stop_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: _reply_done(w), cpu_s=30)
    last = w.ctx.store.messages(open_chat(w))[-1]
    assert last.role == "assistant" and last.stats is not None and last.stats["stop_reason"] == "cancelled"
    assert last.stats["completion_tokens"] < 200 and "stopped" in view.messages()[-1].stats.text()
    assert last.stats["reused_tokens"] == stats["context_used"]
    chat_id = open_chat(w)
    w.close()

    # Restart: the chat reopens on its backend; switching it back is stored too.
    w2: MainWindow = open_window()
    assert w2.chats.chat_id == chat_id and w2.chat_view.current_backend() == BACKEND_HYBRID
    assert "hybrid cache (torch)" in w2.chat_view.messages()[1].stats.text()
    _pick(w2, BACKEND_LLAMA)
    assert w2.ctx.store.get_chat(chat_id).backend == BACKEND_LLAMA
    assert w2.chat_view.backend_note.isHidden() and w2.meters_panel.kv_box.isHidden()
    assert "KV held" not in w2.meters_status.label.text()


def test_a_model_the_backend_cannot_run_keeps_llama_cpp(open_window: OpenWindow, qtbot: QtBot, tmp_path: Path) -> None:
    from testkit.gguf_models import write_model

    seed_prefs()
    w: MainWindow = open_window()
    w.chats.new_chat()
    qwen = write_model(tmp_path / "tiny-qwen2.gguf", "qwen2")
    w.library.add_models([qwen])
    qtbot.waitUntil(lambda: w.plans.spec is not None and w.plans.spec.path == qwen, timeout=20000)
    _pick(w, BACKEND_HYBRID)
    waits.until(qtbot, lambda: w.chats.backend_key == BACKEND_LLAMA, cpu_s=30)
    assert w.chat_view.current_backend() == BACKEND_LLAMA
    note = w.chat_view.backend_note.text()
    assert "cannot run this model" in note and "'qwen2' is not supported" in note and "stays on llama.cpp" in note
    assert w.meters_panel.kv_box.isHidden()


def test_the_backend_menu_lists_each_config_with_the_bytes_it_holds(open_window: OpenWindow, qtbot: QtBot) -> None:
    """Each hybrid config is a choice in the chat's backend menu with the bytes it would hold: at the
    model's full context for a new chat, at the chat's length once it has replies; picking one
    stores it with the chat, and the reply comes from that config (its bytes in the reply's line)."""
    from vrampilot.hybrid.backend import held_at
    from vrampilot.hybrid.config import CONFIGS
    from vrampilot.units import format_bytes

    seed_prefs(max_tokens=4)
    w: MainWindow = open_window()
    view = w.chat_view
    keys = [view.backend.itemData(i) for i in range(view.backend.count())]
    assert keys[:2] == [BACKEND_LLAMA, BACKEND_HYBRID]
    assert keys[2:] == [f"hybrid:{name}" for name in CONFIGS if name != "default"]
    spec = w.plans.spec
    assert spec is not None
    full_ctx = held_at("default", spec, spec.n_ctx_train)
    assert full_ctx is not None and full_ctx.share is not None
    default_label = view.backend.itemText(1)
    assert default_label.startswith("Experimental hybrid: default · ")
    assert f"{format_bytes(full_ctx.held_bytes)}, {full_ctx.share:.0%} of f16" in default_label
    assert "at the full 8K context" in default_label

    broad = "hybrid:retrieval-broad"
    _pick(w, broad)
    assert w.chats.backend_key == broad and "retrieval-broad" in view.backend_note.text()
    view.input.setPlainText("Name a colour.")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: _reply_done(w) and len(view.messages()) == 2, cpu_s=90)
    chat_id = w.chats.chat_id
    assert chat_id is not None and w.ctx.store.get_chat(chat_id).backend == broad
    stats = w.ctx.store.messages(chat_id)[-1].stats
    assert stats is not None and stats["hybrid_config"] == "retrieval-broad"
    hybrid = w.chats.backend
    assert hybrid.chat.config == "retrieval-broad"  # type: ignore[attr-defined]  # the chat backend is the hybrid one here
    # Now every label is at the chat's length, and the chosen config's is what its cache holds.
    n = stats["context_used"]
    held = hybrid.usage().held_bytes  # type: ignore[attr-defined]  # the chat backend is the hybrid one here
    label = view.backend.itemText(view.backend.findData(broad))
    assert f" · {format_bytes(held)}, " in label and f"at {n} tokens" in label
    assert view.current_backend() == broad
    screenshot(w, "hybrid-03-config-chat")
    view.backend.showPopup()
    popup = view.backend.view().window()
    qtbot.waitUntil(popup.isVisible, timeout=5000)
    screenshot(popup, "hybrid-04-config-menu")
    view.backend.hidePopup()
