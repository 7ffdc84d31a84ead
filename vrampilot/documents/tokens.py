"""Counting tokens in the current model's own tokenizer.

Sizes shown to the user and fit decisions must be in the tokens the model will actually see, so a
word-count estimate is never used. Without a loaded model the tokenizer comes from the GGUF file
alone (`vocab_only`: vocabulary and merges, no weights), which takes a fraction of a second even
for a 40 GB file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from vrampilot import llamacpp
from vrampilot.llamacpp import install_log

if TYPE_CHECKING:  # the binding's types, for the checker; at run time it comes through llamacpp.load()
    import llama_cpp
else:
    llama_cpp = llamacpp.load()

TokenCounter = Callable[[str], int]


class Tokenizer:
    """A model's tokenizer; thread-safe (llama.cpp's tokenizer is not re-entrant per model)."""

    def __init__(self, llm: llama_cpp.Llama, *, owned: bool) -> None:
        self._llm = llm
        self._owned = owned
        self._lock = threading.Lock()

    @classmethod
    def from_model_file(cls, path: str | Path) -> Tokenizer:
        install_log()
        return cls(llama_cpp.Llama(str(path), vocab_only=True, verbose=False), owned=True)

    def tokenize(self, text: str) -> list[int]:
        with self._lock:
            return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.tokenize(text))

    def close(self) -> None:
        if self._owned:
            with self._lock:
                self._llm.close()


_cache: dict[tuple[str, int, int], Tokenizer] = {}
_cache_lock = threading.Lock()


def tokenizer_for(model_path: str | Path) -> Tokenizer:
    """The tokenizer of a model file, opened once per file version and kept."""
    p = Path(model_path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        tok = _cache.get(key)
        if tok is None:
            tok = Tokenizer.from_model_file(p)
            _cache[key] = tok
        return tok
