"""The running llama-server as a chat backend: the app's chat talks to it over its API.

While the app serves the model, loading it a second time in-process would take its memory twice;
so the chat sends its conversation to the server's OpenAI-compatible /v1/chat/completions
(streamed), stops by closing the stream, and builds the same stats as an in-process reply from the
server's own timings. The server's prompt cache keeps the previous turn, so a follow-up costs its
new tokens as in-process. Standard library only: http.client, one connection per reply.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vrampilot.engine import (
    ContextOverflow,
    Engine,
    EngineError,
    GenerationStats,
    Reply,
    SamplingParams,
    StopReason,
    UnparsedReply,
    fitted_reply,
)
from vrampilot.gguf import ProjectorSpec
from vrampilot.message import Message, ToolCall, drop_oldest_turns
from vrampilot.planner.plan import Plan
from vrampilot.storage import ImageFileError, image_suffix, read_image

TextFn = Callable[[str], None]


class ServerChatError(EngineError):
    pass


class ServerBackend:
    """A vrampilot.engine.backend.ChatBackend over HTTP (a llama.cpp chat, served)."""

    key = "llama.cpp"  # the chat stays a llama.cpp chat: the same engine, in another process
    label = "the running llama-server"
    replan_cures_overflow = False  # the server's context is fixed until it is started again

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model_path: Path | None = None,
        projector: ProjectorSpec | None = None,
        plan: Plan | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.model_path = model_path  # what the server has loaded
        self.plan = plan  # the plan it runs (its drafting's replies teach the acceptance), when known
        self.projector = projector  # the vision projector it loaded (--mmproj), which sizes an image's tokens
        self._image_tokens: int | None = None
        host_port = base_url.split("://", 1)[-1].rstrip("/")
        host, _, port = host_port.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._n_ctx: int | None = None

    def status_text(self) -> str:
        return "Generating (served by llama-server)…"

    # -- small requests ------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("POST", path, json.dumps(body), self._headers())
            resp = conn.getresponse()
            data: dict[str, Any] = json.loads(resp.read() or b"{}")
            if resp.status != 200:
                raise ServerChatError(f"llama-server answered {resp.status} to {path}: {_error_text(data)}")
            return data
        except OSError as exc:
            raise ServerChatError(f"llama-server does not answer ({exc})") from None
        finally:
            conn.close()

    def count_prompt(self, messages: Sequence[Message]) -> int:
        """Tokens of the conversation as the server renders it (its template, its tokenizer), and
        each image's: the server's /tokenize sees text only, so an image counts what the plan's
        projector says one takes (planner/memory/projector.py, clip.cpp's rule) plus mtmd's markers."""
        prompt = self._post("/apply-template", {"messages": [m.as_dict() for m in messages]})["prompt"]
        n_images = sum(len(m.images) for m in messages)
        return self._tokens(prompt) + (n_images * self.image_tokens() if n_images else 0)

    def _tokens(self, text: str) -> int:
        return len(self._post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"])

    def image_tokens(self) -> int:
        """Context tokens one image takes in this server: the projector's tokens per image and the
        text mtmd wraps it in, tokenized by the server's vocabulary (asked once). 0 without a
        projector or for a type whose tokens are not counted (docs/vision.md says which)."""
        if self._image_tokens is None:
            p = self.projector
            if p is None or p.image_tokens is None:
                self._image_tokens = 0
            else:
                self._image_tokens = p.image_tokens + sum(self._tokens(m) for m in p.image_markers)
        return self._image_tokens

    def n_ctx(self) -> int:
        """The server's context (fixed while it runs: asked once)."""
        if self._n_ctx is None:
            props = self._get("/props")
            settings = props.get("default_generation_settings", {})
            self._n_ctx = int(settings.get("n_ctx") or props.get("n_ctx") or 0)
        return self._n_ctx

    def _get(self, path: str) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("GET", path, headers=self._headers())
            resp = conn.getresponse()
            data: dict[str, Any] = json.loads(resp.read() or b"{}")
            return data
        except OSError as exc:
            raise ServerChatError(f"llama-server does not answer ({exc})") from None
        finally:
            conn.close()

    def fit_messages(self, messages: Sequence[Message], max_tokens: int) -> list[Message]:
        """Drop the oldest turns (never the system prompt or the last message) until a reply fits."""
        n_ctx = self.n_ctx()
        return drop_oldest_turns(messages, lambda kept: self.count_prompt(kept) + max_tokens <= n_ctx)

    # -- a reply -------------------------------------------------------------------------------
    def reply(
        self,
        engine: Engine | None,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        on_text: TextFn,
        on_report: Callable[[object], None],
        cancel: threading.Event,
        trim: bool,
    ) -> Reply:
        return fitted_reply(
            messages,
            lambda kept: self.count_prompt(kept) + sampling.max_tokens <= self.n_ctx(),
            lambda kept: self._send(kept, sampling, on_text, cancel),
            trim=trim,
        )

    def reply_with_tools(
        self,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: str,
        parallel_tool_calls: bool = True,
        start_with: str = "",
        on_text: TextFn,
        cancel: threading.Event,
    ) -> Reply:
        """One round of a tool-using chat (vrampilot.agents runs the loop): the OpenAI `tools`
        list and `tool_choice` ("auto", "required", "none"); llama-server renders them with the
        model's template (--jinja), parses the calls in the model's own format and, for
        "required", constrains the output by a grammar to a valid call (after free text, in this
        llama.cpp: docs/agents.md). `parallel_tool_calls` False ends the reply after one call.
        `start_with`: the reply starts with this text (llama-server's prefill of a last assistant
        message): with "required" and call_opener's text, the call starts at once. The reply's
        tool_calls are the calls, streamed and joined here."""
        return self._send(
            messages,
            sampling,
            on_text,
            cancel,
            tools=tools,
            tool_choice=tool_choice,
            parallel=parallel_tool_calls,
            start_with=start_with,
        )

    def call_opener(self, tools: Sequence[dict[str, Any]]) -> str:
        """The text the model's template starts a tool call with (`{` for a bare JSON call,
        `<tool_call>\n{` for Qwen's), found by asking llama-server to render a call with its own
        template: the turn up to the reply, and the turn with a call in the reply, differ by the
        call. Up to the call's first `{`, or up to the tool's name where the name comes first. ""
        when the template writes no call (nothing to start with).

        Why: with tool_choice "required", this llama.cpp's grammar still lets the model write text
        before the call (docs/agents.md); a reply that starts with the opener is inside the call,
        and from there the grammar allows only a whole, valid one."""
        if not tools:
            return ""
        name = "vrampilot_opener_probe"  # a name no template's own text contains, found where the call names it
        question = {"role": "user", "content": "Hi"}
        call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": "{}"}}
        asked = self._post("/apply-template", {"messages": [question], "tools": list(tools)})["prompt"]
        called = self._post(
            "/apply-template",
            {
                "messages": [
                    question,
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_0", "content": "ok"},
                ],
                "tools": list(tools),
            },
        )["prompt"]
        # The turn with the call may differ from the reply's start in whitespace (a template whose
        # generation prompt ends in a newline that its call turns leave out).
        head = asked.rstrip() if isinstance(asked, str) else ""
        if not head or not isinstance(called, str) or not called.startswith(head):
            return ""
        rest = called[len(head) :].lstrip()
        brace, at = rest.find("{"), rest.find(name)
        if at < 0:
            return ""  # the template does not write calls: the model has no way to make one
        return rest[: brace + 1 if 0 <= brace < at else at]

    def _send(
        self,
        messages: Sequence[Message],
        sampling: SamplingParams,
        on_text: TextFn,
        cancel: threading.Event,
        *,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        parallel: bool = True,
        start_with: str = "",
    ) -> Reply:
        # A last assistant message is continued by llama-server (its prefill): the reply's start.
        opening = [{"role": "assistant", "content": start_with}] if start_with else []
        body: dict[str, Any] = {
            "messages": [_api_message(m) for m in messages] + opening,
            "stream": True,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repeat_penalty,
            "cache_prompt": True,  # the previous turn stays in the server's cache
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.logit_bias:
            # The pairs' form: the object's form takes a key of digits ("1") as a token id, not a text.
            body["logit_bias"] = [[text, bias] for text, bias in sampling.logit_bias]
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = tool_choice or "auto"
            body["parallel_tool_calls"] = parallel
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        done = threading.Event()
        # The server sends nothing while it reads a long prompt: Stop must not wait for the first
        # token, so a watcher shuts the socket, which ends the blocked read and the server's task.
        watcher = threading.Thread(target=_close_on_cancel, args=(conn, cancel, done), daemon=True)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), self._headers())
            watcher.start()
            resp = conn.getresponse()
            if resp.status != 200:
                data = json.loads(resp.read() or b"{}")
                _raise_for(data, sampling.max_tokens, resp.status)
            return self._stream(resp, on_text, cancel, t0, with_tools=bool(tools), one_call=not parallel)
        except (OSError, http.client.HTTPException) as exc:
            if cancel.is_set():
                return Reply("", _cancelled_stats(t0))
            why = str(exc) if isinstance(exc, StreamCut) else f"llama-server does not answer ({exc})"
            raise ServerChatError(why) from None
        finally:
            done.set()
            conn.close()  # closing mid-stream is how a reply is stopped: the server ends the task

    def _stream(
        self,
        resp: http.client.HTTPResponse,
        on_text: TextFn,
        cancel: threading.Event,
        t0: float,
        *,
        with_tools: bool,
        one_call: bool = False,
    ) -> Reply:
        pieces: list[str] = []
        first: float | None = None
        last = t0
        timings: dict[str, Any] = {}
        finish: str | None = None
        stopped = False
        calls: dict[int, dict[str, str]] = {}  # a call's pieces by its index, as they stream
        error: str | None = None
        try:
            for event in _events(resp):
                if cancel.is_set():
                    stopped = True
                    break
                if "error" in event:
                    # The server's last word before it closes the stream without [DONE]: the model's
                    # output did not parse as a tool call (cut by max_tokens, JSON that is no call).
                    error = _error_text(event)
                    break
                if "timings" in event:
                    timings = event["timings"]
                for choice in event.get("choices", []):
                    _join_calls(calls, (choice.get("delta") or {}).get("tool_calls") or ())
                    text = (choice.get("delta") or {}).get("content") or ""
                    if text:
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        pieces.append(text)
                        on_text(text)
                    finish = choice.get("finish_reason") or finish
        except (OSError, http.client.HTTPException, ValueError):
            if not cancel.is_set():
                raise
            stopped = True  # the watcher shut the socket mid-read
        stopped = stopped or cancel.is_set()
        ends: dict[str, StopReason] = {"stop": "eos", "length": "length", "tool_calls": "eos"}
        stop: StopReason = "cancelled" if stopped else ends.get(finish or "", "eos")
        prompt_n = int(timings.get("prompt_n", 0))
        cached = int(timings.get("cache_n", 0))
        predicted = int(timings.get("predicted_n", len(pieces)))
        first_at = first if first is not None else last
        stats = GenerationStats(
            prompt_tokens=prompt_n + cached,
            evaluated_tokens=prompt_n,
            reused_tokens=cached,
            completion_tokens=predicted,
            ttft_s=first_at - t0,
            prefill_s=float(timings.get("prompt_ms", 0.0)) / 1000 or max(first_at - t0, 0.0),
            decode_s=float(timings.get("predicted_ms", 0.0)) / 1000 or max(last - first_at, 0.0),
            context_used=prompt_n + cached + predicted,
            n_ctx=self.n_ctx(),
            stop_reason=stop,
            # what llama-server drafted and kept (absent without drafting): the acceptance replies teach
            draft_tokens=int(timings.get("draft_n", 0)),
            draft_accepted=int(timings.get("draft_n_accepted", 0)),
        )
        if error is not None and not with_tools:
            raise ServerChatError(f"llama-server stopped the reply: {error}")
        if error is not None:
            raise UnparsedReply(
                f"llama-server could not read the model's reply as a tool call: {error}",
                Reply("".join(pieces), stats),
            )
        tool_calls = tuple(
            ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"]) for i, c in sorted(calls.items())
        )
        if one_call:
            # This llama-server's grammar ignores parallel_tool_calls for call formats wrapped one
            # by one (Qwen's <tool_call>...</tool_call>): a small model writes call after call until
            # max_tokens, the last one cut. The first is the one asked for.
            tool_calls = tool_calls[:1]
        return Reply("".join(pieces), stats, () if stopped else tool_calls)


