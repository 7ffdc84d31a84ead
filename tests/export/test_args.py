"""The llama-server line and the engine's llama-cpp-python arguments come from one table."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vrampilot.export import llama_cpp_kwargs, llama_server_argv, quote
from vrampilot.planner.knobs import GGML_TYPE_IDS
from vrampilot.planner.settings import KV_CACHE_TYPES, Settings


def _parse_server_argv(argv: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    i = 1
    while i < len(argv):
        flag = argv[i]
        if flag in ("--swa-full", "--jinja"):
            out[flag] = True
            i += 1
        else:
            out[flag] = argv[i + 1]
            i += 2
    return out


@pytest.mark.parametrize("swa_full", [False, True])
@pytest.mark.parametrize(("k", "v", "fa"), [("f16", "f16", True), ("q8_0", "q8_0", True), ("q4_0", "f16", False)])
def test_server_flags_and_engine_kwargs_agree(k: str, v: str, fa: bool, swa_full: bool) -> None:
    s = Settings(
        n_ctx=65536,
        type_k=k,
        type_v=v,
        n_gpu_layers=29,
        n_batch=2048,
        n_ubatch=1024,
        n_threads=2,
        n_threads_batch=8,
        flash_attn=fa,
        swa_full=swa_full,
    )
    argv = llama_server_argv("/m/x.gguf", s, host="127.0.0.1", port=8080)
    flags = _parse_server_argv(argv)
    kw = llama_cpp_kwargs(s)
    assert argv[:3] == ["llama-server", "-m", "/m/x.gguf"]
    assert int(flags["-c"]) == kw["n_ctx"] == 65536
    assert int(flags["-ngl"]) == kw["n_gpu_layers"] == 29
    assert GGML_TYPE_IDS[str(flags["-ctk"])] == kw["type_k"]
    assert GGML_TYPE_IDS[str(flags["-ctv"])] == kw["type_v"]
    assert flags["-fa"] == ("on" if kw["flash_attn"] else "off")
    assert int(flags["-b"]) == kw["n_batch"] and int(flags["-ub"]) == kw["n_ubatch"]
    assert int(flags["-t"]) == kw["n_threads"] and int(flags["-tb"]) == kw["n_threads_batch"]
    assert ("--swa-full" in flags) == kw["swa_full"] == swa_full
    assert flags["-np"] == "1" and flags["--fit"] == "off" and flags["--jinja"] is True
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8080"


def test_type_ids_match_llama_cpp() -> None:
    import llama_cpp

    checked = 0
    for name in KV_CACHE_TYPES:
        const = getattr(llama_cpp, f"GGML_TYPE_{name.upper()}", None)
        if const is not None:  # llama-cpp-python exports most, not all, of ggml's ids
            assert GGML_TYPE_IDS[name] == const
            checked += 1
    assert checked >= 6
    assert GGML_TYPE_IDS["bf16"] == 30 and GGML_TYPE_IDS["iq4_nl"] == 20


NASTY = ["llama-server", "-m", '/home/zoë/My Models/it\'s "7B" $HOME `x` %PATH% 100%.gguf', "-c", "4096"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_quoting_round_trips(tmp_path: Path) -> None:
    line = quote(["printf", "%s\\n", *NASTY[1:]], "bash")
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == NASTY[1:]


def test_powershell_quoting() -> None:
    line = quote(NASTY, "powershell")
    assert line.startswith("llama-server -m '")
    assert "it''s" in line  # single quote doubled inside a literal string
    assert "$HOME" in line and line.count("'") % 2 == 0
    quoted_exe = quote(["C:\\Program Files\\llama\\llama-server.exe", "-c", "1"], "powershell")
    assert quoted_exe.startswith("& 'C:\\Program Files\\llama\\llama-server.exe'")


def _command_line_to_argv(line: str) -> list[str]:
    """The Microsoft C runtime's rules for splitting a command line (CommandLineToArgvW)."""
    args: list[str] = []
    cur: list[str] = []
    in_quotes = False
    have = False
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            n = 0
            while i < len(line) and line[i] == "\\":
                n += 1
                i += 1
            if i < len(line) and line[i] == '"':
                cur.append("\\" * (n // 2))
                if n % 2:
                    cur.append('"')
                    i += 1
            else:
                cur.append("\\" * n)
            have = True
            continue
        if c == '"':
            in_quotes = not in_quotes
            have = True
        elif c in " \t" and not in_quotes:
            if have:
                args.append("".join(cur))
                cur, have = [], False
        else:
            cur.append(c)
            have = True
        i += 1
    if have:
        args.append("".join(cur))
    return args


def test_cmd_quoting_survives_the_c_runtime() -> None:
    # What a Windows file name can hold (no " and, here, no %): cmd takes it literally inside quotes.
    argv = ["llama-server", "-m", "C:\\Users\\zoë\\My Models\\it's (7B) & a^b $HOME `x`\\", "-c", "4096"]
    line = quote(argv, "cmd")
    assert line.startswith("chcp 65001 >NUL & ")  # non-ASCII path: UTF-8 code page
    assert _command_line_to_argv(line.removeprefix("chcp 65001 >NUL & ")) == argv


def test_cmd_refuses_what_it_cannot_quote() -> None:
    from vrampilot.export.shell import UnquotableError

    with pytest.raises(UnquotableError):  # a " ends cmd's quoting; %PATH% expands inside quotes
        quote(NASTY, "cmd")


def test_unknown_shell() -> None:
    with pytest.raises(ValueError, match="unknown shell"):
        quote(["a"], "fish")
