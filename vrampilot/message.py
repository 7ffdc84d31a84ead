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
    """Drop the oldest turns (never the system prompt or the last message) until `fits` says the
    conversation and a full reply fit; returns what is left (possibly still too long). Every
    backend trims by this rule, with its own tokenizer and limit behind `fits`."""
    kept = list(messages)
    while not fits(kept):
        first = next((i for i, m in enumerate(kept) if m.role != "system"), None)
        if first is None or first >= len(kept) - 1:
            break
        del kept[first]
        # Keep turns whole: a reply without its question confuses the model, and a tool's result
        # without the call it answers is refused by chat templates.
        while first < len(kept) - 1 and kept[first].role in ("assistant", "tool"):
            del kept[first]
    return kept


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
