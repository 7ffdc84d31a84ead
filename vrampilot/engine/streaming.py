"""The one token-streaming loop every chat backend uses: tokens in, text pieces out, a stop reason.

llama.cpp's engine and the hybrid cache produce tokens differently but must stream, stop and
count alike, so that a reply reads the same and its stats mean the same whichever backend made
it: end-of-generation tokens end the reply and are not shown, text is decoded incrementally (a
token may end inside a UTF-8 character), and the reply stops on cancel, at max_tokens, or when
the context is full, in that order of checks after each token.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from vrampilot.engine.stats import StopReason

TextFn = Callable[[str], None]


@dataclass(frozen=True)
class Streamed:
    text: str
    completion_tokens: int
    stop: StopReason | None  # None: the token source ended by itself
    first_token_at: float | None  # perf_counter() of the first token, None when there was none
    last_token_at: float


def stream_tokens(
    tokens: Iterator[int],
    *,
    detokenize: Callable[[Sequence[int]], bytes],
    is_end: Callable[[int], bool],
    max_tokens: int,
    cancel: threading.Event,
    started_at: float,
    on_text: TextFn | None = None,
    context_full: Callable[[], bool] | None = None,
    on_token: Callable[[int], None] | None = None,
) -> Streamed:
    """Drain `tokens` (a generator is closed at the end) into text, stopping as described above.

    `on_token(n)` is called after the n-th shown token (n=0 for the first token of any kind, so a
    backend can report that the prompt is done). A source raising InterruptedError was cancelled
    while feeding (the hybrid cache's prompt).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces: list[str] = []

    def emit(text: str) -> None:
        if text:
            pieces.append(text)
            if on_text is not None:
                on_text(text)

    completion = 0
    first: float | None = None
    last = started_at
    stop: StopReason | None = None
    try:
        for token in tokens:
            last = time.perf_counter()
            if first is None:
                first = last
                if on_token is not None:
                    on_token(0)
            if is_end(token):
                stop = "eos"
                break
            completion += 1
            emit(decoder.decode(detokenize([token])))
            if on_token is not None:
                on_token(completion)
            if cancel.is_set():
                stop = "cancelled"
                break
            if completion >= max_tokens:
                stop = "length"
                break
            if context_full is not None and context_full():
                stop = "context"
                break
    except InterruptedError:
        stop = "cancelled"
    finally:
        close = getattr(tokens, "close", None)
        if close is not None:
            close()
    emit(decoder.decode(b"", final=True))
    return Streamed("".join(pieces), completion, stop, first, last)