def _join_calls(calls: dict[int, dict[str, str]], deltas: Any) -> None:
    """Add one event's tool-call deltas: the first of a call names it (id, name), the rest carry
    pieces of its arguments' JSON text."""
    for d in deltas if isinstance(deltas, list) else ():
        if not isinstance(d, dict):
            continue
        call = calls.setdefault(int(d.get("index", len(calls))), {"id": "", "name": "", "arguments": ""})
        fn = d.get("function") or {}
        call["id"] = call["id"] or str(d.get("id") or "")
        call["name"] += str(fn.get("name") or "")
        call["arguments"] += str(fn.get("arguments") or "")


_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif", ".bmp": "image/bmp"}


def _api_message(m: Message) -> dict[str, Any]:
    """A message as the OpenAI API takes it: plain text, or (with images) content parts, each
    image inline as a data URL, which llama-server hands to its projector."""
    if not m.images:
        return dict(m.as_dict())
    parts: list[dict[str, Any]] = []
    for path in m.images:
        try:
            data = read_image(path)
        except ImageFileError as exc:
            raise ServerChatError(str(exc)) from None
        url = f"data:{_MIME[image_suffix(data) or '.png']};base64,{base64.b64encode(data).decode('ascii')}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    if m.content:
        parts.append({"type": "text", "text": m.content})
    return {"role": m.role, "content": parts}


