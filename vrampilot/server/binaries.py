"""llama.cpp's own executables shipped with the engine (llama-server, ggml-rpc-server, llama-bench).

The engine recipe (packaging/engine/build.py) builds them from the same sources and flags as the
in-app engine and puts them in llama_cpp/lib beside its libraries; the CPU variants sit apart in
lib/cpu/. llama.cpp's tools load backends by themselves (ggml_backend_load_all: the executable's
folder and the current one), and would score the CPU variants by CPUID alone, which is what
crashes on machines whose OS never enabled AMX or AVX-512. So a tool is started with
GGML_BACKEND_PATH naming the one variant this process chose after probing the CPU
(vrampilot.llamacpp.backends); it finds the other backends (RPC, GPUs) in its own folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.export import llama_server_argv, quote
from vrampilot.planner.settings import Settings

REBUILD_HINT = "reinstall the engine with `python packaging/engine/build.py --install` (what `make run` does)"


class ToolMissingError(UserError):
    pass


def lib_dir() -> Path:
    """llama_cpp's library folder (LLAMA_CPP_LIB_PATH moves it, as it moves llama-cpp-python's)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise ToolMissingError(f"llama-cpp-python is not installed; {REBUILD_HINT}")
    return Path(spec.origin).parent / "lib"


def tool_path(name: str) -> Path:
    """The bundled `name` (llama-server, ggml-rpc-server, llama-bench); ToolMissingError when absent."""
    path = lib_dir() / (name + ".exe" if sys.platform == "win32" else name)
    if not path.is_file():
        raise ToolMissingError(f"this engine has no {name} ({path} is missing); {REBUILD_HINT}")
    return path


API_KEY_VARIABLE = "LLAMA_API_KEY"  # llama-server's --api-key, read from its environment
# llama.cpp's tools read any option from a LLAMA_ARG_* variable (common/arg.cpp set_env) when the
# command line does not give it. One left in the user's environment would change what runs behind
# the plan's back: LLAMA_ARG_JINJA=0 makes llama-server refuse every request with `tools`,
# LLAMA_ARG_TOOLS / LLAMA_ARG_AGENT / LLAMA_ARG_MCP_SERVERS_CONFIG turn on its own tools (shell,
# files) and MCP servers, which any client of `serve` could then run through POST /tools.
_INHERITED_ARG_PREFIX = "LLAMA_ARG_"


def tool_env(base: dict[str, str] | None = None, *, api_key: str | None = None) -> dict[str, str]:
    """The environment a tool runs with: the CPU variant this machine really runs, named, and the
    API key llama-server requires, if any; none of llama.cpp's LLAMA_ARG_* option variables. The
    key goes here, not on the command line: any user can read a process's command line (ps,
    /proc/<pid>/cmdline), only its owner its environment."""
    from vrampilot import llamacpp
    from vrampilot.llamacpp import loaded_backends, module_file

    env = dict(os.environ if base is None else base)
    # The argv is the whole configuration (what the user copies is what runs): nothing inherited
    # may add to it, and the only key is the one given here.
    for name in [n for n in env if n.startswith(_INHERITED_ARG_PREFIX) or n == API_KEY_VARIABLE]:
        del env[name]
    if api_key:
        env[API_KEY_VARIABLE] = api_key
    # When llama.cpp aborts (an RPC host went away) it would attach gdb to print a backtrace
    # (seconds, and a page of noise in the log the user reads): its one-line reason is enough.
    env.setdefault("GGML_NO_BACKTRACE", "1")
    llamacpp.load()  # chooses the variant if nobody has yet (a probe, cached per machine)
    loaded = loaded_backends()
    if loaded is not None and loaded.cpu_variant:
        env["GGML_BACKEND_PATH"] = str(module_file(Path(loaded.lib_dir), f"cpu-{loaded.cpu_variant}"))
    if sys.platform == "win32":
        env["PATH"] = str(lib_dir()) + os.pathsep + env.get("PATH", "")
    return env


def backend_env_for_export() -> dict[str, str]:
    """Just the variant line of `tool_env`, for an exported command line."""
    env = tool_env({})
    return {k: v for k, v in env.items() if k == "GGML_BACKEND_PATH"}  # the user's own debugging is theirs


PORTABLE_NOTE = "a portable line for that GPU's machine: llama-server from its PATH, the model by file name, threads left to llama-server"


def exported_command(
    model_path: Path, settings: Settings, shell: str, *, elsewhere: bool = False, **options: Any
) -> str:
    """The plan as a command line for `shell`, naming the bundled llama-server and the CPU variant
    the app runs here, so that what the user copies is what `vrampilot serve` starts. An engine
    without tools (an older install) exports plain `llama-server`, for one on PATH.

    `elsewhere`: the plan is for a GPU this machine does not have (Target.elsewhere). Nothing of
    this machine then belongs in the line (PORTABLE_NOTE): not its llama-server or CPU variant,
    not its folders, not its core count (llama-server's default follows the host it runs on)."""
    if elsewhere:
        portable = replace(
            settings,
            n_threads=0,
            n_threads_batch=0,
            mmproj_path=Path(settings.mmproj_path).name if settings.mmproj_path else "",
            draft_model=Path(settings.draft_model).name if settings.draft_model else "",
        )
        return quote(llama_server_argv(Path(model_path).name, portable, **options), shell)
    try:
        server, env = str(tool_path("llama-server")), backend_env_for_export()
    except ToolMissingError:
        server, env = "llama-server", {}
    return quote(llama_server_argv(model_path, settings, server=server, **options), shell, env=env)
