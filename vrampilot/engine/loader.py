"""Opening a llama.cpp model and context for a set of Settings, with progress and cancel.

`llama_cpp.Llama` builds its model parameters inside `__init__` and offers no progress hook; the
subclass below sets llama.cpp's progress callback on the parameter struct as it is assigned, so the
callback belongs to this instance only (no global patching). Returning False from it makes
llama.cpp abort the load, which is how Cancel works.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vrampilot import llamacpp
from vrampilot.engine.draft import CountingDraft, ModelDraft, ngram_draft
from vrampilot.engine.errors import AllocationError, LoadCancelled, ModelLoadError
from vrampilot.export import llama_cpp_kwargs
from vrampilot.llamacpp import (
    LOG_LOCK,
    CpuOverrides,
    capture_log,
    clear_log,
    forget_allocations,
    install_log,
    recent_log_errors,
    record_allocations,
)
from vrampilot.planner.dry_run.measure import extra_buffers_allowed
from vrampilot.planner.memory.placement import cpu_override_patterns
from vrampilot.planner.settings import Settings

if TYPE_CHECKING:  # the binding's types, for the checker; at run time it comes through llamacpp.load()
    import llama_cpp
else:
    llama_cpp = llamacpp.load()

ProgressFn = Callable[[float], None]


class _Llama(llama_cpp.Llama):
    """A Llama whose model load reports progress and can be cancelled."""

    def __init__(
        self,
        model_path: str,
        *,
        on_progress: Callable[[float], bool],
        n_outputs: int = 1,
        devices: tuple[str, ...] = (),
        cpu_patterns: tuple[str, ...] = (),
        extra_buffers: bool = True,
        **kwargs: Any,
    ) -> None:
        self._vp_outputs = n_outputs
        self._vp_extra_buffers = extra_buffers  # Settings.no_repack: llama-cpp-python has no keyword
        # The plan's devices, in its order (llama_model_params.devices, NULL-terminated): kept
        # alive with the instance, since llama.cpp reads the array while it loads.
        self._vp_devices: ctypes.Array[ctypes.c_void_p] | None = None
        if devices:
            from vrampilot.llamacpp import device_handle

            self._vp_devices = (ctypes.c_void_p * (len(devices) + 1))(*[device_handle(n) for n in devices], None)
        # Tensors the plan keeps in host memory (llama_model_params.tensor_buft_overrides):
        # llama.cpp keeps the pointer, so the array lives as long as the instance.
        self._vp_overrides = CpuOverrides(cpu_patterns)

        def _progress(value: float, _user_data: object) -> bool:
            try:
                return bool(on_progress(float(value)))
            except Exception:  # an exception must not cross into C; treat it as cancel
                return False

        self._vp_progress = llama_cpp.llama_progress_callback(_progress)
        try:
            super().__init__(model_path, **kwargs)
        except BaseException:
            # Never leave a half-loaded model: free whatever __init__ managed to create.
            stack = getattr(self, "_stack", None)
            if stack is not None:
                stack.close()
            draft = kwargs.get("draft_model")
            if isinstance(draft, CountingDraft):
                draft.close()  # nor the draft loaded for it
            raise
        if not kwargs.get("logits_all"):
            # llama-cpp-python keeps an n_batch x n_vocab float array for logits it only fills with
            # logits_all (384 MiB for a 49K vocabulary at batch 2048, committed memory on Windows);
            # the engine samples with llama.cpp's sampler and never reads it.
            self.scores = np.zeros((1, self._n_vocab), dtype=np.single)

    def close(self) -> None:
        forget_allocations(self)
        draft = getattr(self, "draft_model", None)
        if isinstance(draft, CountingDraft):
            draft.close()  # a draft model is this instance's: it goes with it
            self.draft_model = None
        super().close()

    def eval(self, tokens: Sequence[int]) -> None:
        """With a draft, llama-cpp-python asks logits for every token it evaluates (and keeps them
        in an n_ctx x n_vocab array); only a verify batch (the sampled token and its drafts, at
        most n_outputs tokens) needs them, and the engine samples inside llama.cpp. So a prompt
        chunk asks its last row only and nothing is copied out: llama.cpp reserves exactly the
        n_outputs rows the plan counted (Settings.n_outputs_max, as llama-server does)."""
        if self.draft_model is None:
            super().eval(tokens)
            return
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for i in range(0, len(tokens), self.n_batch):
            batch = list(tokens[i : i + self.n_batch])
            n_past = self.n_tokens
            self._batch.set_batch(batch=batch, n_past=n_past, logits_all=len(batch) <= self._vp_outputs)
            self._ctx.decode(self._batch)
            self.input_ids[n_past : n_past + len(batch)] = batch
            self.n_tokens += len(batch)
            self._requires_eval = False

    @property
    def context_params(self) -> llama_cpp.llama_context_params:
        return self._vp_context_params

    @context_params.setter
    def context_params(self, params: llama_cpp.llama_context_params) -> None:
        # Llama takes no n_outputs_max: set on the struct as it is assigned (Settings.n_outputs_max).
        params.n_outputs_max = self._vp_outputs
        self._vp_context_params = params

    @property
    def model_params(self) -> llama_cpp.llama_model_params:
        return self._vp_model_params

    @model_params.setter
    def model_params(self, params: llama_cpp.llama_model_params) -> None:
        params.progress_callback = self._vp_progress
        params.progress_callback_user_data = None  # type: ignore[assignment]  # ctypes takes None for NULL
        if self._vp_devices is not None:
            params.devices = ctypes.cast(self._vp_devices, ctypes.c_void_p).value  # type: ignore[assignment]  # the binding types an array; llama.cpp takes its address
        self._vp_overrides.apply(params)
        params.use_extra_bufts = self._vp_extra_buffers
        self._vp_model_params = params


def _llama_path(path: str | Path) -> str:
    """`path` as llama-cpp-python takes it. It encodes the path as UTF-8 (its LlamaModel), so a
    name whose bytes are not UTF-8 (which Python holds as surrogates) cannot reach llama.cpp through
    it; the planner's own calls pass the bytes themselves (os.fsencode) and plan such a file."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ModelLoadError(
            f"{text}: llama-cpp-python opens only files whose path is UTF-8 text, and this one's is not; "
            "rename the file or its folder (or link it under a UTF-8 name)"
        ) from None
    return text


