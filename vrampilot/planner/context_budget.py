"""What fills the context before the conversation does: the enabled tools' schemas.

An agent's tool definitions are rendered into every prompt by the chat template (the tokens
vrampilot.engine.tool_tokens counts), so they are a fixed share of the context the conversation and
the reply can never use. The plan carries their count as an input (Pins.tools_tokens, the knob
--tools-tokens) and every front end shows the split from here: the reasons, the plan report's
context row and JSON, the Plan panel. The context is chosen as without tools; past a quarter of it
the plan warns and names the least context that brings the tools under that share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vrampilot.units import format_count, format_tokens

# Past this share of the context, tools crowd out the conversation: a warning with a fix.
TOOLS_SHARE_WARN = 0.25
# llama.cpp pads the context to a multiple of this many cells.
_CELLS = 256


@dataclass(frozen=True)
class ContextBudget:
    """The context split between the tools' schemas and what is left for the chat and its reply."""

    n_ctx: int
    tools_tokens: int

    @property
    def conversation_tokens(self) -> int:
        """Tokens left for the system prompt, the turns, documents, tool results and the reply."""
        return max(0, self.n_ctx - self.tools_tokens)

    @property
    def tools_share(self) -> float:
        return self.tools_tokens / self.n_ctx if self.n_ctx > 0 else 0.0

    @property
    def over_share(self) -> bool:
        return self.tools_share > TOOLS_SHARE_WARN

    @property
    def fits(self) -> bool:
        """Some room is left beside the tools (a prompt that is all tools has no question)."""
        return self.conversation_tokens > 0

    @property
    def least_ctx_for_share(self) -> int:
        """The least context (padded as llama.cpp pads it) in which the tools stay within the share."""
        return math.ceil(self.tools_tokens / TOOLS_SHARE_WARN / _CELLS) * _CELLS

    def text(self) -> str:
        """The split in a few words: "tools 1,234 = 15%, 6,958 left for the chat"."""
        if not self.tools_tokens:
            return ""
        return (
            f"tools {format_count(self.tools_tokens)} = {100 * self.tools_share:.0f}%, "
            f"{format_count(self.conversation_tokens)} left for the chat"
        )

    def reason(self) -> str:
        """The plan's reason line for the tools, or "" without them."""
        if not self.tools_tokens:
            return ""
        return (
            f"Context budget: the enabled tools' schemas take {format_count(self.tools_tokens)} tokens of every "
            f"prompt ({100 * self.tools_share:.0f}% of {format_tokens(self.n_ctx)}), leaving "
            f"{format_count(self.conversation_tokens)} for the conversation, tool results and the reply."
        )

    def warning(self) -> str | None:
        """A warning when the tools do not fit, or take more than TOOLS_SHARE_WARN of the context."""
        if not self.tools_tokens:
            return None
        fix = f"--min-ctx {self.least_ctx_for_share} brings them under {100 * TOOLS_SHARE_WARN:.0f}%"
        if not self.fits:
            return (
                f"the enabled tools' schemas ({format_count(self.tools_tokens)} tokens) do not fit the "
                f"{format_tokens(self.n_ctx)} context: no room is left for a question; enable fewer tools, or {fix}"
            )
        if self.over_share:
            return (
                f"the enabled tools' schemas take {100 * self.tools_share:.0f}% of the context "
                f"({format_count(self.tools_tokens)} of {format_tokens(self.n_ctx)} tokens), more than "
                f"{100 * TOOLS_SHARE_WARN:.0f}%: long tool results and turns are cut sooner; enable fewer tools, or {fix}"
            )
        return None

    def as_dict(self) -> dict[str, int | float | bool]:
        return {
            "n_ctx": self.n_ctx,
            "tools_tokens": self.tools_tokens,
            "conversation_tokens": self.conversation_tokens,
            "tools_share": round(self.tools_share, 4),
            "over_share": self.over_share,
        }


def context_budget(n_ctx: int, tools_tokens: int | None) -> ContextBudget:
    """The budget of a context of `n_ctx` tokens with the tools' schemas taking `tools_tokens`."""
    return ContextBudget(n_ctx=n_ctx, tools_tokens=max(0, tools_tokens or 0))
