"""The llama-cpp-python session the GUI and the CLI share: load a Plan, stream replies, stats.

The package's API is what this file imports; its modules are private to it (make lint: a
protected contract in pyproject.toml)."""

from vrampilot.engine.backend import ChatBackend, LlamaCppBackend, fitted_reply
from vrampilot.engine.backoff import next_backoff
from vrampilot.engine.errors import (
    AllocationError,
    ContextOverflow,
    EngineError,
    LoadCancelled,
    ModelFileChanged,
    ModelLoadError,
    NoModelLoaded,
    NoTokenizer,
    TemplateError,
)
from vrampilot.engine.loader import ProgressFn, open_llama
from vrampilot.engine.progress import PromptProgress, PromptProgressFn
from vrampilot.engine.sampling import SamplingParams
from vrampilot.engine.session import ContextCheck, Engine, LoadResult, Reply, SavedState, UnparsedReply
from vrampilot.engine.stats import GenerationStats, StopReason, format_summary
from vrampilot.engine.streaming import TextFn, stream_tokens
from vrampilot.engine.template import ChatTemplate
from vrampilot.engine.tool_tokens import ToolsCounter, ToolsTokens, count_tools_tokens, openai_tool
from vrampilot.engine.vision import projector_of
from vrampilot.message import Message

__all__ = [
    "AllocationError",
    "ChatBackend",
    "ChatTemplate",
    "ContextCheck",
    "ContextOverflow",
    "Engine",
    "EngineError",
    "GenerationStats",
    "LlamaCppBackend",
    "LoadCancelled",
    "LoadResult",
    "Message",
    "ModelFileChanged",
    "ModelLoadError",
    "NoModelLoaded",
    "NoTokenizer",
    "ProgressFn",
    "PromptProgress",
    "PromptProgressFn",
    "Reply",
    "SamplingParams",
    "SavedState",
    "StopReason",
    "TemplateError",
    "TextFn",
    "ToolsCounter",
    "ToolsTokens",
    "UnparsedReply",
    "count_tools_tokens",
    "fitted_reply",
    "format_summary",
    "next_backoff",
    "open_llama",
    "openai_tool",
    "projector_of",
    "stream_tokens",
]
