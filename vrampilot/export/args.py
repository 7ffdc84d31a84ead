"""The one builder of llama.cpp arguments.

The knob table (planner/knobs.py) gives each plan setting its llama-server flag and its
llama-cpp-python keyword, so the exported command line and the in-app engine cannot drift apart.
Flags are checked against the vendored common/arg.cpp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrampilot.planner.knobs import KNOBS, ServerArg
from vrampilot.planner.settings import Settings

# Each setting's llama-server flag and llama-cpp-python keyword, in the knob table's order.
_ARGS: tuple[tuple[str, ServerArg], ...] = tuple((k.field, a) for k in KNOBS for a in k.server)


def llama_server_argv(
    model_path: str | Path,
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    server: str = "llama-server",
    load_mode: str | None = None,
    alias: str | None = None,
    metrics: bool = False,
    chat_template_file: str | Path | None = None,
) -> list[str]:
    """argv for llama-server running exactly this plan (and, for `vrampilot serve`, where and how
    it listens: host, port, the model's name in /v1/models, the /metrics endpoint, a chat template
    replacing the model's own).

    Never an API key: an argv is in every user's process list and in the lines we print; the
    server takes the key from its environment (vrampilot.server.binaries.tool_env)."""
    argv = [server, "-m", str(model_path)]
    for field, a in _ARGS:
        value = getattr(settings, field)
        if not a.when(value):
            continue
        argv.append(a.flag)
        if not a.switch:
            argv.append(a.to_flag(value))
    if settings.mmproj_path and settings.projector_on_cpu:
        argv.append("--no-mmproj-offload")
    # One sequence, as the app runs it: llama-server's default of 4 slots would share the context
    # four ways and change the sliding-window cache size the plan counted.
    argv += ["-np", str(settings.n_seq)]
    # The plan already fits these settings; llama-server's --fit would only second-guess them.
    argv += ["--fit", "off"]
    # The model's own Jinja chat template: the only path on which llama-server takes `tools`,
    # `tool_choice` and Anthropic tool_use blocks (without it every such request is refused). On by
    # default in the bundled build; named so that an exported line means the same to an older
    # llama-server, whose default was off.
    argv.append("--jinja")
    # What the plan left in the host budget for llama-server's prompt cache and context
    # checkpoints (planner/memory/server_host.py); its defaults (8 GiB, 32 per slot) count on RAM the
    # plan never gave them.
    argv += ["--cache-ram", str(settings.cache_ram_mib), "--ctx-checkpoints", str(settings.ctx_checkpoints)]
    argv += draft_argv(settings)
    if load_mode:
        argv += ["--load-mode", load_mode]
    if host:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    if alias:
        argv += ["--alias", alias]
    if metrics:
        argv.append("--metrics")
    if chat_template_file:
        argv += ["--chat-template-file", str(chat_template_file)]
    return argv


# The n-gram length prompt-lookup drafting matches on, in llama-server (--spec-ngram-simple-size-n)
# and in the engine (LlamaPromptLookupDecoding's max_ngram_size) alike.
NGRAM_SIZE = 3


def draft_argv(settings: Settings) -> list[str]:
    """llama-server's speculative-decoding flags for the plan's draft (common/arg.cpp of the
    vendored llama.cpp: the --spec-* names; --draft-max/--draft-min were removed there).

    The type is always named: with -md alone llama-server loads the draft model, counts its
    memory and never drafts (common_speculative_init enables only the types listed). MTP drafting
    (draft-mtp) names no model: llama-server loads the model's own MTP block (load_mtp) and runs it
    in a second context over the same weights, whose cache types are the draft's (-ctkd/-ctvd)."""
    if not settings.drafting:
        return []
    if settings.spec_type == "mtp":
        return [
            "--spec-type",
            "draft-mtp",
            "--spec-draft-n-max",
            str(settings.draft_n_max),
            "--spec-draft-n-min",
            str(settings.draft_n_min),
            "-ctkd",
            settings.draft_type_k,
            "-ctvd",
            settings.draft_type_v,
        ]
    if settings.spec_type == "ngram":
        return [
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            str(NGRAM_SIZE),
            "--spec-ngram-simple-size-m",
            str(settings.draft_n_max),
        ]
    argv = [
        "-md",
        settings.draft_model,
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        str(settings.draft_n_max),
        "--spec-draft-n-min",
        str(settings.draft_n_min),
        "-ngld",
        str(settings.draft_gpu_layers),
        "-ctkd",
        settings.draft_type_k,
        "-ctvd",
        settings.draft_type_v,
    ]
    if settings.draft_device:
        argv += ["-devd", settings.draft_device]
    return argv


def llama_cpp_kwargs(settings: Settings, *, load_mode: str | None = None) -> dict[str, Any]:
    """Keyword arguments for llama_cpp.Llama giving the same allocations as llama_server_argv."""
    kwargs: dict[str, Any] = {
        a.kwarg: a.to_kwarg(getattr(settings, field))
        for field, a in _ARGS
        if a.kwarg is not None and a.when(getattr(settings, field))
    }
    # llama-cpp-python defaults to the full-size SWA cache; the plan decides, so always pass it.
    kwargs["swa_full"] = bool(settings.swa_full)
    if settings.rope_scale:
        # llama-server leaves YaRN's attention factor and correction dims to the model (-1);
        # llama-cpp-python's defaults (1.0, 32, 1) would compute other positions.
        kwargs.update(yarn_attn_factor=-1.0, yarn_beta_fast=-1.0, yarn_beta_slow=-1.0)
    if load_mode == "none":
        kwargs["use_mmap"] = False
    elif load_mode == "mlock":
        kwargs["use_mmap"] = False
        kwargs["use_mlock"] = True
    return kwargs
