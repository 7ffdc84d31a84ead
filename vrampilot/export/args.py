"""The one builder of llama.cpp arguments.

A single table maps each plan setting to its llama-server flag and its llama-cpp-python keyword,
so the exported command line and the in-app engine cannot drift apart. Flags are checked against
the vendored common/arg.cpp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType

from vrampilot.planner.settings import KV_CACHE_TYPES, Settings

# ggml type ids for the cache types llama.cpp accepts; llama-cpp-python takes the id. The gguf
# package's enum mirrors ggml.h, so it is the one table.
GGML_TYPE_IDS = {name: int(GGMLQuantizationType[name.upper()]) for name in KV_CACHE_TYPES}


@dataclass(frozen=True)
class _Arg:
    field: str
    flag: str
    kwarg: str | None  # None: llama-cpp-python takes no keyword for it (the engine sets it otherwise)
    to_flag: Callable[[Any], str]
    to_kwarg: Callable[[Any], Any]
    # Emit the flag only when this returns True (e.g. --swa-full is a switch).
    when: Callable[[Any], bool] = lambda _v: True
    switch: bool = False


# llama.h's LLAMA_ROPE_SCALING_TYPE_YARN.
_ROPE_YARN = 2


def _freq_scale(rope_scale: float) -> float:
    from vrampilot.planner.rope import yarn_freq_scale

    return yarn_freq_scale(rope_scale)


def _shares(split: tuple[float, ...]) -> str:
    return ",".join(f"{x:g}" for x in split)


_ARGS: tuple[_Arg, ...] = (
    _Arg("n_ctx", "-c", "n_ctx", str, int),
    _Arg("n_gpu_layers", "-ngl", "n_gpu_layers", str, int),
    _Arg("type_k", "-ctk", "type_k", str, lambda v: GGML_TYPE_IDS[v]),
    _Arg("type_v", "-ctv", "type_v", str, lambda v: GGML_TYPE_IDS[v]),
    _Arg("flash_attn", "-fa", "flash_attn", lambda v: "on" if v else "off", bool),
    _Arg("n_batch", "-b", "n_batch", str, int),
    _Arg("n_ubatch", "-ub", "n_ubatch", str, int),
    # 0 threads: left to llama-server (a portable line for another machine's host).
    _Arg("n_threads", "-t", "n_threads", str, int, when=bool),
    _Arg("n_threads_batch", "-tb", "n_threads_batch", str, int, when=bool),
    _Arg("swa_full", "--swa-full", "swa_full", str, bool, when=bool, switch=True),
    # Several devices: layers split by -ts across them in --device's order (the RPC hosts must be
    # registered by --rpc before --device names them: llama-server parses in order).
    _Arg("tensor_split", "-sm", "split_mode", lambda _v: "layer", lambda _v: 1, when=bool),  # LLAMA_SPLIT_MODE_LAYER
    _Arg("tensor_split", "-ts", "tensor_split", _shares, list, when=bool),
    _Arg("rpc_servers", "--rpc", None, ",".join, list, when=bool),
    _Arg("devices", "--device", None, ",".join, list, when=bool),
    # Tensors kept in host memory (planner/placement.py). llama-cpp-python takes no keyword for
    # them: the engine sets llama_model_params.tensor_buft_overrides from cpu_override_patterns,
    # the same list these two flags expand to in llama-server.
    _Arg("n_cpu_moe", "--n-cpu-moe", None, str, int, when=bool),
    _Arg("cpu_tensor_patterns", "-ot", None, lambda v: ",".join(f"{p}=CPU" for p in v), list, when=bool),
    # The vision projector: llama-cpp-python takes no keyword for it (the engine loads it with the
    # mtmd binding, on the device planner/projector.py names).
    _Arg("mmproj_path", "--mmproj", None, str, str, when=bool),
    # A context past the trained one (planner/rope.py): YaRN, so that llama-server serves the whole
    # slot; llama-cpp-python takes the frequency scale llama-server derives from --rope-scale.
    _Arg("rope_scale", "--rope-scaling", "rope_scaling_type", lambda _v: "yarn", lambda _v: _ROPE_YARN, when=bool),
    _Arg("rope_scale", "--rope-scale", "rope_freq_scale", lambda v: f"{v:g}", lambda v: _freq_scale(v), when=bool),
    _Arg("yarn_orig_ctx", "--yarn-orig-ctx", "yarn_orig_ctx", str, int, when=bool),
)


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
) -> list[str]:
    """argv for llama-server running exactly this plan (and, for `vrampilot serve`, where and how
    it listens: host, port, the model's name in /v1/models, the /metrics endpoint).

    Never an API key: an argv is in every user's process list and in the lines we print; the
    server takes the key from its environment (vrampilot.server.binaries.tool_env)."""
    argv = [server, "-m", str(model_path)]
    for a in _ARGS:
        value = getattr(settings, a.field)
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
        a.kwarg: a.to_kwarg(getattr(settings, a.field))
        for a in _ARGS
        if a.kwarg is not None and a.when(getattr(settings, a.field))
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
