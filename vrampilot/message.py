"""One chat message as every layer passes it: the storage's conversation service builds them, the
documents compose them, the engine renders them with the model's template. It lives below all of
them so none has to import another for a two-field type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# "tool": a tool's result, answering one call of the assistant message before it (vrampilot.agents).
Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: its id (which the result names), the tool as the model saw it,
    and the arguments as the JSON text the model wrote (not parsed here: a malformed one is the
    tool loop's to report)."""

    id: str
    name: str
    arguments: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    # Image files shown to the model before the text (a plan with a vision projector only).
    images: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls
    tool_call_id: str = ""  # a "tool" message: the call it answers

    def as_dict(self) -> dict[str, Any]:
        """The message as chat templates and the OpenAI API read it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.as_dict() for c in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


def drop_oldest_turns(messages: Sequence[Message], fits: Callable[[list[Message]], bool]) -> list[Message]:
    """Drop the oldest turns (never the system prompt, the last message or the turn it belongs
    to) until `fits` says the conversation and a full reply fit; returns what is left (possibly
    still too long). A turn is a user message with the replies, tool calls and tool results after
    it, dropped together. Every backend trims by this rule, with its own tokenizer and limit
    behind `fits`."""
    kept = list(messages)
    while not fits(kept):
        first = next((i for i, m in enumerate(kept) if m.role != "system"), None)
        if first is None or first >= len(kept) - 1:
            break
        end = _turn_end(kept, first)
        if end >= len(kept) and any(m.role == "tool" for m in kept[first:]):
            break  # the first turn is a tool loop under way: dropping into it would split calls from results
        del kept[first]
        # Keep turns whole: a reply without its question confuses the model, and a tool call
        # without its result (or a result without its call) is malformed for every template, so
        # the turn's replies, calls and results go with its question.
        while first < len(kept) - 1 and kept[first].role in ("assistant", "tool"):
            del kept[first]
    return kept


def _turn_end(messages: Sequence[Message], start: int) -> int:
    """The index of the next user message after `start` (len(messages) when there is none)."""
    return next((i for i in range(start + 1, len(messages)) if messages[i].role == "user"), len(messages))


@dataclass(frozen=True)
class ToolResultFit:
    """A tool result as the model will see it: whole, or cut to its budget with a note saying so."""

    text: str
    tokens: int  # of `text`, note included
    original_tokens: int
    cut: bool


def fit_tool_result(
    result: str,
    budget_tokens: int,
    count: Callable[[str], int],
    *,
    tool: str = "the tool",
    unit: str = "tokens",
) -> ToolResultFit:
    """`result` within `budget_tokens` by `count` (the model's tokenizer): whole when it fits,
    else its start cut at a line or word boundary and a visible note of how much the model saw,
    so that neither the model nor the user takes a part for the whole. The caller chooses the
    budget: what the context leaves after the tools, the turns kept and the reply. `unit` names what
    `count` counts in the note (the tool loop budgets characters where it has no tokenizer)."""
    total = count(result)
    if total <= budget_tokens:
        return ToolResultFit(result, total, total, False)

    def note(shown: int) -> str:
        return (
            f"\n[cut by VRAM Pilot: {tool} returned {total:,} {unit}; the model sees the first "
            f"{shown:,} of them, what the context leaves]"
        )

    room = budget_tokens - count(note(total))
    if room <= 0:
        text = note(0).lstrip("\n")
        return ToolResultFit(text, count(text), total, True)
    # Characters per token of this text, then trimmed until it fits (a few tokenizer calls).
    keep = max(0, int(len(result) * room / total))
    while keep > 0:
        head = result[:keep]
        cut_at = max(head.rfind("\n"), head.rfind(" "))
        if cut_at > keep // 2:
            head = head[:cut_at]
        shown = count(head)
        if shown <= room:
            text = head + note(shown)
            return ToolResultFit(text, count(text), total, True)
        keep = int(keep * room / shown * 0.95)
    text = note(0).lstrip("\n")
    return ToolResultFit(text, count(text), total, True)


@dataclass(frozen=True)
class TurnDrop:
    """What "drop the oldest turns" leaves, counted before the user chooses it: the earlier messages
    the model would no longer see, those it would still see (the system prompt and the question
    aside), and whether the rest then fits at all."""

    dropped: int
    kept: int
    fits: bool

    @property
    def leaves_nothing(self) -> bool:
        """Only the question would be left (every earlier turn gone), or not even that fits."""
        return self.kept == 0 or not self.fits


def turn_drop(messages: Sequence[Message], kept: Sequence[Message], fits: bool) -> TurnDrop:
    """The drop that took `messages` to `kept` (drop_oldest_turns' result)."""
    earlier = [m for m in kept if m.role != "system"][:-1]
    return TurnDrop(dropped=len(messages) - len(kept), kept=len(earlier), fits=fits)
