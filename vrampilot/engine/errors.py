"""Errors the engine raises for things a user can cause or decide; each message is written for them."""

from __future__ import annotations

from vrampilot.errors import UserError
from vrampilot.message import TurnDrop
from vrampilot.units import format_count


class EngineError(UserError):
    """Base for engine errors shown to the user (GUI dialog, CLI one-liner)."""


class NoModelLoaded(EngineError):
    def __init__(self) -> None:
        super().__init__("no model is loaded; load a plan first")


class ModelLoadError(EngineError):
    """llama.cpp could not read the model file (not an out-of-memory condition)."""


class AllocationError(EngineError):
    """llama.cpp could not allocate the model, the KV cache or a compute buffer."""


class ModelFileChanged(EngineError):
    """The loaded model's file was truncated or rewritten in place; the engine unloaded it."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(
            f"{path} changed on disk after it was loaded ({what}); it was unloaded, since reading it now "
            "could crash the app: load it again to use the file as it is now"
        )
        self.path = path


class NoTokenizer(EngineError):
    """The loaded file has weights but no tokenizer: llama.cpp would abort the process on its first
    tokenize (GGML_ASSERT), taking the window and its unsaved work with it."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path} has no tokenizer (no tokenizer.ggml.model in its header): it can be planned and "
            "loaded, but llama.cpp cannot turn text into its tokens; chat with a GGUF made for inference"
        )


class LoadCancelled(EngineError):
    def __init__(self) -> None:
        super().__init__("loading was cancelled")


class TemplateError(EngineError):
    """The model's chat template failed or tried something the sandbox forbids."""


class ContextOverflow(EngineError):
    """The conversation would not fit in the loaded context; nothing was sent to the model."""

    def __init__(self, prompt_tokens: int, max_tokens: int, n_ctx: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.n_ctx = n_ctx
        # What dropping the oldest turns would leave (engine/backend.py fitted_reply counts it on
        # the engine thread, so the window can say it before the user chooses).
        self.drop: TurnDrop | None = None
        if prompt_tokens >= n_ctx:
            text = (
                f"the conversation is {format_count(prompt_tokens)} tokens but the context holds {format_count(n_ctx)}: "
                "drop the oldest turns or re-plan with a larger context"
            )
        else:
            text = (
                f"the conversation ({format_count(prompt_tokens)} tokens) plus a reply of up to "
                f"{format_count(max_tokens)} tokens would pass the {format_count(n_ctx)}-token context: drop the oldest turns, re-plan with a larger "
                "context, or lower max tokens"
            )
        super().__init__(text)

    @property
    def needed_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens
