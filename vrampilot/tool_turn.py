"""A tool-using turn as every layer keeps it: the calls of one round with their results. The agents'
loop makes them, the chat history stores them (storage/conversation.py) and gives them back to the
model as messages, the exports and the transcript show them. Below all of them, as Message is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vrampilot.message import Message, ToolCall

# How a call came to run or not: asked the user (allowed/always/denied), always allowed before
# (policy), allowed for this run by name (flag), or refused before asking (refused).
Verdict = str


@dataclass(frozen=True)
class ToolStep:
    """One call as the transcript shows it and the history keeps it."""

    call_id: str
    tool: str  # as the model named it
    server: str | None  # None: no such tool
    arguments: str  # the JSON text the model wrote
    result: str  # what the model was given (cut to the budget, with a note)
    is_error: bool
    duration_s: float
    verdict: Verdict
    result_chars: int = 0  # the whole result's length before any cut

    @property
    def cut(self) -> bool:
        return self.result_chars > len(self.result)

    def line(self) -> str:
        """One line for the user (the CLI's stderr, a log): the call and how it ended."""
        where = f"{self.server}/" if self.server else ""
        head = f"{where}{self.tool}({one_line(self.arguments, 120)})"
        if self.verdict == "denied":
            return f"{head}: denied"
        if self.verdict == "refused":
            return f"{head}: {one_line(self.result, 200)}"
        what = f"error: {one_line(self.result, 200)}" if self.is_error else f"{self.result_chars:,} characters"
        cut = ", cut for the model" if self.cut else ""
        return f"{head}: {what} in {self.duration_s:.1f} s{cut}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.call_id,
            "tool": self.tool,
            "server": self.server,
            "arguments": self.arguments,
            "result": self.result,
            "is_error": self.is_error,
            "duration_s": round(self.duration_s, 3),
            "verdict": self.verdict,
            "result_chars": self.result_chars,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolStep:
        return cls(
            str(d.get("id", "")),
            str(d.get("tool", "")),
            d.get("server") if isinstance(d.get("server"), str) else None,
            str(d.get("arguments", "")),
            str(d.get("result", "")),
            bool(d.get("is_error", False)),
            float(d.get("duration_s", 0.0)),
            str(d.get("verdict", "")),
            int(d.get("result_chars", 0)),
        )


@dataclass(frozen=True)
class ToolRound:
    """The model's text beside its calls, and each call with its result: stored as one unit so the
    calls and their results are never parted (trimming, a kill between two calls)."""

    text: str
    steps: tuple[ToolStep, ...]

    def messages(self) -> list[Message]:
        calls = tuple(ToolCall(s.call_id, s.tool, s.arguments) for s in self.steps)
        return [
            Message("assistant", self.text, tool_calls=calls),
            *(Message("tool", s.result, tool_call_id=s.call_id) for s in self.steps),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "calls": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolRound:
        calls = d.get("calls")
        steps = tuple(ToolStep.from_dict(c) for c in calls if isinstance(c, Mapping)) if isinstance(calls, list) else ()
        return cls(str(d.get("text", "")), steps)


def one_line(text: str, limit: int) -> str:
    """Untrusted text in one printable line: control characters (a terminal's escape sequences)
    shown as spaces, shortened."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
