"""Images in the in-process engine: the plan's vision projector loaded beside the model with
llama.cpp's mtmd library, and a prompt with images evaluated through it.

The projector goes where the plan counted it (planner/memory/projector.py): on the plan's first device, or
on the CPU when the plan keeps it there (Settings.projector_on_cpu), with the plan's
flash-attention setting, so what clip.cpp allocates is what the plan said. A prompt with images is
rendered with mtmd's media marker where each image goes; mtmd cuts it into text and image chunks,
text chunks are evaluated as tokens and image chunks through the projector.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vrampilot import llamacpp
from vrampilot.engine.errors import ModelLoadError
from vrampilot.errors import UserError
from vrampilot.llamacpp import LOG_LOCK, capture_log
from vrampilot.planner.memory.projector import clip_failure
from vrampilot.planner.settings import Settings
from vrampilot.storage import DAMAGED, MAX_IMAGE_BYTES, image_problem

if TYPE_CHECKING:
    import llama_cpp
else:
    llama_cpp = llamacpp.load()

__all__ = ["MAX_IMAGE_BYTES", "ImageError", "ImagePrompt", "Projector", "attach_projector", "projector_of"]

FLASH_ATTN_DISABLED = 0  # llama_flash_attn_type
FLASH_ATTN_ENABLED = 1


class ImageError(UserError):
    """An image the engine cannot take: the message says which and why, in one line."""


@dataclass(frozen=True)
class ImagePrompt:
    """A prompt's chunks as mtmd cut them: how many tokens each takes in the context."""

    text_tokens: tuple[tuple[int, ...], ...]  # per text chunk, in order
    image_tokens: tuple[int, ...]  # per image chunk, in order

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.text_tokens) + sum(self.image_tokens)


class Projector:
    """The plan's vision projector, loaded for one model; freed with it."""

    def __init__(self, llm: llama_cpp.Llama, settings: Settings) -> None:
        self._mtmd: Any = llamacpp.load_mtmd()
        params = self._mtmd.mtmd_context_params_default()
        params.use_gpu = not settings.projector_on_cpu
        if params.use_gpu and settings.devices:
            from vrampilot.llamacpp import device_handle

            params.device = ctypes.c_void_p(device_handle(settings.devices[0]))
        params.print_timings = False
        params.n_threads = settings.n_threads_batch
        params.flash_attn_type = FLASH_ATTN_ENABLED if settings.flash_attn else FLASH_ATTN_DISABLED
        params.warmup = True  # reserves the compute buffer the plan counted, now, not at the first image
        with LOG_LOCK, capture_log() as lines:
            ctx = self._mtmd.mtmd_init_from_file(os.fsencode(settings.mmproj_path), llm.model, params)
        if not ctx:
            raise ModelLoadError(f"llama.cpp could not load the vision projector: {clip_failure(lines)}")
        self.ctx = ctx
        self.log_lines = tuple(lines)  # clip.cpp's load report (backend, model size, compute buffers)
        self.marker = self._mtmd.mtmd_default_marker().decode("utf-8")
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self.ctx:
                self._mtmd.mtmd_free(self.ctx)
                self.ctx = None

    def _bitmaps(self, images: Sequence[tuple[str, bytes]]) -> list[Any]:
        out = []
        try:
            for name, data in images:
                # The size and format rules the window also applies when an image is attached.
                problem = image_problem(name, data)
                if problem:
                    raise ImageError(problem)
                buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bitmap = self._mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
                if not bitmap:
                    raise ImageError(f"{name}: {DAMAGED}")
                out.append(bitmap)
        except BaseException:
            for b in out:
                self._mtmd.mtmd_bitmap_free(b)
            raise
        return out

    def evaluate(
        self, llm: llama_cpp.Llama, prompt: str, images: Sequence[tuple[str, bytes]], n_ctx: int, room: int
    ) -> ImagePrompt:
        """Evaluate `prompt` (mtmd's marker where each image goes) into an empty cache, unless it
        and `room` more tokens (the reply) would not fit in `n_ctx`: then nothing is evaluated and
        the caller refuses it from the returned shape."""
        with self._lock:
            chunks = self._tokenize(prompt, images)
            try:
                shape = self._shape(chunks)
                if shape.n_tokens + room > n_ctx:
                    return shape  # the caller refuses it; nothing was evaluated
                llm.reset()
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
                for i in range(self._mtmd.mtmd_input_chunks_size(chunks)):
                    chunk = self._mtmd.mtmd_input_chunks_get(chunks, i)
                    if self._mtmd.mtmd_input_chunk_get_type(chunk) == self._mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                        llm.eval(list(self._text_tokens(chunk)))
                        continue
                    new_n_past = llama_cpp.llama_pos(0)
                    rc = self._mtmd.mtmd_helper_eval_chunk_single(
                        self.ctx, llm.ctx, chunk, llm.n_tokens, 0, llm.n_batch, False, ctypes.byref(new_n_past)
                    )
                    if rc != 0:
                        raise ImageError(f"llama.cpp could not evaluate an image (error {rc})")
                    # The image's positions hold no token ids: the prefix cache must not match them.
                    llm.input_ids[llm.n_tokens : new_n_past.value] = -1
                    llm.n_tokens = new_n_past.value
                return shape
            finally:
                self._mtmd.mtmd_input_chunks_free(chunks)

    def _tokenize(self, prompt: str, images: Sequence[tuple[str, bytes]]) -> Any:
        bitmaps = self._bitmaps(images)
        try:
            text = self._mtmd.mtmd_input_text()
            raw = prompt.encode("utf-8")
            text.text, text.text_len = raw, len(raw)
            text.add_special, text.parse_special = False, True  # the template wrote BOS and the turns
            chunks = self._mtmd.mtmd_input_chunks_init()
            array = (self._mtmd.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
            rc = self._mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), array, len(bitmaps))
            if rc != 0:
                self._mtmd.mtmd_input_chunks_free(chunks)
                why = (
                    "the images and their places in the prompt do not match"
                    if rc == 1
                    else "an image could not be prepared"
                )
                raise ImageError(f"llama.cpp could not read the prompt's images: {why} (error {rc})")
            return chunks
        finally:
            for b in bitmaps:
                self._mtmd.mtmd_bitmap_free(b)

    def _text_tokens(self, chunk: Any) -> tuple[int, ...]:
        n = ctypes.c_size_t()
        ptr = self._mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
        return tuple(ptr[j] for j in range(n.value)) if ptr else ()

    def _shape(self, chunks: Any) -> ImagePrompt:
        texts: list[tuple[int, ...]] = []
        imgs: list[int] = []
        for i in range(self._mtmd.mtmd_input_chunks_size(chunks)):
            chunk = self._mtmd.mtmd_input_chunks_get(chunks, i)
            if self._mtmd.mtmd_input_chunk_get_type(chunk) == self._mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                texts.append(self._text_tokens(chunk))
            else:
                imgs.append(int(self._mtmd.mtmd_input_chunk_get_n_tokens(chunk)))
        return ImagePrompt(tuple(texts), tuple(imgs))


def attach_projector(llm: llama_cpp.Llama, settings: Settings) -> Projector:
    """Load the plan's projector for `llm`; it is freed when the model is closed."""
    projector = Projector(llm, settings)
    llm._stack.callback(projector.close)
    llm._vp_projector = projector  # type: ignore[attr-defined]  # our own attribute on the binding's object
    return projector


def projector_of(llm: llama_cpp.Llama) -> Projector | None:
    found = getattr(llm, "_vp_projector", None)
    return found if isinstance(found, Projector) else None