def _close_on_cancel(conn: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event) -> None:
    while not done.wait(0.05):
        if cancel.is_set():
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):  # already closed by the server
                    sock.shutdown(socket.SHUT_RDWR)
            return


def _cancelled_stats(t0: float) -> GenerationStats:
    waited = time.perf_counter() - t0
    return GenerationStats(
        prompt_tokens=0,
        evaluated_tokens=0,
        reused_tokens=0,
        completion_tokens=0,
        ttft_s=waited,
        prefill_s=waited,
        decode_s=0.0,
        context_used=0,
        n_ctx=0,
        stop_reason="cancelled",
    )


class StreamCut(http.client.HTTPException):
    """The stream closed before `data: [DONE]`: the server went away mid-reply."""


def _events(resp: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """Server-sent events: `data: {...}` lines, ending with `data: [DONE]`. A server killed
    mid-reply closes its socket, which reads as a quiet end of the body: without [DONE] the
    reply is cut, never complete (it would be saved as a whole answer)."""
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            yield json.loads(payload)
        except ValueError:
            continue
    raise StreamCut("the reply stopped midway: llama-server closed the connection (it stopped or crashed)")


def _error_text(data: dict[str, Any]) -> str:
    err = data.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err or data)


def _raise_for(data: dict[str, Any], max_tokens: int, status: int) -> None:
    err = data.get("error") if isinstance(data.get("error"), dict) else {}
    assert isinstance(err, dict)
    if err.get("type") == "exceed_context_size_error" or "context" in str(err.get("message", "")):
        raise ContextOverflow(int(err.get("n_prompt_tokens", 0)), max_tokens, int(err.get("n_ctx", 0)))
    raise ServerChatError(f"llama-server answered {status}: {_error_text(data)}")
