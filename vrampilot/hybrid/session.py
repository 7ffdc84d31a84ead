"""HybridSession: what the app's chat needs from the hybrid backend, and nothing more.

Token ids in, token ids out (the chat tokenizes with the engine's tokenizer, which is llama.cpp's for
the same file), plus the two numbers the meters show: bytes the cache holds, and what llama.cpp's f16
full cache would hold for the same tokens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence

import torch

from vrampilot.hybrid.cache import AttentionCache, full_cache, hybrid_cache
from vrampilot.hybrid.config import HybridConfig, get_config
from vrampilot.hybrid.model import LlamaModel

PREFILL_CHUNK = 256


class HybridSession:
    """One conversation's model and cache. Not thread-safe: one worker thread owns it."""

    def __init__(self, model_path: str | os.PathLike[str], config: HybridConfig | str = "default") -> None:
        self.model = LlamaModel(model_path)
        # "full" gives the same torch path with the full cache, for side-by-side comparisons.
        self.config: HybridConfig | None = (
            None if config == "full" else (get_config(config) if isinstance(config, str) else config.validate())
        )
        self._tokens: list[int] = []
        self._cache = self._new_cache()
        self._last_hidden: torch.Tensor | None = None

    def _new_cache(self) -> AttentionCache:
        mc = self.model.config
        return full_cache(mc) if self.config is None else hybrid_cache(mc, self.model.rope, self.config)

    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    def reusable_tokens(self, prompt_tokens: Sequence[int]) -> int:
        """How many of `prompt_tokens` the cache already holds: all it holds when the prompt extends
        them, else 0 (the hybrid cache cannot rewind, so `generate` starts over)."""
        n = len(self._tokens)
        return n if len(prompt_tokens) > n and list(prompt_tokens[:n]) == self._tokens else 0

    @property
    def n_ctx(self) -> int:
        return self.model.config.n_ctx_train

    @property
    def eos_token_id(self) -> int | None:
        return self.model.config.eos_token_id

    def reset(self) -> None:
        self._tokens = []
        self._cache = self._new_cache()
        self._last_hidden = None

    def kv_bytes_held(self) -> int:
        return self._cache.bytes_held()

    def full_cache_bytes(self) -> int:
        """What llama.cpp's f16 cache would hold for the tokens this session holds."""
        return self.n_tokens * self.model.config.f16_kv_bytes_per_token

    def _feed(self, tokens: Sequence[int], cancel: Callable[[], bool] | None) -> None:
        chunk = min(PREFILL_CHUNK, self._cache.max_chunk or PREFILL_CHUNK)
        ids = torch.tensor(list(tokens), dtype=torch.long)
        for start in range(0, len(ids), chunk):
            if cancel is not None and cancel():
                raise InterruptedError("cancelled")
            part = ids[start : start + chunk]
            self._last_hidden = self.model.forward_hidden(part, len(self._tokens), self._cache)[-1]
            self._tokens.extend(int(t) for t in part)

    def generate(
        self,
        prompt_tokens: Sequence[int],
        max_tokens: int,
        *,
        temperature: float = 0.0,
        seed: int | None = None,
        stop_tokens: Sequence[int] | None = None,
        cancel: Callable[[], bool] | None = None,
    ) -> Iterator[int]:
        """Yield up to max_tokens new token ids after the prompt (greedy at temperature 0).

        A prompt that extends what the cache already holds (the previous turns) only feeds the new
        tokens: the hybrid cache cannot rewind, so any other prompt starts over.
        """
        prompt = list(prompt_tokens)
        if not prompt:
            raise ValueError("empty prompt")
        reused = self.reusable_tokens(prompt)
        if reused:
            new = prompt[reused:]
        else:
            self.reset()
            new = prompt
        stops = set(
            stop_tokens if stop_tokens is not None else ([self.eos_token_id] if self.eos_token_id is not None else [])
        )
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        self._feed(new, cancel)
        for _ in range(max_tokens):
            if self.n_tokens >= self.n_ctx or (cancel is not None and cancel()):
                return
            assert self._last_hidden is not None
            logits = self.model.logits(self._last_hidden)
            if temperature <= 0:
                token = int(logits.argmax())
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=gen))
            yield token
            if token in stops:
                return
            self._feed([token], cancel)
