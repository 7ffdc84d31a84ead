"""The knob table (planner/knobs.py) is the one place a plan knob is declared: every pin has a row,
every row the Plan panel shows is a setting a plan carries, and docs/cli.md lists every option."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from vrampilot.cli import build_parser
from vrampilot.commands.plan import pins_from_args
from vrampilot.planner.knobs import KNOBS
from vrampilot.planner.plan import Pins
from vrampilot.planner.settings import Settings

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_every_pin_is_a_row_and_every_row_a_pin_or_a_setting() -> None:
    assert {k.field for k in KNOBS if k.pinned} == {f.name for f in fields(Pins)}
    settings = {f.name for f in fields(Settings)}
    assert all(k.field in settings for k in KNOBS if k.server or k.panel), "a flag or a panel row reads Settings"
    assert len({k.field for k in KNOBS}) == len(KNOBS)


def test_docs_cli_md_lists_every_option_of_the_table() -> None:
    """The synopsis of `vrampilot plan` names each option (one of its spellings), as --help does."""
    text = CLI_DOC.read_text(encoding="utf-8")
    synopsis = re.search(r"```\nvrampilot plan .*?```", text, re.S)
    assert synopsis is not None
    missing = [o.flags for k in KNOBS for o in k.cli if not any(re.search(rf"{f}\b", synopsis[0]) for f in o.flags)]
    assert missing == []


def test_the_options_pin_what_they_name() -> None:
    argv = ["plan", "--kv", "q8_0", "--kv-v", "f16", "--flash-attn", "off", "--swa-full", "on", "--cpu-moe"]
    argv += ["-ot", r"blk\.1=CPU", "--keep-free", "2", "--min-ctx", "8192", "--threads", "3"]
    pins = pins_from_args(build_parser(argv).parse_args(argv))
    assert (pins.type_k, pins.type_v, pins.flash_attn, pins.swa_full) == ("q8_0", "f16", False, True)
    assert (pins.cpu_experts, pins.cpu_tensor_patterns, pins.keep_free_bytes) == (True, (r"blk\.1",), 2 << 30)
    assert (pins.min_ctx, pins.n_threads, pins.n_ctx, pins.n_batch) == (8192, 3, None, None)
    assert pins_from_args(build_parser(["plan"]).parse_args(["plan"])) == Pins()
