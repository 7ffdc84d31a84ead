"""File names that wrap in a narrow column.

Qt breaks a label's lines only between words, and a file name is one word
(`qwen2_5_coder_7b_instruct_q4_k_m.gguf`): it set the side panel's minimum width, and the whole
panel scrolled sideways, hiding its buttons. A zero-width space after each separator lets the name
break there, as it reads; it shows as nothing.
"""

from __future__ import annotations

import re

_SEPARATOR = re.compile(r"([_.\-/\\])(?=\S)")
ZERO_WIDTH_SPACE = "\u200b"


def wrappable(text: str) -> str:
    """`text` with a break opportunity after each `_ . - / \\` inside a word (for plain or escaped text)."""
    return _SEPARATOR.sub(r"\1" + ZERO_WIDTH_SPACE, text)


def unwrapped(text: str) -> str:
    """`text` without the break opportunities `wrappable` added (what it reads as)."""
    return text.replace(ZERO_WIDTH_SPACE, "")
