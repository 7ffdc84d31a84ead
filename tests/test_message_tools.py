"""Trimming keeps a tool call with its result, and a tool result larger than its budget is cut with
a visible note (vrampilot/message.py), counted by the embedded model's own tokenizer."""

from __future__ import annotations

from pathlib import Path

from vrampilot.message import Message, drop_oldest_turns, fit_tool_result


def _loop() -> list[Message]:
    return [
        Message("system", "You can call tools."),
        Message("user", "Weather in Paris?"),
        Message("assistant", '{"name": "get_weather", "arguments": {"city": "Paris"}}'),
        Message("tool", "18 degrees"),
        Message("assistant", "It is 18 degrees."),
        Message("user", "And in Rome?"),
        Message("assistant", '{"name": "get_weather", "arguments": {"city": "Rome"}}'),
        Message("tool", "22 degrees"),
    ]


def test_trimming_drops_a_whole_turn_with_its_calls_and_results() -> None:
    msgs = _loop()
    kept = drop_oldest_turns(msgs, lambda m: len(m) <= 5)
    assert [m.role for m in kept] == ["system", "user", "assistant", "tool"]
    assert kept[1].content == "And in Rome?"  # the current turn, its call and result together


def test_trimming_never_splits_the_current_tool_loop() -> None:
    msgs = _loop()[:1] + _loop()[5:]  # one turn: the question, a call, its result
    assert drop_oldest_turns(msgs, lambda _m: False) == msgs  # still too long, but never a result alone


def test_a_plain_chat_is_trimmed_as_before() -> None:
    msgs = [Message("user", "a"), Message("assistant", "b"), Message("user", "c")]
    assert drop_oldest_turns(msgs, lambda m: len(m) <= 1) == [Message("user", "c")]


def test_a_long_tool_result_is_cut_to_its_budget_with_a_note(embedded_model: Path) -> None:
    from vrampilot.documents.tokens import tokenizer_for

    count = tokenizer_for(embedded_model).count
    result = "\n".join(f"line {i}: the river runs past the mill and under the bridge" for i in range(2000))
    fit = fit_tool_result(result, 300, count, tool="read_file")
    assert fit.cut and fit.original_tokens == count(result) > 10_000
    assert fit.tokens == count(fit.text) <= 300
    assert "[cut by VRAM Pilot: read_file returned" in fit.text and fit.text.startswith("line 0:")
    whole = fit_tool_result("short", 300, count)
    assert not whole.cut and whole.text == "short"
    tiny = fit_tool_result(result, 5, count)
    assert tiny.cut and "cut by VRAM Pilot" in tiny.text
