"""The model's own chat template, rendered in llama-cpp-python's sandboxed Jinja.

`Jinja2ChatFormatter` compiles templates in jinja2's ImmutableSandboxedEnvironment with a
BaseLoader: attribute access to dunders and unsafe callables raises SecurityError, lists and dicts
passed in cannot be mutated, and `include`/`import` find no files. A template comes from a
downloaded file, so it is untrusted input; anything it raises becomes a TemplateError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2

from vrampilot import llamacpp
from vrampilot.engine.errors import TemplateError
from vrampilot.message import Message

Jinja2ChatFormatter = llamacpp.load().llama_chat_format.Jinja2ChatFormatter

# For GGUF files without a template: ChatML, what most instruction-tuned GGUFs use and what
# llama-server falls back to.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplate:
    """Turns a conversation into the prompt text the model was trained on."""

    def __init__(self, template: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = template or CHATML_TEMPLATE
        self.is_fallback = template is None
        try:
            self._formatter = Jinja2ChatFormatter(
                template=self.source, eos_token=eos_token, bos_token=bos_token, add_generation_prompt=True
            )
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the model's chat template does not compile: {exc}") from None

    @property
    def environment(self) -> jinja2.Environment:
        env: jinja2.Environment = self._formatter._environment.environment
        return env

    def render_tools(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> str:
        """The prompt for OpenAI-shaped `messages` with OpenAI-shaped `tools` (the list
        llama-server hands its template: {"type": "function", "function": {name, description,
        parameters}}); None: without tools. TemplateError when the template fails."""
        try:
            result = self._formatter(messages=list(messages), tools=list(tools) if tools is not None else None)
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the model's chat template tried something unsafe and was stopped: {exc}") from None
        except Exception as exc:  # an untrusted template can fail in any way; none of it is ours
            raise TemplateError(f"the model's chat template failed: {exc}") from None
        prompt: str = result.prompt
        return prompt

    def render(self, messages: Sequence[Message]) -> str:
        """The prompt for the model's next reply. A conversation that ends with the assistant's own
        message is continued ("Continue" after a reply cut by max tokens): the earlier turns with
        the reply's opening, then that message's text, unclosed, for the model to go on from."""
        if messages and messages[-1].role == "assistant":
            return self.render(messages[:-1]) + messages[-1].content
        try:
            result = self._formatter(messages=[m.as_dict() for m in messages])
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the model's chat template tried something unsafe and was stopped: {exc}") from None
        except Exception as exc:  # an untrusted template can fail in any way; none of it is ours
            raise TemplateError(f"the model's chat template failed: {exc}") from None
        prompt: str = result.prompt
        return prompt
