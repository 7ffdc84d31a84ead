"""The one interface every chat backend implements, and the llama.cpp one.

A backend turns a conversation into a streamed reply on the engine's thread: llama.cpp in-process
(`LlamaCppBackend`), the experimental hybrid cache on torch (vrampilot.hybrid.backend.HybridBackend),
and the running llama-server once the app serves the model. The chat controller holds one per
chat and never asks which kind it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from vrampilot.engine.errors import ContextOverflow
from vrampilot.engine.sampling import SamplingParams
from vrampilot.engine.session import Engine, Reply
from vrampilot.message import Message, drop_oldest_turns, turn_drop

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
        return fitted_reply(
            messages,
            lambda kept: engine.check_context(kept, sampling.max_tokens).fits,
            lambda kept: engine.chat(kept, sampling, on_text=on_text, cancel=cancel),
            trim=trim,
        )

    def status_text(self) -> str:
        return "Generating…"


def fitted_reply(
    messages: Sequence[Message],
    fits: Callable[[list[Message]], bool],
    send: Callable[[Sequence[Message]], Reply],
    *,
    trim: bool,
) -> Reply:
    """`send` the conversation, the way every backend that can drop turns does it; `fits` says
    whether messages and a full reply fit, with the backend's own tokenizer and limit. `trim`: drop
    the oldest turns first, and say in the reply's stats how many messages the model did not see.
    Without it an overflow carries what dropping would leave (ContextOverflow.drop), counted here on
    the engine thread, so the user learns it before choosing."""
    if trim:
        kept = drop_oldest_turns(messages, fits)
        reply = send(kept)
        dropped = len(messages) - len(kept)
        return replace(reply, stats=replace(reply.stats, dropped_messages=dropped)) if dropped else reply
    try:
        return send(messages)
    except ContextOverflow as exc:
        kept = drop_oldest_turns(messages, fits)
        exc.drop = turn_drop(messages, kept, fits(kept))
        raise
