"""The llama-cpp-python session the GUI and the CLI share: load a Plan, stream replies, stats."""

from vrampilot.engine.backend import ChatBackend, LlamaCppBackend, fitted_reply
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
from vrampilot.engine.progress import PromptProgress, PromptProgressFn
from vrampilot.engine.sampling import SamplingParams
from vrampilot.engine.session import ContextCheck, Engine, LoadResult, Reply, SavedState, UnparsedReply
from vrampilot.engine.stats import GenerationStats, format_summary
from vrampilot.engine.template import ChatTemplate
from vrampilot.engine.tool_tokens import ToolsCounter, ToolsTokens, count_tools_tokens, openai_tool
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
    "PromptProgress",
    "PromptProgressFn",
    "Reply",
    "SamplingParams",
    "SavedState",
    "TemplateError",
    "ToolsCounter",
    "ToolsTokens",
    "UnparsedReply",
    "count_tools_tokens",
    "fitted_reply",
    "format_summary",
    "openai_tool",
]
