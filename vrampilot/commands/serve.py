"""`vrampilot serve`: the planned model as an OpenAI-compatible API, by the bundled llama-server.

It plans as `plan` does, starts llama-server with the argument list of the one builder (what
`export` prints, plus where to listen), waits until the model is loaded, prints the base URL and
the plan, and stays in the foreground: Ctrl+C stops the server (a hung one is killed after a grace
time, at once on a second Ctrl+C), a server that stops answering is said, and when the server dies
its exit status and last log lines are this command's. Listening beyond this machine needs an API key
(given, or generated and printed): a server open on the LAN without one lets anyone on the
network use the machine.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.gguf import file_name_line


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from vrampilot.commands.plan import add_plan_options

    p = sub.add_parser(
        "serve",
        help="serve the planned model as an OpenAI-compatible API (the bundled llama-server)",
        description="Plan like `vrampilot plan`, start llama-server with exactly that plan and serve its "
        "OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) until Ctrl+C.",
    )
    add_plan_options(p)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine "
        "only; 0.0.0.0 = every network, which needs an API key)",
    )
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="require this key (Authorization: Bearer KEY); generated "
        "and printed when --host is not loopback and none is given. Other users of this machine can "
        "see a command line: --api-key-file keeps the key out of it",
    )
    key.add_argument("--api-key-file", metavar="FILE", type=Path, help="require the key on the first line of FILE")
    p.add_argument(
        "--chat-template-file",
        metavar="FILE",
        type=Path,
        help="a Jinja chat template to use instead of the model's own (llama-server's --chat-template-file), "
        "e.g. one that describes tools for a model whose own template does not (llama.cpp's models/templates)",
    )
    p.add_argument("--force", action="store_true", help="serve even when the plan does not fit")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON line once ready (base_url, api_key, pid, argv, settings), then the server's log on stderr",
    )
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="longest wait for the model to load")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from vrampilot.commands.foreground import run_in_foreground
    from vrampilot.commands.plan import plan_from_args
    from vrampilot.export import quote
    from vrampilot.server import ServerConfig
    from vrampilot.server.launch import prepare, wait_ready

    api_key = _api_key(args)  # a key no client could send is refused before any planning
    template = _template(args.chat_template_file)
    plan = plan_from_args(args)
    if not plan.fits and not args.force:
        why = plan.refused or (plan.reasons[-1] if plan.reasons else "the plan does not fit this machine")
        raise UserError(f"{why} Pass --force to serve it anyway, or change the plan options.")
    on_log = None if not args.json else lambda line: print(line, file=sys.stderr)
    config = ServerConfig(
        args.host, args.port, api_key, public=True, on_log=on_log, chat_template_file=args.chat_template_file
    )
    generated = False
    if not config.loopback_only and not config.api_key:
        config = replace(config, api_key=secrets.token_urlsafe(24))
        generated = True
    server = prepare(plan, config)  # a port in use is refused first, in its one line
    tools_shown = _template_shows_tools(plan.spec.path, template)
    if not tools_shown:
        print(
            "vrampilot: note: the chat template does not describe tools: llama-server never shows them to the "
            "model, which answers requests with `tools` in text (--chat-template-file FILE gives one that does)",
            file=sys.stderr,
        )
    shown_env = {k: v for k, v in (server.env or {}).items() if k == "GGML_BACKEND_PATH"}

    def ready(stopping: threading.Event) -> None:
        wait_ready(server, config, timeout_s=args.timeout, cancel=stopping)
        _announce(args, plan, config, server, generated, quote(server.argv, "bash", env=shown_env), tools_shown)

    return run_in_foreground(server, ready, label="server", binary="llama-server", watch=config)


def _api_key(args: argparse.Namespace) -> str | None:
    from vrampilot.server.process import api_key_problem

    path: Path | None = args.api_key_file
    if path is None:
        key: str | None = args.api_key
        if key is not None and (problem := api_key_problem(key)):
            raise UserError(
                f"--api-key {problem}: no client could send it. Give a key, or leave --api-key out "
                "(one is generated when --host reaches beyond this machine)"
            )
        return key
    try:
        key = next((line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the API key from {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not key:
        raise UserError(f"{path} holds no API key (the key is its first line that is not empty)")
    if problem := api_key_problem(key):
        raise UserError(f"the API key in {path} {problem}: no client could send it")
    return key


def _template(path: Path | None) -> str | None:
    """The text of --chat-template-file (None without it); a file that cannot be a template is refused here,
    in one line, rather than by llama-server after the model is loaded."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the chat template {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        raise UserError(f"the chat template {path} is empty")
    return text


def _template_shows_tools(model: Path, template: str | None) -> bool:
    """Whether the template the server will use writes tools into the prompt (a probe tool rendered
    by vrampilot.engine.tool_tokens); True when it cannot tell (llama-server judges it then)."""
    from vrampilot.engine import TemplateError, count_tools_tokens, openai_tool

    probe = openai_tool("probe", "A tool.", {"type": "object", "properties": {}})
    try:
        return count_tools_tokens(model, [probe], template=template).described
    except (TemplateError, ValueError, OSError):
        return True


def _announce(
    args: argparse.Namespace, plan: Any, config: Any, server: Any, generated: bool, line: str, tools_shown: bool
) -> None:
    s = plan.settings
    if args.json:
        out = {
            "base_url": config.base_url,
            "openai_base_url": config.base_url + "/v1",
            "api_key": config.api_key,
            "api_key_generated": generated,
            "host": config.host,
            "port": config.port,
            "pid": server.pid,
            "model": str(plan.spec.path),
            "model_id": plan.spec.path.stem,
            "argv": server.argv,
            "settings": s.to_dict(),
            "fits": plan.fits,
            # Whether the chat template shows the model the tools a request gives (docs/serving.md).
            "tools_in_template": tools_shown,
        }
        print(json.dumps(out), flush=True)
        return
    where = "this machine only" if config.loopback_only else "the network: anyone who has the key can use it"
    print(f"Serving {file_name_line(plan.spec.path)} at {config.base_url}/v1 (OpenAI-compatible; {where})")
    if args.api_key_file:
        print(f"API key: the one in {args.api_key_file}")
    elif config.api_key:
        print(f"API key{' (generated)' if generated else ''}: {config.api_key}")
    print(
        f"Plan: {s.n_ctx} context, K/V {s.type_k}/{s.type_v}, {s.n_gpu_layers} GPU layers, batch {s.n_batch}/"
        f"{s.n_ubatch}, {s.n_threads} threads; predicted {plan.speed.decode_tps:.1f} tokens/s"
    )
    print(f"Command: {line}")
    print("Ctrl+C stops the server.", flush=True)
