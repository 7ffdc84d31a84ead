"""The hybrid backend as a chat backend: one chat's HybridSession, fed by the llama.cpp engine's
template and tokenizer.

Why the engine: the torch model reads the same GGUF file, so llama.cpp's tokenization of that file is
the model's tokenization; using it (and its chat template, and its detokenizer for the streamed
text) makes a hybrid reply read exactly like a llama.cpp one, and a follow-up turn's prompt start
with the tokens the cache already holds, so only the new turn is fed.

Qt-free, and importing it does not import torch (an optional extra): the window imports this module
at start; torch loads only when a hybrid chat first replies (or a model is checked for support).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vrampilot.engine import (
    ContextOverflow,
    Engine,
    EngineError,
    GenerationStats,
    Message,
    Reply,
    SamplingParams,
    StopReason,
    TextFn,
    stream_tokens,
)
from vrampilot.errors import UserError
from vrampilot.gguf import ModelSpec
from vrampilot.message import drop_oldest_turns
from vrampilot.meters.kvcache import KvCacheUsage

if TYPE_CHECKING:
    from vrampilot.hybrid.session import HybridSession

INSTALL_COMMAND = "pip install 'vrampilot[hybrid]'"
INSTALL_HINT = f"The experimental hybrid backend needs torch, which is not installed: {INSTALL_COMMAND}"
# Streamed replies report the cache's bytes this often (in tokens), besides after the prompt and
# at the end: often enough for the meter to move, rarely enough to cost nothing.
USAGE_EVERY_TOKENS = 8

UsageFn = Callable[[KvCacheUsage], None]


def torch_available() -> bool:
    """Whether torch can be found, without importing it (that takes seconds and much memory)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or an import hook that refuses torch
        return False


# docs/hybrid-cache.md's measurement of the default config (bench/hybrid.py on the embedded model), quoted in
# the note beside the backend choice; the other configs' numbers are in that page only.
DEFAULT_MEASURED = (
    "Measured on SmolLM2-135M at 8K tokens: 9.9% of the f16 cache's bytes, perplexity +0.96% over the "
    "full cache on held-out text (+0.53% on the text the budgets were calibrated on), where a plain window "
    "of the same bytes gives +5.0% and a q4_0 cache cut to the same bytes +11.3%; passkey 18 of 40 keys "
    "where the full cache finds 24 (the window 0, the q4_0 cache 6)."
)


def about_text(config: str = "default") -> str:
    """What the backend with this config is and what it costs, for the note beside the backend choice."""
    from vrampilot.hybrid.config import get_config

    cfg = get_config(config)
    measured = f" {DEFAULT_MEASURED}" if config == "default" else " Its measurements are in docs/hybrid-cache.md."
    return (
        f"Experimental: a training-free, DeepSeek-V4-style compressed KV cache, config {cfg.name}: {cfg.description}. "
        "It runs on the CPU in torch, slower than llama.cpp, and uses temperature and seed only (no "
        f"top-p/top-k/min-p/repeat penalty).{measured} Llama-family models only."
    )


def held_at(config: str, spec: ModelSpec, n_tokens: int) -> KvCacheUsage | None:
    """What this config's cache would hold after n_tokens of this model, beside llama.cpp's f16 cache;
    None for a model whose layers differ (the backend cannot run it). Torch-free: counted, not run."""
    from vrampilot.hybrid.config import CacheShape, get_config
    from vrampilot.hybrid.layer_plan import config_kv_bytes

    if len(set(spec.n_head)) != 1 or len(set(spec.n_head_kv)) != 1 or spec.head_dim_k != spec.head_dim_v:
        return None
    shape = CacheShape(
        spec.n_layer,
        spec.n_head_kv[0],
        spec.head_dim_k,
        (spec.n_layer, spec.n_head[0], spec.n_head_kv[0], spec.head_dim_k, spec.n_vocab),
    )
    return KvCacheUsage(
        config_kv_bytes(get_config(config), shape, n_tokens), n_tokens * shape.f16_kv_bytes_per_token, n_tokens
    )


def unsupported_reason(model_path: str | os.PathLike[str]) -> str | None:
    """Why the hybrid backend cannot run this model file, or None when it can.

    The same checks `LlamaModel` makes before reading weights (architecture, uniform layers, RoPE),
    from the header only. Imports torch: call it off the GUI thread.
    """
    if not torch_available():
        return INSTALL_HINT
    from vrampilot.gguf import load_model_spec, read_gguf
    from vrampilot.hybrid.model import config_from_spec

    path = Path(model_path)
    try:
        spec = load_model_spec(path)
        if spec.split_paths:
            return f"{path.name}: split models are not supported by the hybrid backend"
        config_from_spec(spec, read_gguf(path))
    except UserError as exc:
        return str(exc)
    return None


@dataclass(frozen=True, kw_only=True)  # after Reply's tool_calls, which has a default
class HybridReply(Reply):
    """A Reply as the engine gives one, plus what the cache holds after it."""

    # Keyword-only: Reply's own fields end with one that has a default (tool_calls).
    kv: KvCacheUsage = field(kw_only=True)
    load_s: float = field(
        default=0.0, kw_only=True
    )  # reading the weights into torch, when this reply had to (the first one)


def _stop_reason(stop: StopReason | None, cancelled: bool, at_context: bool) -> StopReason:
    if stop is not None:
        return stop
    if cancelled:
        return "cancelled"
    return "context" if at_context else "length"


