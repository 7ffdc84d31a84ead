"""The one interface every chat backend implements, and the llama.cpp one.

A backend turns a conversation into a streamed reply on the engine's thread: llama.cpp in-process
(`LlamaCppBackend`), the experimental hybrid cache on torch (vrampilot.hybrid.chat.HybridBackend),
and the running llama-server once the app serves the model. The chat controller holds one per
chat and never asks which kind it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from vrampilot.engine.sampling import SamplingParams
from vrampilot.engine.session import Engine, Reply
from vrampilot.message import Message

TextFn = Callable[[str], None]
ReportFn = Callable[[object], None]


class ChatBackend(Protocol):
    key: str  # what the chat stores ("llama.cpp", "hybrid")
    label: str  # for a status line: "llama.cpp", "the experimental hybrid cache (torch)"
    # Whether a larger context in the plan cures a context overflow (not for the hybrid cache,
    # whose limit is the model's trained context).
    replan_cures_overflow: bool

    def reply(
        self,
        engine: Engine,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        on_text: TextFn,
        on_report: ReportFn,
        cancel: threading.Event,
        trim: bool,
    ) -> Reply:
        """Runs on the engine thread. `trim`: drop the oldest turns so the reply fits first."""
        ...

    def status_text(self) -> str:
        """What the status line says while this backend generates."""
        ...


class LlamaCppBackend:
    key = "llama.cpp"
    label = "llama.cpp"
    replan_cures_overflow = True

    def reply(
        self,
        engine: Engine,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        on_text: TextFn,
        on_report: ReportFn,
        cancel: threading.Event,
        trim: bool,
    ) -> Reply:
        if trim:
            messages = engine.fit_messages(messages, sampling.max_tokens)
        return engine.chat(messages, sampling, on_text=on_text, cancel=cancel)

    def status_text(self) -> str:
        return "Generating…"
