"""Chats as a person edits them, Qt-free: questions, replies, edit and regenerate, export, titles.

The window's chat controller and the CLI (`vrampilot chat --save`) both go through this, so the
rules hold wherever a turn comes from:
- a conversation alternates: a question is never stored right after another unanswered one (a
  stopped or crashed reply leaves one); the new text joins it, or answers it when it is the same;
- editing a question drops it and everything after it; a title made from the first question
  follows its edit, one the user chose stays;
- regenerate drops the last reply and nothing else;
- a question's images are copied into the data folder (storage/images.py) before it is stored, and
  the conversation hands the model those copies, so a chat reopened after a restart (or
  regenerated, or answered later) shows the model the same pictures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.message import Message
from vrampilot.storage.chats import BACKEND_LLAMA, Chat, ChatStore, ChatSummary, StoredMessage, title_from
from vrampilot.storage.images import ImageStore, StoredImage
from vrampilot.tool_turn import ToolRound

EXPORT_FORMATS = ("markdown", "json")


@dataclass(frozen=True)
class Question:
    """The stored question a reply is to answer, and whether it joined an unanswered one."""

    message: StoredMessage
    joined: bool  # the text was added to an earlier question that had no reply


class ConversationService:
    def __init__(self, store: ChatStore, images: ImageStore | None = None) -> None:
        self.store = store
        self.images = images or ImageStore()

    # -- chats ---------------------------------------------------------------------------------
    def create(self, *, model_path: str | None, system_prompt: str = "", backend: str = BACKEND_LLAMA) -> Chat:
        return self.store.create_chat(model_path=model_path, system_prompt=system_prompt, backend=backend)

    def chat(self, chat_id: int) -> Chat:
        return self.store.get_chat(chat_id)

    def summaries(self, query: str = "") -> list[ChatSummary]:
        return self.store.search(query) if query.strip() else self.store.list_chats()

    def messages(self, chat_id: int) -> list[StoredMessage]:
        return self.store.messages(chat_id)

    def rename(self, chat_id: int, title: str) -> str:
        self.store.rename(chat_id, title)
        return self.store.get_chat(chat_id).title

    def delete(self, chat_id: int) -> None:
        self.store.delete(chat_id)

    def set_system_prompt(self, chat_id: int, text: str) -> None:
        self.store.set_system_prompt(chat_id, text)

    def set_backend(self, chat_id: int, backend: str) -> None:
        self.store.set_backend(chat_id, backend)

    # -- turns ---------------------------------------------------------------------------------
    def unanswered(self, chat_id: int) -> StoredMessage | None:
        """The last message when it is a question without a reply (a stopped or crashed reply)."""
        msgs = self.store.messages(chat_id)
        return msgs[-1] if msgs and msgs[-1].role == "user" else None

    def keep_images(self, paths: Sequence[str | Path]) -> tuple[StoredImage, ...]:
        """Copy images into the data folder (refused in one line, before anything is stored, when
        one is missing, too large or no image)."""
        return tuple(self.images.add(p) for p in paths)

    def ask(self, chat_id: int, text: str, images: Sequence[StoredImage] = ()) -> Question:
        """Store a question; after an unanswered one, join it instead of adding a second in a row."""
        pending = self.unanswered(chat_id)
        if pending is None:
            return Question(self.store.add_message(chat_id, "user", text, images=images), joined=False)
        if text.strip() == pending.content.strip() and not images:
            return Question(pending, joined=False)  # asked again as it was: answer it
        same = text.strip() in ("", pending.content.strip())  # only images added to the question
        merged = pending.content if same else f"{pending.content.rstrip()}\n\n{text.strip()}".strip()
        joined = (*pending.images, *images)
        self.store.update_message(pending.id, merged, images=joined)
        self._retitle_if_first(chat_id, pending.position, pending.content, merged)
        return Question(StoredMessage(pending.id, pending.position, "user", merged, None, joined), joined=True)

    def replace_from(
        self, chat_id: int, position: int, text: str, images: Sequence[StoredImage] | None = None
    ) -> Question:
        """An edited question: it and everything after it are replaced by the new text (and its
        images; None keeps the edited question's own)."""
        old = next((m for m in self.store.messages(chat_id) if m.position == position), None)
        if old is not None:
            self._retitle_if_first(chat_id, position, old.content, text)
        kept = images if images is not None else (old.images if old is not None else ())
        self.store.truncate(chat_id, position)
        return self.ask(chat_id, text, kept)

    def drop_last_reply(self, chat_id: int) -> bool:
        """For regenerate: remove the last reply, with the tool rounds that led to it (the model
        calls again, as it sees fit); False when the chat does not end in one."""
        msgs = self.store.messages(chat_id)
        if not msgs or msgs[-1].role != "assistant":
            return False
        first = len(msgs) - 1
        while first > 0 and msgs[first - 1].role == "assistant" and msgs[first - 1].tool_round is not None:
            first -= 1
        self.store.truncate(chat_id, msgs[first].position)
        return True

    def add_reply(self, chat_id: int, text: str, stats: dict[str, Any] | None = None) -> StoredMessage:
        return self.store.add_message(chat_id, "assistant", text, stats)

    def add_tool_round(self, chat_id: int, rnd: ToolRound) -> StoredMessage:
        """A round of tool calls with their results, stored as it ends (a kill loses at most the
        round in progress); the final answer follows as a reply."""
        return self.store.add_message(chat_id, "assistant", rnd.text, tool_round=rnd)

    def for_model(self, chat_id: int) -> list[Message]:
        """The conversation as the model gets it: the system prompt, then the turns."""
        chat = self.store.get_chat(chat_id)
        out: list[Message] = []
        if chat.system_prompt.strip():
            out.append(Message("system", chat.system_prompt))
        for m in chat.messages:
            if m.tool_round is not None:
                out += m.tool_round.messages()  # the calls, then each result as a tool message
            else:
                out.append(Message(m.role, m.content, tuple(str(self.images.path(i)) for i in m.images)))  # type: ignore[arg-type]  # stored roles are the Message role literals
        return out

    def _retitle_if_first(self, chat_id: int, position: int, old: str, new: str) -> None:
        chat = self.store.get_chat(chat_id)
        first = next((m for m in chat.messages if m.role == "user"), None)
        if first is not None and first.position == position and chat.title == title_from(old):
            self.store.rename(chat_id, title_from(new))

    # -- export --------------------------------------------------------------------------------
    def export_text(self, chat_id: int, fmt: str) -> str:
        if fmt == "markdown":
            return self.store.export_markdown(chat_id)
        if fmt == "json":
            return json.dumps(self.store.export_json(chat_id), indent=2, ensure_ascii=False) + "\n"
        raise ValueError(f"export format must be one of {', '.join(EXPORT_FORMATS)}")

    def export(self, chat_id: int, fmt: str, path: Path) -> None:
        path.write_text(self.export_text(chat_id, fmt), encoding="utf-8")


def safe_filename(title: str) -> str:
    return "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "chat"