class HybridChat:
    """One chat's hybrid session. Every call runs on one worker thread (the window's engine thread,
    which also owns llama.cpp), never two at once: HybridSession is not thread-safe."""

    def __init__(self, model_path: str | os.PathLike[str], config: str = "default", *, threads: int | None = None):
        self.model_path = Path(model_path)
        self.config = config
        self.threads = threads
        self.session: HybridSession | None = None  # read from the file on the first reply

    @property
    def prepared(self) -> bool:
        return self.session is not None

    def prepare(self) -> float:
        """Import torch and read the weights (seconds); returns how long it took, 0 if already done."""
        if self.session is not None:
            return 0.0
        t0 = time.perf_counter()
        from vrampilot.hybrid.session import HybridSession

        self.session = HybridSession(self.model_path, self.config)
        return time.perf_counter() - t0

    def usage(self) -> KvCacheUsage:
        s = self.session
        if s is None:
            return KvCacheUsage(0, 0, 0)
        return KvCacheUsage(s.kv_bytes_held(), s.full_cache_bytes(), s.n_tokens)

    def fit_messages(self, engine: Engine, messages: Sequence[Message], max_tokens: int) -> list[Message]:
        """Drop the oldest turns (never the system prompt or the last message) until the prompt and
        a full reply fit the model's trained context (the hybrid backend's limit, not llama.cpp's)."""
        self.prepare()
        assert self.session is not None
        n_ctx = self.session.n_ctx
        return drop_oldest_turns(messages, lambda kept: len(engine.tokenize_prompt(kept)) + max_tokens <= n_ctx)

    def chat(
        self,
        engine: Engine,
        messages: Sequence[Message],
        sampling: SamplingParams | None = None,
        *,
        on_text: TextFn | None = None,
        on_usage: UsageFn | None = None,
        cancel: threading.Event | None = None,
        trim: bool = False,
    ) -> HybridReply:
        """The assistant's reply to `messages`, streamed like `Engine.chat` (same stats, same stop reasons).

        `engine` must have this chat's model file loaded: its template renders the prompt and its
        tokenizer makes the tokens. `on_usage` hears the cache's bytes after the prompt, every few
        tokens and at the end. Raises ContextOverflow when the prompt alone fills the trained context
        (a long reply stops with stop_reason "context" instead).
        """
        sampling = sampling or SamplingParams()
        cancel = cancel or threading.Event()
        if engine.model_path is None or Path(engine.model_path) != self.model_path:
            raise EngineError(f"load {self.model_path.name} first: the hybrid backend uses its tokenizer")
        load_s = self.prepare()
        session = self.session
        assert session is not None
        if on_usage is not None and load_s:
            on_usage(self.usage())  # the weights are read: the window can say it is generating now
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        if trim:
            messages = self.fit_messages(engine, messages, sampling.max_tokens)

        t0 = time.perf_counter()
        tokens = engine.tokenize_prompt(messages)
        if len(tokens) >= session.n_ctx:
            raise ContextOverflow(len(tokens), sampling.max_tokens, session.n_ctx)
        reused = session.reusable_tokens(tokens)

        def report(n_shown: int) -> None:
            # After the prompt (the first token), then every few tokens: the meter follows the cache.
            if on_usage is not None and n_shown % USAGE_EVERY_TOKENS == 0:
                on_usage(self.usage())

        t_eval = time.perf_counter()
        gen = session.generate(
            tokens,
            sampling.max_tokens,
            temperature=sampling.temperature,
            seed=sampling.seed,
            stop_tokens=[],  # llama.cpp's end-of-generation set is wider than the file's one EOS id
            cancel=cancel.is_set,
        )
        out = stream_tokens(
            gen,
            detokenize=engine.detokenize,
            is_end=engine.is_end_of_generation,
            max_tokens=sampling.max_tokens,
            cancel=cancel,
            started_at=t_eval,
            on_text=on_text,
            on_token=report,
        )
        first = out.first_token_at if out.first_token_at is not None else out.last_token_at
        stats = GenerationStats.from_times(
            len(tokens),
            reused,
            out.completion_tokens,
            (t0, t_eval, first, out.last_token_at),
            (session.n_tokens, session.n_ctx),
            _stop_reason(out.stop, cancel.is_set(), session.n_tokens >= session.n_ctx),
        )
        usage = self.usage()
        if on_usage is not None:
            on_usage(usage)
        return HybridReply(out.text, stats, kv=usage, load_s=load_s)


class HybridBackend:
    """The hybrid cache as a chat backend (vrampilot.engine.backend.ChatBackend): one per chat, since
    its session holds that chat's compressed cache."""

    replan_cures_overflow = False  # its limit is the model's trained context, not the plan's

    def __init__(
        self, model_path: str | os.PathLike[str], *, config: str = "default", threads: int | None = None
    ) -> None:
        self.chat = HybridChat(model_path, config, threads=threads)
        # The storage key (vrampilot.storage): plain "hybrid" for the default config.
        self.key = "hybrid" if config == "default" else f"hybrid:{config}"
        self.label = f"the experimental hybrid cache (torch, {config})"

    @property
    def model_path(self) -> Path:
        return self.chat.model_path

    def usage(self) -> KvCacheUsage:
        return self.chat.usage()

    def reply(
        self,
        engine: Engine,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        on_text: TextFn,
        on_report: Callable[[object], None],
        cancel: threading.Event,
        trim: bool,
    ) -> Reply:
        if any(m.images for m in messages):
            # The torch model has no vision tower: an image would be silently dropped.
            raise UserError(
                "the experimental hybrid backend reads no images: switch this chat's backend to llama.cpp "
                "(with the vision projector on in the Plan panel) to ask about them"
            )
        return self.chat.chat(engine, messages, sampling, on_text=on_text, on_usage=on_report, cancel=cancel, trim=trim)

    def status_text(self) -> str:
        if self.chat.prepared:
            return "Generating with the hybrid cache (torch)…"
        return "Reading the model into torch for the hybrid cache (first reply of this chat only)…"
