"""Chat templates come from downloaded files: rendering one must not run code or read files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.engine.conftest import make_plan
from vrampilot.engine import ChatTemplate, Engine, Message, TemplateError
from vrampilot.engine.template import CHATML_TEMPLATE
from vrampilot.gguf import ModelSpec
from vrampilot.planner.target import Target

MSGS = [Message("system", "sys"), Message("user", "hello")]


def test_renders_the_models_template(spec: ModelSpec) -> None:
    t = ChatTemplate(spec.chat_template, bos_token="<|im_start|>", eos_token="<|im_end|>")
    out = t.render(MSGS)
    assert out == "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert isinstance(t.environment, ImmutableSandboxedEnvironment)


def test_missing_template_falls_back_to_chatml() -> None:
    t = ChatTemplate(None)
    assert t.is_fallback and t.source == CHATML_TEMPLATE
    assert t.render([Message("user", "x")]).endswith("<|im_start|>assistant\n")


def _escapes(sentinel: Path) -> list[str]:
    cmd = f"touch {sentinel}"
    return [
        # Classic sandbox escapes through dunder attributes to os / subprocess.
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.system('" + cmd + "') }}",
        "{{ lipsum.__globals__['os'].popen('" + cmd + "').read() }}",
        "{{ joiner.__init__.__globals__.__builtins__.__import__('os').system('" + cmd + "') }}",
        "{{ namespace.__init__.__globals__['__builtins__']['open']('/etc/passwd').read() }}",
        "{{ raise_exception.__globals__ }}",
        "{{ strftime_now.__globals__['os'].system('" + cmd + "') }}",
        "{% set x = messages.__class__.__base__.__subclasses__() %}{{ x }}",
        # Mutating what the caller passed in.
        "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",
        "{% set _ = messages[0].update({'content': 'changed'}) %}",
        # Reading files through the loader.
        "{% include '/etc/passwd' %}",
        "{% import '/etc/hostname' as h %}",
        "{% extends '/etc/passwd' %}",
        # Resource exhaustion is bounded too (the sandbox caps range()).
        "{% for i in range(10**12) %}x{% endfor %}",
    ]


@pytest.mark.parametrize("index", range(14))
def test_malicious_templates_cannot_run_code_or_read_files(tmp_path: Path, index: int) -> None:
    sentinel = tmp_path / "pwned"
    source = _escapes(sentinel)[index]
    msgs = [m.as_dict() for m in MSGS]
    try:
        out = ChatTemplate(source).render(MSGS)
    except TemplateError:
        out = ""
    else:
        # The only escape attempt that renders: an unsafe attribute becomes an empty Undefined.
        assert index == 5 and out == ""
    assert not sentinel.exists()
    assert [m.as_dict() for m in MSGS] == msgs


def test_a_malicious_template_in_a_model_is_stopped_by_the_engine(
    spec: ModelSpec, cpu_target: Target, tmp_path: Path
) -> None:
    sentinel = tmp_path / "pwned"
    evil = "{{ cycler.__init__.__globals__.os.system('touch " + str(sentinel) + "') }}"
    p = make_plan(spec, cpu_target)
    p = dataclasses.replace(p, spec=dataclasses.replace(spec, chat_template=evil))
    e = Engine()
    e.load(p)
    try:
        with pytest.raises(TemplateError, match="unsafe"):
            e.chat([Message("user", "hi")])
    finally:
        e.unload()
    assert not sentinel.exists()


def test_template_errors_are_user_errors() -> None:
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
    with pytest.raises(TemplateError, match="roles must alternate"):
        ChatTemplate("{{ raise_exception('roles must alternate') }}").render(MSGS)
