"""File names that wrap in a narrow column.

Qt breaks a label's lines only between words, and a file name is one word
(`qwen2_5_coder_7b_instruct_q4_k_m.gguf`): it set the side panel's minimum width, and the whole
panel scrolled sideways, hiding its buttons. A zero-width space after each separator lets the name
break there, as it reads; it shows as nothing.
"""

from __future__ import annotations

import re

# A point only before a letter ("Q4_1.gguf"): numbers (2731.5, 0.3.36, 127.0.0.1) stay whole.
_SEPARATOR = re.compile(r"([_\-/\\]|\.(?=[^\W\d]))(?=\S)")
ZERO_WIDTH_SPACE = "\u200b"


# Words shorter than this never set the panel's width ("llama-server" stays as it is).
LONG_WORD_CHARS = 20
_LONG_WORD = re.compile(rf"\S{{{LONG_WORD_CHARS},}}")


def wrappable(text: str) -> str:
    """`text` with a break opportunity after each `_ - / \\` and a point before a letter inside
    each long word (for plain or escaped text; never for text a user may select and copy)."""
    return _LONG_WORD.sub(lambda m: _SEPARATOR.sub(r"\1" + ZERO_WIDTH_SPACE, m.group(0)), text)


def unwrapped(text: str) -> str:
    """`text` without the break opportunities `wrappable` added (what it reads as)."""
    return text.replace(ZERO_WIDTH_SPACE, "")