def open_llama(
    model_path: str | Path,
    settings: Settings,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> llama_cpp.Llama:
    """Load `model_path` with exactly the arguments `vrampilot.export.llama_cpp_kwargs` gives for `settings`.

    Raises LoadCancelled, AllocationError (model, KV cache or compute buffer did not fit) or
    ModelLoadError (the file itself). On any of them nothing stays allocated.
    """
    install_log()
    clear_log()
    cancel = cancel or threading.Event()

    def on_progress(value: float) -> bool:
        if progress is not None:
            progress(value)
        return not cancel.is_set()

    if settings.server_only:
        raise ModelLoadError(
            f"this plan runs in llama-server (Server tab, or `vrampilot serve`), never in VRAM Pilot's "
            f"own process: {settings.server_only}"
        )
    kwargs = llama_cpp_kwargs(settings)
    if settings.drafting:
        kwargs["draft_model"] = _open_draft(settings, on_progress, cancel)
    try:
        # Keep the planner's dry runs from swapping llama.cpp's log callback during the load:
        # this load's error lines must reach llama.cpp's log (recent_log_errors), and its buffer
        # lines must not reach them.
        with LOG_LOCK, capture_log() as lines:
            llm = _Llama(
                _llama_path(model_path),
                on_progress=on_progress,
                n_outputs=settings.n_outputs_max,
                devices=settings.devices,
                cpu_patterns=cpu_override_patterns(settings),
                extra_buffers=extra_buffers_allowed(model_path, settings),
                verbose=False,
                **kwargs,
            )
        record_allocations(llm, lines)  # what the meters show of it on a device that reports no use
    except KeyError as exc:  # a device of the plan is not there (a card was removed, a driver failed)
        raise ModelLoadError(f"{exc.args[0]}; plan again for the devices this machine has now") from None
    except MemoryError as exc:
        # numpy's, for llama-cpp-python's own arrays: the same "did not fit" as llama.cpp's, so
        # the back-off answers it.
        gc.collect()
        raise AllocationError(f"not enough memory for llama-cpp-python's buffers ({exc})") from None
    except ValueError as exc:
        gc.collect()
        if cancel.is_set():
            raise LoadCancelled() from None
        detail = "; ".join(recent_log_errors()) or str(exc)
        text = str(exc)
        if "context" in text or "alloc" in detail.lower() or "memory" in detail.lower():
            raise AllocationError(f"llama.cpp could not allocate memory for these settings ({detail})") from None
        raise ModelLoadError(f"llama.cpp could not load {Path(model_path).name}: {detail}") from None
    if cancel.is_set():
        llm.close()
        raise LoadCancelled()
    if settings.mmproj_path:
        from vrampilot.engine.vision import attach_projector

        try:
            attach_projector(llm, settings)  # where the plan counted it (engine/vision.py)
        except BaseException:
            llm.close()
            raise
    if progress is not None:
        progress(1.0)
    return llm


def _open_draft(settings: Settings, on_progress: Callable[[float], bool], cancel: threading.Event) -> CountingDraft:
    """The plan's drafter: prompt lookup, or the draft model loaded (before the model, with the
    same cancel) with the context llama-server gives it (planner/search/draft.py draft_settings)."""
    if settings.spec_type == "ngram":
        return ngram_draft(settings.draft_n_max)
    from vrampilot.planner.search.draft import draft_settings

    ds = draft_settings(settings)
    try:
        with LOG_LOCK, capture_log() as lines:
            llm = _Llama(
                _llama_path(settings.draft_model),
                on_progress=on_progress,
                n_outputs=ds.n_outputs_max,
                devices=ds.devices,
                verbose=False,
                **llama_cpp_kwargs(ds),
            )
    except ValueError:
        if cancel.is_set():
            raise LoadCancelled() from None
        detail = "; ".join(recent_log_errors()) or "no reason logged"
        raise ModelLoadError(
            f"llama.cpp could not load the draft model {Path(settings.draft_model).name}: {detail}"
        ) from None
    buffers = record_allocations(llm, lines)
    return CountingDraft(ModelDraft(llm, settings.draft_n_max, buffers), settings.draft_n_max)
