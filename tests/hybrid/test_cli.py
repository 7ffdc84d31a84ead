"""`vrampilot hybrid-eval`: registered without torch, says how to install it, prints the JSON shape."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from vrampilot.commands import hybrid_eval as cli
from vrampilot.hybrid.config import CONFIGS, HybridConfig, get_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vrampilot")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def test_parser_defaults() -> None:
    args = _parser().parse_args(["hybrid-eval", "--passkey", "--config", "quest"])
    assert args.handler is cli.run
    assert args.model is None and args.passkey and args.config == "quest" and args.lengths == "2048,4096,8192"


def test_without_torch_the_command_explains_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    args = _parser().parse_args(["hybrid-eval"])
    assert cli.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'vrampilot[hybrid]'" in err[0]


def test_cli_module_imports_without_torch() -> None:
    import subprocess

    code = (
        "import sys; sys.modules['torch'] = None; import vrampilot.commands.hybrid_eval, vrampilot.hybrid.config; "
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_named_configs_and_layouts() -> None:
    assert {"default", "v4", "pooled", "quest", "hca"} <= set(CONFIGS)
    assert CONFIGS["v4"].layer_kinds(5) == ("C", "H", "C", "H", "C")
    assert HybridConfig(layout_head="FF", layout_cycle="CHW").layer_kinds(6) == ("F", "F", "C", "H", "W", "C")
    with pytest.raises(Exception, match="unknown hybrid config"):
        get_config("nope")
    with pytest.raises(Exception, match="unknown layer kind"):
        HybridConfig(layout_cycle="X").validate()


def test_lengths_parse() -> None:
    assert cli._ints("2048, 4k,8K", "--lengths") == [2048, 4096, 8192]
    with pytest.raises(Exception, match="comma-separated"):
        cli._ints("two", "--lengths")


@pytest.mark.slow  # loads the embedded model and runs every cache on it
def test_json_output_shape(embedded_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    text = tmp_path / "t.txt"
    text.write_text(" ".join(["The quick brown fox jumps over the lazy dog."] * 40), encoding="utf-8")
    args = _parser().parse_args(
        [
            "hybrid-eval",
            str(embedded_model),
            "--text",
            str(text),
            "--lengths",
            "64,128",
            "--samples",
            "1",
            "--passkey",
            "--passkey-lengths",
            "64",
            "--passkey-depths",
            "1",
            "--passkey-trials",
            "2",
            "--decode-steps",
            "2",
            "--json",
        ]
    )
    assert cli.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    for name in ("full", "hybrid", "window"):
        assert set(out[name]) >= {"ppl", "kv_bytes", "passkey_acc", "decode_ms_per_token"}
        assert set(out[name]["ppl"]) == {"64", "128"} and set(out[name]["kv_bytes"]) == {"64", "128"}
        assert 0.0 <= out[name]["passkey_acc"] <= 1.0
    assert out["passkey_n_cases"] == 2  # one length x one depth x two keys
    assert all(out[name]["passkey_acc"] in (0.0, 0.5, 1.0) for name in ("full", "hybrid", "window"))
    assert out["full"]["kv_bytes"]["128"] == out["f16_full_kv_bytes"]["128"]
    assert out["window"]["kv_bytes"]["128"] <= out["hybrid"]["kv_bytes"]["128"]


def test_wilson_interval() -> None:
    from vrampilot.hybrid.evaluate import wilson_interval

    lo, hi = wilson_interval(24, 40)
    assert abs(lo - 0.446) < 0.002 and abs(hi - 0.735) < 0.002  # the textbook values for 60% of 40
    assert wilson_interval(0, 40)[0] == 0.0 and 0.0 < wilson_interval(0, 40)[1] < 0.1
    assert wilson_interval(40, 40)[1] == 1.0 and wilson_interval(40, 40)[0] > 0.9
