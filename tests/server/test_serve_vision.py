"""A vision projector served for real: the plan's llama-server line with --mmproj, the projector's
bytes in the plan against what clip.cpp printed while llama-server loaded it, and an OpenAI-style
image message answered with the image's tokens counted in the usage.

The language model is the embedded SmolLM2 (n_embd 576, a real tokenizer and chat template); the
projectors are testkit/mmproj.py's random-weight files of two types whose output width is 576.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.machines import cpu_machine
from testkit.mmproj import write_projector
from tests.images import png_bytes
from vrampilot.gguf import load_model_spec
from vrampilot.planner.memory.projector import clip_buffers
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server import ServerConfig, free_port
from vrampilot.server.launch import prepare, wait_ready
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
Served = tuple[ServerConfig, list[str], Plan]
PRINT_RESOLUTION = 0.005 * MIB + 1  # clip.cpp prints MiB with two decimals


@pytest.fixture(params=[("mlp", 224), ("gemma3", 224)], ids=["mlp", "gemma3"])
def served(request: pytest.FixtureRequest, embedded_model: Path, tmp_path: Path) -> Iterator[Served]:
    kind, size = request.param
    proj = write_projector(tmp_path / f"mmproj-{kind}.gguf", kind, n_embd_text=576, image_size=size, n_merge=4)
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=2048, n_threads=2, n_threads_batch=2, mmproj_path=str(proj)),
    )
    lines: list[str] = []
    config = ServerConfig("127.0.0.1", free_port(), None, on_log=lines.append)
    server = prepare(p, config)  # what `vrampilot serve` starts
    assert server.argv[server.argv.index("--mmproj") + 1] == str(proj)
    assert "--no-mmproj-offload" in server.argv  # a CPU plan keeps the projector on the CPU
    server.argv += ["-lv", "4"]  # clip.cpp's load report is logged at this verbosity
    server.start()
    try:
        wait_ready(server, config, timeout_s=120)
        yield config, lines, p
    finally:
        server.stop()


def test_projector_bytes_are_what_clip_printed(served: Served) -> None:
    _, lines, p = served
    proj = p.memory.projector
    assert proj is not None
    assert proj.device == -1
    printed = clip_buffers(lines)
    assert printed.backend == "CPU"
    assert abs(proj.weights_bytes - printed.model_bytes) <= PRINT_RESOLUTION
    assert set(printed.compute_bytes) == {"CPU"}
    assert abs(proj.compute_bytes - printed.compute_bytes["CPU"]) <= PRINT_RESOLUTION
    # The projector counts on the host beside the model's own parts.
    assert p.memory.host.projector_bytes == proj.weights_bytes + proj.compute_bytes


def test_image_message_is_answered_and_its_tokens_counted(served: Served) -> None:
    config, _, p = served
    image = base64.b64encode(png_bytes(48, 32)).decode()
    body = {
        "model": "any",
        "max_tokens": 4,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                ],
            }
        ],
    }
    reply: Any = _post(config, "/v1/chat/completions", body)
    assert reply["choices"][0]["message"]["content"] is not None
    text_only = dict(body, messages=[{"role": "user", "content": "What is in this picture?"}])
    plain: Any = _post(config, "/v1/chat/completions", text_only)
    assert p.memory.projector is not None
    spec = p.memory.projector.spec
    assert spec.image_tokens is not None
    # The image adds its tokens to the prompt, and the text markers mtmd.cpp wraps it in for its
    # type (Gemma 3: <start_of_image> ... <end_of_image>), tokenized by the model's own vocabulary.
    markers = 0
    for marker in spec.image_markers:
        tokenized: list[int] = _post(config, "/tokenize", {"content": marker})["tokens"]
        markers += len(tokenized)
    added = reply["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"]
    assert added == spec.image_tokens + markers, (added, spec.image_tokens, markers)


def _post(config: ServerConfig, path: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        config.base_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def test_the_windows_server_backend_sends_images_as_content_parts(served: Served, tmp_path: Path) -> None:
    """The chat's backend while the window serves the model (server/backend.py): a message's images go
    to llama-server as OpenAI image parts, and the reply's prompt counts their tokens."""

    from vrampilot.engine import SamplingParams
    from vrampilot.message import Message
    from vrampilot.server.backend import ServerBackend

    config, _, p = served
    assert p.memory.projector is not None and p.memory.projector.spec.image_tokens is not None
    (tmp_path / "a.png").write_bytes(png_bytes(48, 32))
    backend = ServerBackend(config.base_url)
    sampling = SamplingParams(temperature=0.0, max_tokens=4, seed=1)

    def ask(message: Message) -> int:
        return _prompt_tokens(backend, [message], sampling)

    plain = ask(Message("user", "What is in this picture?"))
    seen = ask(Message("user", "What is in this picture?", images=(str(tmp_path / "a.png"),)))
    markers = sum(
        len(_post(config, "/tokenize", {"content": m})["tokens"]) for m in p.memory.projector.spec.image_markers
    )
    assert seen - plain == p.memory.projector.spec.image_tokens + markers


def test_the_server_backend_counts_each_kept_images_tokens_when_it_trims(served: Served, tmp_path: Path) -> None:
    """Dropping the oldest turns to fit (the window's chat while it serves the model) counts the
    images the turns keep: an image's tokens are the projector's plus mtmd's markers, as the
    server's own prompt count has them, and a turn whose image no longer fits is dropped."""
    from vrampilot.engine import SamplingParams
    from vrampilot.message import Message
    from vrampilot.server.backend import ServerBackend

    config, _, p = served
    assert p.memory.projector is not None and p.memory.projector.spec.image_tokens is not None
    (tmp_path / "a.png").write_bytes(png_bytes(48, 32))
    backend = ServerBackend(config.base_url, projector=p.memory.projector.spec)
    conversation = [
        Message("user", "What is in this picture?", images=(str(tmp_path / "a.png"),)),
        Message("assistant", "A small picture."),
        Message("user", "And what colour is it?"),
    ]
    per_image = backend.image_tokens()
    assert per_image > p.memory.projector.spec.image_tokens or not p.memory.projector.spec.image_markers
    counted = backend.count_prompt(conversation)
    # the server's own count of the prompt it read
    assert _prompt_tokens(backend, conversation, SamplingParams(temperature=0.0, max_tokens=1, seed=1)) == counted
    # A reply that fits beside the conversation's text but not beside its image: the old turn goes.
    max_tokens = backend.n_ctx() - counted + per_image // 2
    assert backend.fit_messages(conversation, max_tokens) == [conversation[-1]]
    assert backend.fit_messages(conversation, backend.n_ctx() - counted) == conversation


def _prompt_tokens(backend: Any, messages: list[Any], sampling: Any) -> int:
    """One served reply (server/backend.py's backend) to `messages`: the prompt tokens llama-server read."""
    import threading

    reply = backend.reply(
        None,
        messages,
        sampling,
        on_text=lambda _t: None,
        on_report=lambda _r: None,
        cancel=threading.Event(),
        trim=False,
    )
    assert reply.stats.completion_tokens > 0
    return int(reply.stats.prompt_tokens)
