"""The engine session: one loaded plan, streaming replies, cancel, KV prefix reuse, stats.

The GUI runs every call here on a worker thread and the CLI on its main thread; the session holds
a lock so two calls never touch llama.cpp at once. llama-cpp-python releases the GIL inside
llama.cpp calls, so a worker generating does not stall the GUI thread.

Prefix reuse: the KV cache keeps the tokens of the last turn (prompt + reply). The next prompt is
compared with them token by token and only the part after the common prefix is evaluated, so a
follow-up costs its new tokens, and regenerate or edit costs only what changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from vrampilot import llamacpp
from vrampilot.engine.backoff import next_backoff
from vrampilot.engine.draft import CountingDraft
from vrampilot.engine.errors import (
    AllocationError,
    ContextOverflow,
    EngineError,
    ModelFileChanged,
    NoModelLoaded,
    NoTokenizer,
)
from vrampilot.engine.headroom import check_headroom
from vrampilot.engine.loader import ProgressFn, open_llama
from vrampilot.engine.progress import PromptProgress, PromptProgressFn
from vrampilot.engine.sampling import SamplingParams
from vrampilot.engine.stats import GenerationStats, StopReason
from vrampilot.engine.streaming import TextFn, stream_tokens
from vrampilot.engine.template import ChatTemplate
from vrampilot.engine.vision import ImageError, projector_of
from vrampilot.message import Message, ToolCall, drop_oldest_turns
from vrampilot.planner.plan import Plan
from vrampilot.planner.settings import Settings
from vrampilot.storage import ImageFileError, read_image

if TYPE_CHECKING:  # the binding's types, for the checker; at run time it comes through llamacpp.load()
    import llama_cpp
else:
    llama_cpp = llamacpp.load()

Opener = Callable[..., llama_cpp.Llama]


@dataclass(frozen=True)
class LoadResult:
    plan: Plan  # the plan that is loaded (differs from the one asked for after a back-off)
    changes: tuple[str, ...]  # what the back-off changed, one line per step, in order
    load_s: float

    @property
    def backed_off(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Reply:
    text: str
    stats: GenerationStats
    # The tools the model called instead of (or beside) answering: a tool-using chat through
    # llama-server only (vrampilot.agents runs them and asks again).
    tool_calls: tuple[ToolCall, ...] = ()


class UnparsedReply(EngineError):
    """llama-server could not read the model's output as its tool-call format expects (a call cut
    by the reply's length, JSON that is no call): it ends the stream with an error event instead
    of the reply. `partial` is what was streamed before it, so the text is not lost."""

    def __init__(self, message: str, partial: Reply) -> None:
        super().__init__(message)
        self.partial = partial


@dataclass(frozen=True)
class ContextCheck:
    prompt_tokens: int
    max_tokens: int
    n_ctx: int

    @property
    def fits(self) -> bool:
        return self.prompt_tokens + self.max_tokens <= self.n_ctx


@dataclass(frozen=True)
class SavedState:
    """A KV cache written to disk with llama.cpp's state save (tokens included)."""

    path: Path
    tokens: int
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class _FileIdentity:
    """What a model file was when it was loaded. llama.cpp maps the file: a file replaced by a new
    one (a rename, a download) or deleted leaves the mapped old one intact, but one truncated or
    rewritten in place changes the mapped bytes, and reading past its new end is a SIGBUS that
    ends the process."""

    path: Path
    device: int
    inode: int
    size_bytes: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> _FileIdentity:
        st = path.stat()
        return cls(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def of_model(cls, plan: Plan) -> tuple[_FileIdentity, ...]:
        out = []
        for p in plan.spec.split_paths or (plan.spec.path,):
            with contextlib.suppress(OSError):  # gone already: the mapping holds it
                out.append(cls.of(p))
        return tuple(out)

    def changed_in_place(self) -> str | None:
        """How the file changed in place since, or None (unchanged, replaced or deleted)."""
        try:
            now = _FileIdentity.of(self.path)
        except OSError:
            return None
        if (now.device, now.inode) != (self.device, self.inode):
            return None
        if now.size_bytes != self.size_bytes:
            return f"now {now.size_bytes} bytes, {self.size_bytes} when loaded"
        if now.mtime_ns != self.mtime_ns:
            return "rewritten in place"
        return None


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Engine:
    """A llama.cpp session for one plan at a time."""

    def __init__(self, opener: Opener = open_llama, *, max_backoff_steps: int = 4) -> None:
        self._opener = opener
        self._max_backoff_steps = max_backoff_steps
        self._lock = threading.RLock()
        self._llm: llama_cpp.Llama | None = None
        self._plan: Plan | None = None
        self._template: ChatTemplate | None = None
        self._files: tuple[_FileIdentity, ...] = ()
        self._cancel = threading.Event()
        self._abort_cb = llama_cpp.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self._no_abort_cb = llama_cpp.ggml_abort_callback()
        # Called (on the engine's thread) between prompt batches of every chat; the GUI sets it once.
        self.prompt_progress: PromptProgressFn | None = None

    # -- state -------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._llm is not None

    @property
    def plan(self) -> Plan | None:
        return self._plan

    @property
    def settings(self) -> Settings | None:
        return self._plan.settings if self._plan else None

    @property
    def model_path(self) -> Path | None:
        return self._plan.spec.path if self._plan else None

    @property
    def template(self) -> ChatTemplate | None:
        return self._template

    @property
    def n_ctx(self) -> int:
        return self._require().n_ctx()

    @property
    def tokens_in_cache(self) -> int:
        return self._llm.n_tokens if self._llm is not None else 0

    def _require(self) -> llama_cpp.Llama:
        if self._llm is None:
            raise NoModelLoaded()
        return self._llm

    def _require_tokenizer(self) -> llama_cpp.Llama:
        """The loaded model, for a call that tokenizes (NoTokenizer where the file has none)."""
        llm = self._require()
        if self._plan is not None and self._plan.spec.tokenizer_model is None:
            raise NoTokenizer(self._plan.spec.path.name)
        return llm

    # -- load --------------------------------------------------------------------------------
    def load(
        self,
        plan: Plan,
        *,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        backoff: bool = True,
    ) -> LoadResult:
        """Load `plan`, backing off to cheaper alternatives when llama.cpp cannot allocate it.

        The previous model is freed first (two models at once would defeat the plan). On failure
        or cancel nothing is loaded.
        """
        with self._lock:
            self.unload()
            start = time.perf_counter()
            changes: list[str] = []
            current = plan
            while True:
                try:
                    check_headroom(current)
                    llm = self._opener(current.spec.path, current.settings, progress=progress, cancel=cancel)
                    break
                except AllocationError as exc:
                    step = next_backoff(current) if backoff and len(changes) < self._max_backoff_steps else None
                    if step is None:
                        if changes:
                            raise AllocationError(f"{exc} (after backing off: {'; '.join(changes)})") from None
                        raise
                    changes.append(step.change)
                    current = step.plan
            self._llm = llm
            self._plan = current
            self._files = _FileIdentity.of_model(current)
            self._template = self._make_template(llm, current)
            return LoadResult(current, tuple(changes), time.perf_counter() - start)

    @staticmethod
    def _make_template(llm: llama_cpp.Llama, plan: Plan) -> ChatTemplate:
        metadata = getattr(llm, "metadata", {}) or {}
        source = plan.spec.chat_template or metadata.get("tokenizer.chat_template")
        model = getattr(llm, "_model", None)

        def text(token: int) -> str:
            return model.token_get_text(token) if model is not None and token >= 0 else ""

        bos = text(llm.token_bos()) if model is not None else ""
        eos = text(llm.token_eos()) if model is not None else ""
        return ChatTemplate(source, bos_token=bos, eos_token=eos)

    def unload(self) -> None:
        with self._lock:
            if self._llm is not None:
                self._llm.close()
            self._llm = None
            self._plan = None
            self._template = None
            self._files = ()

    def _check_files(self) -> None:
        """Unload a model whose file changed in place since it was loaded, before anything reads it
        (a file truncated while the chat sat idle would otherwise end the app at the next token)."""
        for f in self._files:
            what = f.changed_in_place()
            if what is not None:
                self.unload()
                raise ModelFileChanged(f.path.name, what)

    # -- chat --------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the reply in progress (also during a long prompt) as soon as llama.cpp allows."""
        self._cancel.set()

    def render(self, messages: Sequence[Message]) -> str:
        if self._template is None:
            raise NoModelLoaded()
        return self._template.render(messages)

    def tokenize_prompt(self, messages: Sequence[Message]) -> list[int]:
        with self._lock:
            llm = self._require_tokenizer()
            # The template writes the special tokens itself (BOS included where the model wants it),
            # as llama-cpp-python's own chat handler assumes.
            return llm.tokenize(self.render(messages).encode("utf-8"), add_bos=False, special=True)

    def check_context(self, messages: Sequence[Message], max_tokens: int) -> ContextCheck:
        with self._lock:
            return ContextCheck(len(self.tokenize_prompt(messages)), max_tokens, self.n_ctx)

    def fit_messages(self, messages: Sequence[Message], max_tokens: int) -> list[Message]:
        """Drop the oldest turns (never the system prompt or the last message) until the
        conversation and a full reply fit; returns what is left (possibly still too long)."""
        with self._lock:
            return drop_oldest_turns(messages, lambda kept: self.check_context(kept, max_tokens).fits)

    def chat(
        self,
        messages: Sequence[Message],
        sampling: SamplingParams | None = None,
        *,
        on_text: TextFn | None = None,
        cancel: threading.Event | None = None,
        allow_overflow: bool = False,
        on_prompt_progress: PromptProgressFn | None = None,
    ) -> Reply:
        """Generate the assistant's reply to `messages`, streaming text pieces to `on_text`.

        Raises ContextOverflow before evaluating anything when the prompt plus `max_tokens` would
        pass n_ctx (unless `allow_overflow`: then the reply stops when the context is full).
        Setting `cancel` (or calling `cancel()`) stops the prompt or the reply; the text so far is
        returned with stop_reason "cancelled". A cancelled prompt keeps what was already evaluated
        in the cache, so asking again continues from there.
        `on_prompt_progress` (else `self.prompt_progress`) hears how the prompt evaluation goes.
        """
        sampling = sampling or SamplingParams()
        with self._lock:
            self._check_files()
            llm = self._require()
            self._cancel = cancel if cancel is not None else threading.Event()
            t0 = time.perf_counter()
            if any(m.images for m in messages):
                return self._chat_with_images(llm, messages, sampling, on_text, allow_overflow, t0)
            tokens = self.tokenize_prompt(messages)
            n_ctx = llm.n_ctx()
            if len(tokens) >= n_ctx or (not allow_overflow and len(tokens) + sampling.max_tokens > n_ctx):
                raise ContextOverflow(len(tokens), sampling.max_tokens, n_ctx)

            t_eval = time.perf_counter()
            reused = self._keep_prefix(llm, tokens)
            report = on_prompt_progress or self.prompt_progress
            if not self._prefill(llm, tokens[reused:], report, reused):
                now = time.perf_counter()
                return Reply("", self._stats(llm, tokens, reused, 0, (t0, t_eval, now, now), "cancelled"))
            return self._decode(llm, tokens, reused, sampling, on_text, (t0, t_eval))

    def _chat_with_images(
        self,
        llm: llama_cpp.Llama,
        messages: Sequence[Message],
        sampling: SamplingParams,
        on_text: TextFn | None,
        allow_overflow: bool,
        t0: float,
    ) -> Reply:
        """A conversation with images: evaluated whole through the projector (the cache keeps no
        prefix across such turns: an image's positions hold no token ids to compare)."""
        projector = projector_of(llm)
        if projector is None:
            raise ImageError("this plan has no vision projector: plan the model with one (--mmproj) to send images")
        images = [(Path(p).name, _read_image(p)) for m in messages for p in m.images]
        marked = [replace(m, content=projector.marker * len(m.images) + m.content) if m.images else m for m in messages]
        n_ctx = llm.n_ctx()
        t_eval = time.perf_counter()
        room = 1 if allow_overflow else sampling.max_tokens
        shape = projector.evaluate(llm, self.render(marked), images, n_ctx, room)
        if shape.n_tokens + room > n_ctx:
            raise ContextOverflow(shape.n_tokens, sampling.max_tokens, n_ctx)
        # Stats count the prompt's tokens; an image's are its positions (no ids).
        prompt = [t for chunk in shape.text_tokens for t in chunk] + [-1] * sum(shape.image_tokens)
        return self._decode(llm, prompt, 0, sampling, on_text, (t0, t_eval))

    def _keep_prefix(self, llm: llama_cpp.Llama, tokens: list[int]) -> int:
        """Keep the cached tokens shared with `tokens`; returns how many are reused."""
        cached = llm.input_ids[: llm.n_tokens].tolist()
        # At least one token must be evaluated to get fresh logits to sample from.
        keep = min(_common_prefix(cached, tokens), len(tokens) - 1)
        if keep < llm.n_tokens:
            memory = llama_cpp.llama_get_memory(llm.ctx)
            if keep == 0 or not llama_cpp.llama_memory_seq_rm(memory, 0, keep, -1):
                # Recurrent models cannot drop a suffix of their state: start over.
                llm.reset()
                llama_cpp.llama_memory_clear(memory, True)
                keep = 0
        llm.n_tokens = keep
        return keep

    def _prefill(
        self, llm: llama_cpp.Llama, tokens: list[int], report: PromptProgressFn | None = None, reused: int = 0
    ) -> bool:
        """Evaluate all but the reply's first step in n_batch chunks; False when cancelled.

        The abort callback lets a cancel interrupt a chunk inside llama.cpp; it is installed only
        for the prompt, since calling into Python for every graph node would slow decoding.
        With a progress listener the chunks are one ubatch each: llama.cpp computes a batch ubatch
        by ubatch anyway, so this costs nothing and gives an update per ubatch.
        """
        n_batch = llm.n_batch
        if report is not None:
            n_batch = max(1, min(n_batch, int(llm.context_params.n_ubatch)))
        start = time.perf_counter()
        if report is not None and tokens:
            report(PromptProgress(0, len(tokens), 0.0, reused))
        llama_cpp.llama_set_abort_callback(llm.ctx, self._abort_cb, ctypes.c_void_p(0))
        try:
            for i in range(0, len(tokens), n_batch):
                if self._cancel.is_set():
                    return False
                try:
                    llm.eval(tokens[i : i + n_batch])
                    if report is not None:
                        done = min(i + n_batch, len(tokens))
                        report(PromptProgress(done, len(tokens), time.perf_counter() - start, reused))
                except RuntimeError:
                    if self._cancel.is_set():
                        # llama.cpp dropped the aborted chunk's cells; forget them here too.
                        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm.ctx), 0, llm.n_tokens, -1)
                        return False
                    raise
        finally:
            llama_cpp.llama_set_abort_callback(llm.ctx, self._no_abort_cb, ctypes.c_void_p(0))
        return not self._cancel.is_set()

    # -- tokens and saved state ---------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of `text` in the loaded model's tokenizer (no special tokens, no BOS)."""
        with self._lock:
            return len(self._require_tokenizer().tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """The bytes of `tokens` (a piece may end inside a UTF-8 character: decode incrementally).

        Other backends that run the same file (vrampilot.hybrid) stream text through this, so a reply
        reads the same whichever backend produced its tokens.
        """
        with self._lock:
            return self._require().detokenize(list(tokens))

    def is_end_of_generation(self, token: int) -> bool:
        """llama.cpp's end-of-generation test (EOS, EOT, <|im_end|>, ...) for the loaded vocabulary."""
        with self._lock:
            vocab = llama_cpp.llama_model_get_vocab(self._require().model)
            return bool(llama_cpp.llama_vocab_is_eog(vocab, token))

    def cached_tokens(self) -> list[int]:
        """The tokens whose KV cells are in the cache now, in order."""
        with self._lock:
            llm = self._require()
            ids: list[int] = llm.input_ids[: llm.n_tokens].tolist()
            return ids

    def save_state_file(self, path: str | Path) -> SavedState:
        """Write the KV cache and its tokens to `path` (llama.cpp's state file), fsynced.

        llama.cpp does not check its writes: a full disk gives a short file and success. The size
        is checked against what llama.cpp says it writes, and a short file is removed and refused.
        """
        with self._lock:
            llm = self._require()
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            n = llm.n_tokens
            tokens = (llama_cpp.llama_token * max(n, 1))(*llm.input_ids[:n].tolist())
            # The file: magic, version, token count (u32 each), the tokens, then the state data.
            expected = 12 + 4 * n + int(llama_cpp.llama_state_get_size(llm.ctx))
            t0 = time.perf_counter()
            ok = llama_cpp.llama_state_save_file(llm.ctx, os.fsencode(path), tokens, n)
            size = path.stat().st_size if path.exists() else 0
            if not ok or size != expected:
                path.unlink(missing_ok=True)
                raise EngineError(
                    f"the model state was not saved completely ({size} of {expected} bytes written; is the disk full?)"
                )
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
            return SavedState(path, n, size, time.perf_counter() - t0)

    def load_state_file(self, path: str | Path) -> int:
        """Restore a state saved with the same model and settings; returns the tokens now cached.

        The restored cache is tried once before it is trusted: the last token is evaluated again
        over it, and logits that are not finite (a NaN written into K or V) reject it. On any
        failure the cache is emptied (never half-restored) and EngineError is raised.
        """
        with self._lock:
            llm = self._require()
            n_ctx = llm.n_ctx()
            out = (llama_cpp.llama_token * n_ctx)()
            count = ctypes.c_size_t(0)
            ok = llama_cpp.llama_state_load_file(llm.ctx, os.fsencode(path), out, n_ctx, ctypes.byref(count))
            if not ok:
                self._clear(llm)
                raise EngineError(f"the saved model state {Path(path).name} does not match this model and plan")
            n = int(count.value)
            llm.input_ids[:n] = out[:n]
            llm.n_tokens = n
            if n > 0 and not self._last_logits_finite(llm, int(out[n - 1])):
                self._clear(llm)
                raise EngineError(f"the saved model state {Path(path).name} holds invalid numbers (NaN or infinity)")
            return n

    @staticmethod
    def _clear(llm: llama_cpp.Llama) -> None:
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)

    @staticmethod
    def _last_logits_finite(llm: llama_cpp.Llama, last: int) -> bool:
        n = llm.n_tokens
        memory = llama_cpp.llama_get_memory(llm.ctx)
        if not llama_cpp.llama_memory_seq_rm(memory, 0, n - 1, -1):
            return True  # a recurrent model cannot drop its last cell: nothing to try it with
        llm.n_tokens = n - 1
        llm.eval([last])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        return bool(np.isfinite(logits).all())

    def _decode(
        self,
        llm: llama_cpp.Llama,
        tokens: list[int],
        reused: int,
        sampling: SamplingParams,
        on_text: TextFn | None,
        times: tuple[float, float],
    ) -> Reply:
        llm.set_seed(sampling.seed if sampling.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED)
        draft = llm.draft_model if isinstance(llm.draft_model, CountingDraft) else None
        if draft is not None:
            draft.begin_reply()
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        n_ctx = llm.n_ctx()
        # The prompt is already evaluated: generate() with no tokens and reset=False samples from
        # the current logits and then runs the same per-token loop as a bare llama-cpp-python call.
        gen = llm.generate(
            [],
            reset=False,
            temp=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            repeat_penalty=sampling.repeat_penalty,
            logits_processor=_logit_bias(llm, sampling.logit_bias),
        )
        out = stream_tokens(
            gen,
            detokenize=lambda toks: llm.detokenize(list(toks)),
            is_end=lambda token: bool(llama_cpp.llama_vocab_is_eog(vocab, token)),
            max_tokens=sampling.max_tokens,
            cancel=self._cancel,
            started_at=times[1],
            on_text=on_text,
            context_full=lambda: llm.n_tokens + 1 > n_ctx,
        )
        first = out.first_token_at if out.first_token_at is not None else out.last_token_at
        stats = self._stats(
            llm,
            tokens,
            reused,
            out.completion_tokens,
            (times[0], times[1], first, out.last_token_at),
            out.stop or "length",
        )
        if draft is not None:
            stats = replace(stats, draft_tokens=draft.drafted_tokens, draft_accepted=draft.accepted_tokens)
        return Reply(out.text, stats)

    @staticmethod
    def _stats(
        llm: llama_cpp.Llama,
        tokens: list[int],
        reused: int,
        completion: int,
        times: tuple[float, float, float, float],
        stop: StopReason,
    ) -> GenerationStats:
        """`times`: request start, prompt evaluation start, first token, last token."""
        return GenerationStats.from_times(len(tokens), reused, completion, times, (llm.n_tokens, llm.n_ctx()), stop)


def _logit_bias(llm: llama_cpp.Llama, bias: Sequence[tuple[str, float]]) -> llama_cpp.LogitsProcessorList | None:
    """SamplingParams.logit_bias as llama-server applies it: every token each text tokenizes to
    (no BOS, no special tokens) gets its bias, added to the logits before any other sampler."""
    if not bias:
        return None
    by_token: dict[int, float] = {}
    for text, value in bias:
        for token in llm.tokenize(text.encode("utf-8"), add_bos=False, special=False):
            by_token[token] = by_token.get(token, 0.0) + value
    ids = np.fromiter(by_token, dtype=np.intc)
    add = np.fromiter(by_token.values(), dtype=np.single)

    def apply(_input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        scores[ids] += add  # the first sampler sees the whole vocabulary in token order
        return scores

    return llama_cpp.LogitsProcessorList([apply])


def _read_image(path: str) -> bytes:
    """An image file's bytes, refused in one line when missing, too large or no image."""
    try:
        return read_image(path)
    except ImageFileError as exc:
        raise ImageError(str(exc)) from None
