"""How many tokens the enabled tools' schemas take in every prompt, counted with the model's own
chat template and tokenizer, before the model is loaded.

llama-server hands the request's tools to the model's Jinja template (`--jinja`), which writes them
into the prompt its own way (Qwen2.5's a `# Tools` block in the system turn, Llama 3.1's JSON in the
first user turn, ...). So the cost is measured, not guessed: the template renders a one-question
conversation with the tools and without them, the model's tokenizer (a vocab-only load: no weights,
a fraction of a second) counts both, and the difference is what the tools add to every prompt.

A close approximation, not llama-server's own bytes: the template runs in Python's sandboxed
jinja2 (llama-cpp-python's formatter, with the functions Hugging Face templates call), not
llama.cpp's own Jinja engine, and `tojson` spacing may differ by a token here and there. A
template that never mentions tools adds nothing: the model is not shown them (llama-server then
answers in text whatever `tool_choice` says), and `described` is False.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrampilot import llamacpp
from vrampilot.engine.template import ChatTemplate
from vrampilot.gguf import load_model_spec
from vrampilot.llamacpp import install_log

if TYPE_CHECKING:
    import llama_cpp

# The conversation the tools are measured in: one short question, as every chat starts.
_PROBE = ({"role": "user", "content": "Hi"},)


@dataclass(frozen=True)
class ToolsTokens:
    """What the tools cost: tokens in every prompt, and whether the template shows them at all."""

    tokens: int
    described: bool  # False: the template ignores tools (the model never sees them)
    schema_tokens: int  # the tools' JSON alone, tokenized (what a template that shows them writes, roughly)


def openai_tool(name: str, description: str, input_schema: dict[str, Any]) -> dict[str, Any]:
    """One tool as llama-server hands it to the template (an MCP tool's name, description and
    inputSchema become a function's name, description and parameters)."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": input_schema}}


def count_tools_tokens(
    model_path: str | Path, tools: Sequence[dict[str, Any]], *, template: str | None = None
) -> ToolsTokens:
    """The tokens `tools` (OpenAI-shaped: see openai_tool) add to every prompt of the model at
    `model_path`, rendered by `template` (default: the model's own) and counted by its tokenizer.
    TemplateError when the template fails on them."""
    if not tools:
        return ToolsTokens(0, False, 0)
    return ToolsCounter(model_path, template=template).count(tools)


class ToolsCounter:
    """count_tools_tokens for many sets of tools with one model: the template parsed, and the
    prompt without tools counted, once (the MCP view prices each tool and each server this way)."""

    def __init__(self, model_path: str | Path, *, template: str | None = None) -> None:
        path = Path(model_path)
        source = template if template is not None else load_model_spec(path).chat_template
        self._chat = ChatTemplate(source)
        self._tokenize = _vocab(path)
        self._without: tuple[str, int] | None = None  # the prompt without tools, and its tokens

    def count(self, tools: Sequence[dict[str, Any]]) -> ToolsTokens:
        """What `tools` add to every prompt. TemplateError when the template fails on them."""
        if not tools:
            return ToolsTokens(0, False, 0)
        if self._without is None:
            without = self._chat.render_tools(_PROBE, None)
            self._without = (without, self._tokenize(without))
        with_tools = self._chat.render_tools(_PROBE, tools)
        added = max(0, self._tokenize(with_tools) - self._without[1])
        schema = self._tokenize(json.dumps(list(tools), ensure_ascii=False))
        return ToolsTokens(tokens=added, described=with_tools != self._without[0], schema_tokens=schema)


_vocabs: dict[tuple[str, int, int], tuple[llama_cpp.Llama, threading.Lock]] = {}
_vocabs_lock = threading.Lock()


def _vocab(path: Path) -> Any:
    """A token counter of the file's vocabulary (vocab-only load, kept per file version)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _vocabs_lock:
        entry = _vocabs.get(key)
        if entry is None:
            install_log()
            entry = (llamacpp.load().Llama(str(path), vocab_only=True, verbose=False), threading.Lock())
            _vocabs[key] = entry
    llm, lock = entry

    def count(text: str) -> int:
        with lock:  # llama.cpp's tokenizer is not re-entrant per model
            return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    return count
