"""Speculative decoding in the app's own process, with the plan's settings.

llama-cpp-python drafts through `Llama(draft_model=...)`: before each step it asks the draft for
tokens, evaluates the sampled token and the drafted ones in one batch and keeps the drafted ones
the model itself samples. Its prompt-lookup drafter covers n-gram drafting; `ModelDraft` below is
the draft-model drafter it lacks, over a second llama.cpp model loaded with the context
llama-server would give it (planner/search/draft.py: same n_ctx and batch sizes, its own cache types,
layers and device, one logit row). `CountingDraft` wraps either and counts, per reply, how many
drafted tokens were offered and how many the model accepted: what the stats line shows and what
the planner learns its acceptance rate from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from vrampilot import llamacpp
from vrampilot.export import NGRAM_SIZE

if TYPE_CHECKING:
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding
else:  # the binding's drafters, from the binding llamacpp.load() made ready
    llama_cpp = llamacpp.load()
    LlamaDraftModel = llama_cpp.llama_speculative.LlamaDraftModel
    LlamaPromptLookupDecoding = llama_cpp.llama_speculative.LlamaPromptLookupDecoding

Tokens = npt.NDArray[np.intc]


class ModelDraft(LlamaDraftModel):
    """Greedy drafts from a second model of the same vocabulary (llama-server's draft-simple)."""

    def __init__(self, llm: llama_cpp.Llama, n_draft: int, buffers: Mapping[str, int] | None = None) -> None:
        self.llm = llm
        self.n_draft = n_draft
        self.buffers = dict(buffers or {})  # llama.cpp's buffer lines of its load, per buffer name
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def __call__(self, input_ids: Tokens, /, **kwargs: Any) -> Tokens:
        llm = self.llm
        ids = [int(t) for t in input_ids]
        if not ids:
            return np.array([], dtype=np.intc)
        cached = llm.input_ids[: llm.n_tokens].tolist()
        keep = 0
        for a, b in zip(cached, ids, strict=False):
            if a != b:
                break
            keep += 1
        # At least the last token is evaluated again: its logits are what the draft starts from.
        llm.n_tokens = min(keep, len(ids) - 1)  # eval drops the cache from here on
        llm.eval(ids[llm.n_tokens :])
        room = llm.n_ctx() - llm.n_tokens - 1
        out: list[int] = []
        for _ in range(max(0, min(self.n_draft, room))):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            token = int(np.argmax(logits))
            out.append(token)
            if len(out) == self.n_draft or llama_cpp.llama_vocab_is_eog(self._vocab, token):
                break
            llm.eval([token])
        return np.array(out, dtype=np.intc)

    def close(self) -> None:
        self.llm.close()


class CountingDraft(LlamaDraftModel):
    """Any drafter, with the reply's drafted and accepted tokens counted.

    A draft offered at position i is judged at the next call: the tokens then in the context from
    position i on are what the model kept, so the accepted count is the run of drafted tokens they
    start with. The last draft of a reply is never judged (the reply ended first) and not counted."""

    def __init__(self, inner: LlamaDraftModel, n_draft: int) -> None:
        self.inner = inner
        self.n_draft = n_draft
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self._pending: tuple[int, list[int]] | None = None

    def begin_reply(self) -> None:
        self.drafted_tokens = self.accepted_tokens = 0
        self._pending = None

    def __call__(self, input_ids: Tokens, /, **kwargs: Any) -> Tokens:
        if self._pending is not None:
            start, offered = self._pending
            kept = [int(t) for t in input_ids[start : start + len(offered)]]
            run = 0
            while run < len(kept) and kept[run] == offered[run]:
                run += 1
            self.drafted_tokens += len(offered)
            self.accepted_tokens += run
        out = np.asarray(self.inner(input_ids), dtype=np.intc)[: self.n_draft]
        self._pending = (len(input_ids), [int(t) for t in out]) if len(out) else None
        return out

    def close(self) -> None:
        if isinstance(self.inner, ModelDraft):
            self.inner.close()


def ngram_draft(n_draft: int) -> CountingDraft:
    """Prompt-lookup drafting: continuations of the last n-gram found earlier in the context."""
    return CountingDraft(LlamaPromptLookupDecoding(max_ngram_size=NGRAM_SIZE, num_pred_tokens=n_draft), n_draft)
