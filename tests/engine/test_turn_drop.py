"""Before "Drop oldest turns" is offered, the overflow says what it would leave (issue 58, item 5):
counted with the loaded model's tokenizer on the engine, and after a trimmed reply its stats say how
many messages the model did not see. Before, the choice was blind and the reply's stats silent."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from tests.engine.conftest import GREEDY
from vrampilot.engine import ContextOverflow, Engine, LlamaCppBackend, Message, format_summary

# About 1,300 tokens: more than the fixture's 1,024-token context on its own.
LONG = "Tell me about boats. " * 240


def _reply(engine: Engine, msgs: list[Message], *, trim: bool, max_tokens: int = 16) -> object:
    sampling = replace(GREEDY, max_tokens=max_tokens)
    return LlamaCppBackend().reply(
        engine, msgs, sampling, on_text=lambda _t: None, on_report=lambda _r: None, cancel=threading.Event(), trim=trim
    )


def _overflow(engine: Engine, msgs: list[Message], max_tokens: int) -> ContextOverflow:
    with pytest.raises(ContextOverflow) as caught:
        _reply(engine, msgs, trim=False, max_tokens=max_tokens)
    return caught.value


def test_an_overflow_says_what_dropping_would_keep(engine: Engine) -> None:
    old = [Message("user", LONG), Message("assistant", "Boats float.")]
    recent = [Message("user", "And trains?"), Message("assistant", "Trains run on rails.")]
    question = Message("user", "Which is faster?")
    exc = _overflow(engine, [*old, *recent, question], max_tokens=64)
    assert exc.drop is not None
    assert (exc.drop.dropped, exc.drop.kept, exc.drop.fits) == (2, 2, True) and not exc.drop.leaves_nothing


def test_an_overflow_that_would_keep_nothing_says_so(engine: Engine) -> None:
    msgs = [Message("user", LONG), Message("assistant", "Boats float.")]
    exc = _overflow(engine, [*msgs, Message("user", "Trains? " * (engine.n_ctx // 4))], max_tokens=16)
    assert exc.drop is not None and exc.drop.kept == 0 and exc.drop.leaves_nothing


def test_a_trimmed_reply_says_how_many_messages_the_model_did_not_see(engine: Engine) -> None:
    msgs = [
        Message("user", LONG),
        Message("assistant", "Boats float."),
        Message("user", "Which is faster, a boat or a train?"),
    ]
    reply = _reply(engine, msgs, trim=True)
    stats = reply.stats  # type: ignore[attr-defined]
    assert stats.dropped_messages == 2
    assert "2 earlier messages dropped to fit, not seen by the model" in format_summary(stats.to_dict())


def test_a_conversation_ending_with_the_reply_continues_it(engine: Engine) -> None:
    """Continue (issue 58, expected): the model goes on from its cut reply instead of starting over."""
    question = [Message("user", "Count from one to twenty in words, separated by commas.")]
    first = _reply(engine, question, trim=False, max_tokens=8)
    text = first.text  # type: ignore[attr-defined]
    assert first.stats.stop_reason == "length"  # type: ignore[attr-defined]
    prompt = engine.render([*question, Message("assistant", text)])
    assert prompt == engine.render(question) + text  # the reply's opening, left open
    more = _reply(engine, [*question, Message("assistant", text)], trim=False, max_tokens=8)
    assert more.text  # type: ignore[attr-defined]
    # Greedy: the continuation is what the longer reply would have said after the cut.
    longer = _reply(engine, question, trim=False, max_tokens=16)
    assert (text + more.text).startswith(longer.text[: len(text) + 4])  # type: ignore[attr-defined]
