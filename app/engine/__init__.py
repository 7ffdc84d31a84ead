"""The llama-cpp-python session the GUI and the CLI share: load a Plan, stream replies, stats."""

from app.engine.errors import (
    AllocationError,
    ContextOverflow,
    EngineError,
    LoadCancelled,
    ModelLoadError,
    NoModelLoaded,
    TemplateError,
)
from app.engine.progress import PromptProgress, PromptProgressFn
from app.engine.sampling import SamplingParams
from app.engine.session import ContextCheck, Engine, LoadResult, Reply, SavedState
from app.engine.stats import GenerationStats, format_summary
from app.engine.template import ChatTemplate, Message

__all__ = [
    "AllocationError",
    "ChatTemplate",
    "ContextCheck",
    "ContextOverflow",
    "Engine",
    "EngineError",
    "GenerationStats",
    "LoadCancelled",
    "LoadResult",
    "Message",
    "ModelLoadError",
    "NoModelLoaded",
    "PromptProgress",
    "PromptProgressFn",
    "Reply",
    "SamplingParams",
    "SavedState",
    "TemplateError",
    "format_summary",
]
