"""Every plan knob once, as llama.cpp's common/arg.cpp is for its flags: the field it sets (Pins, and
Settings where the plan carries it), the CLI's options with their parser and help, the Plan
panel's row, llama-server's flag and llama-cpp-python's keyword.

The CLI's options and `pins_from_args` (commands/plan.py), the Plan panel's rows (ui/pin_controls.py)
and the exported command line and the engine's keywords (export/args.py) are built from `KNOBS`,
and a test checks that docs/cli.md lists every option: adding a knob is one row here. The rows are
in the order llama-server's flags are written (--rpc before --device: it parses them in order).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gguf import GGMLQuantizationType

from vrampilot.errors import UserError
from vrampilot.planner.memory.rope import yarn_freq_scale
from vrampilot.planner.plan import MAX_CTX, MAX_THREADS, Pins
from vrampilot.planner.settings import KV_CACHE_TYPES
from vrampilot.units import format_bytes, format_tokens, parse_size

# ggml type ids for the cache types llama.cpp accepts; llama-cpp-python takes the id. The gguf
# package's enum mirrors ggml.h, so it is the one table.
GGML_TYPE_IDS = {name: int(GGMLQuantizationType[name.upper()]) for name in KV_CACHE_TYPES}
# llama.h's LLAMA_ROPE_SCALING_TYPE_YARN.
_ROPE_YARN = 2


# llama.cpp pads the context to a multiple of 256 cells: asking for less still gives 256.
MIN_CONTEXT = 256
PANEL_BATCH_CHOICES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
PANEL_UBATCH_CHOICES = (32, 64, 128, 256, 512, 1024, 2048, 4096)


# -- parsers of the CLI's values (argparse reports an ArgumentTypeError's text as it is) ----------


def at_least(lo: int, why: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}" + (f" ({why})" if why else "") + f", not {value}")
        return value

    return parse


def context_length(text: str) -> int:
    """--ctx and --min-ctx: from llama.cpp's smallest context to the largest it can take."""
    value = at_least(MIN_CONTEXT, "the smallest context llama.cpp uses")(text)
    if value > MAX_CTX:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_CTX} (the most llama.cpp takes: its positions are 32-bit), not {value}"
        )
    return value


def _threads(text: str) -> int:
    value = at_least(1)(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS} (llama.cpp's limit), not {value}")
    return value


def _on_off(value: str) -> bool:
    v = value.lower()
    if v in ("on", "1", "true", "yes"):
        return True
    if v in ("off", "0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError("expected on or off")


def _split(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(x) for x in text.replace("/", ",").split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not shares or any(x < 0 or x != x or x == float("inf") for x in shares) or sum(shares) <= 0:
        raise argparse.ArgumentTypeError(f"shares must be numbers of 0 or more, not all 0: {text!r}")
    return shares


def _cpu_patterns(values: list[str] | None) -> tuple[str, ...] | None:
    """-ot values as llama.cpp takes them (PATTERN=CPU, comma-separated) or bare patterns. Only the
    CPU is a target here: another buffer type would be a device the plan does not choose."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            pattern, _, buft = item.partition("=")
            if buft and buft.upper() != "CPU":
                raise UserError(f"-ot {item}: only =CPU is planned (the plan places layers on its devices itself)")
            out.append(pattern)
    return tuple(out)


def _gib_size(text: str | None) -> int | None:
    """A size such as 2GiB or 512MiB; a bare number is GiB (what --keep-free means)."""
    if not text:
        return None
    try:
        return parse_size(text + "GiB" if text.strip().replace(".", "", 1).isdigit() else text)
    except ValueError as exc:
        raise UserError(f"--keep-free: {exc}") from None


# -- the table's parts -------------------------------------------------------------------------


@dataclass(frozen=True)
class CliOption:
    """One option of `plan`, `export`, `chat` and `serve` (add_argument's arguments)."""

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: Literal["store", "store_true", "append"] = "store"
    default: Any = None
    dest: str | None = None

    @property
    def name(self) -> str:
        """The attribute argparse sets."""
        return self.dest or self.flags[-1].lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class PanelRow:
    """The Plan panel's row: a label, a control ("slider" for the context, a "spin" box, a "combo"
    of `choices`) with an "auto" button beside it."""

    label: str
    control: Literal["slider", "spin", "combo"]
    choices: tuple[str, ...] = ()
    tooltip: str = ""
    minimum: int = 0  # a spin box's least value


@dataclass(frozen=True)
class ServerArg:
    """llama-server's flag for a setting and llama-cpp-python's keyword giving the same allocation."""

    flag: str
    to_flag: Callable[[Any], str] = str
    kwarg: str | None = None  # None: llama-cpp-python takes no keyword (the engine sets it otherwise)
    to_kwarg: Callable[[Any], Any] = int
    when: Callable[[Any], bool] = lambda _v: True  # written only when this holds
    switch: bool = False  # a flag without a value


@dataclass(frozen=True)
class Knob:
    """One setting a user can pin or a plan carries, with every front end's name for it."""

    field: str
    cli: tuple[CliOption, ...] = ()
    # The Pins value from the parsed options; None: the first option's value as parsed.
    pin: Callable[[argparse.Namespace], Any] | None = None
    cli_group: Literal["", "moe"] = ""  # "moe": listed under "mixture of experts and constraints"
    exclusive: str = ""  # options of knobs with the same name here exclude each other
    panel: PanelRow | None = None
    # The pin a panel combo's text means (the control's value as it is otherwise), and back.
    panel_value: Callable[[str], Any] = str
    panel_text: Callable[[Any], str] = str
    server: tuple[ServerArg, ...] = ()
    pinned: bool = True  # a Pins field (False: only the target sets it in Settings)

    def pin_from(self, args: argparse.Namespace) -> Any:
        if self.pin is not None:
            return self.pin(args)
        return getattr(args, self.cli[0].name, None)


def _kv(field: str, args: argparse.Namespace) -> str | None:
    value: str | None = getattr(args, field) or args.kv
    return value


KNOBS: tuple[Knob, ...] = (
    Knob(
        "n_ctx",
        (CliOption(("--ctx",), f"context length to reach (at least {MIN_CONTEXT})", "N", context_length),),
        panel=PanelRow("Context", "slider"),
        server=(ServerArg("-c", kwarg="n_ctx"),),
    ),
    Knob(
        "n_gpu_layers",
        (CliOption(("--ngl",), "layers on the GPU (n_layer + 1 = all)", "N", at_least(0)),),
        panel=PanelRow("GPU layers", "spin"),
        server=(ServerArg("-ngl", kwarg="n_gpu_layers"),),
    ),
    Knob(
        "type_k",
        (
            CliOption(("--kv",), "K and V cache type", choices=KV_CACHE_TYPES),
            CliOption(("--kv-k",), "K cache type", choices=KV_CACHE_TYPES),
        ),
        pin=lambda a: _kv("kv_k", a),
        panel=PanelRow("K cache", "combo", KV_CACHE_TYPES),
        server=(ServerArg("-ctk", kwarg="type_k", to_kwarg=lambda v: GGML_TYPE_IDS[v]),),
    ),
    Knob(
        "type_v",
        (CliOption(("--kv-v",), "V cache type", choices=KV_CACHE_TYPES),),
        pin=lambda a: _kv("kv_v", a),
        panel=PanelRow("V cache", "combo", KV_CACHE_TYPES),
        server=(ServerArg("-ctv", kwarg="type_v", to_kwarg=lambda v: GGML_TYPE_IDS[v]),),
    ),
    Knob(
        "flash_attn",
        (CliOption(("--flash-attn",), "flash attention", choices=("auto", "on", "off"), default="auto"),),
        pin=lambda a: None if a.flash_attn == "auto" else a.flash_attn == "on",
        panel=PanelRow("Flash attention", "combo", ("on", "off")),
        panel_value=lambda text: text == "on",
        panel_text=lambda on: "on" if on else "off",
        server=(ServerArg("-fa", lambda v: "on" if v else "off", "flash_attn", bool),),
    ),
    Knob(
        "n_batch",
        (CliOption(("--batch",), "logical batch size (-b)", "N", at_least(1)),),
        panel=PanelRow("Batch", "combo", tuple(map(str, PANEL_BATCH_CHOICES))),
        panel_value=int,
        server=(ServerArg("-b", kwarg="n_batch"),),
    ),
    Knob(
        "n_ubatch",
        (CliOption(("--ubatch",), "physical batch size (-ub)", "N", at_least(1)),),
        panel=PanelRow("Micro-batch", "combo", tuple(map(str, PANEL_UBATCH_CHOICES))),
        panel_value=int,
        server=(ServerArg("-ub", kwarg="n_ubatch"),),
    ),
    Knob(
        "n_threads",
        (CliOption(("--threads",), "generation threads (-t)", "N", _threads),),
        panel=PanelRow("Threads", "spin", minimum=1),
        # 0 threads: left to llama-server (a portable line for another machine's host).
        server=(ServerArg("-t", kwarg="n_threads", when=bool),),
    ),
    Knob(
        "n_threads_batch",
        (CliOption(("--threads-batch",), "prompt threads (-tb)", "N", _threads),),
        panel=PanelRow("Prompt threads", "spin", minimum=1),
        server=(ServerArg("-tb", kwarg="n_threads_batch", when=bool),),
    ),
    Knob(
        "swa_full",
        (CliOption(("--swa-full",), "full-size sliding-window cache", "on|off", _on_off),),
        panel=PanelRow(
            "Full SWA cache",
            "combo",
            ("off", "on"),
            "A sliding-window model's layers keep the whole context, not only the window "
            "(llama-server's --swa-full): more memory, no re-reading of a long prompt. No effect on other models.",
        ),
        panel_value=lambda text: text == "on",
        panel_text=lambda on: "on" if on else "off",
        server=(ServerArg("--swa-full", kwarg="swa_full", to_kwarg=bool, when=bool, switch=True),),
    ),
    # The target's CPU code decides it (placement.no_repack_reason); llama-cpp-python takes no keyword
    # for it, so the engine sets llama_model_params.use_extra_bufts itself.
    Knob("no_repack", server=(ServerArg("--no-repack", kwarg=None, when=bool, switch=True),), pinned=False),
    # Several devices: layers split by -ts across them in --device's order.
    Knob(
        "tensor_split",
        (
            CliOption(
                ("--tensor-split",),
                "each device's share of the offloaded layers, in llama.cpp's order (RPC hosts first)",
                "A,B,...",
                _split,
            ),
        ),
        server=(
            ServerArg("-sm", lambda _v: "layer", "split_mode", lambda _v: 1, when=bool),  # LLAMA_SPLIT_MODE_LAYER
            ServerArg("-ts", lambda v: ",".join(f"{x:g}" for x in v), "tensor_split", list, when=bool),
        ),
    ),
    # The target's devices (planner/target.py; --rpc and --gpu-backend choose them): the RPC hosts
    # must be registered by --rpc before --device names them.
    Knob("rpc_servers", server=(ServerArg("--rpc", ",".join, when=bool),), pinned=False),
    Knob("devices", server=(ServerArg("--device", ",".join, when=bool),), pinned=False),
    # Tensors kept in host memory (planner/memory/placement.py). llama-cpp-python takes no keyword for
    # them: the engine sets llama_model_params.tensor_buft_overrides from cpu_override_patterns,
    # the same list these flags expand to in llama-server.
    Knob(
        "n_cpu_moe",
        (
            CliOption(
                ("--n-cpu-moe",),
                "keep the routed experts of the first N layers in RAM (llama.cpp's --n-cpu-moe; default: "
                "the planner keeps every layer's attention on the GPU and as few experts in RAM as fit)",
                "N",
                at_least(0),
            ),
        ),
        cli_group="moe",
        exclusive="experts",
        panel=PanelRow(
            "Experts in RAM",
            "spin",
            tooltip="Routed experts of the first N layers stay in RAM (llama.cpp's --n-cpu-moe); every layer's "
            "attention and KV cache stay on the GPU. Auto: as few as fit.",
        ),
        server=(ServerArg("--n-cpu-moe", when=bool),),
    ),
    Knob(
        "cpu_experts",
        (
            CliOption(
                ("--no-cpu-experts",), "no routed experts in RAM: the whole model on the GPU", action="store_true"
            ),
            CliOption(("--cpu-moe",), "every layer's routed experts in RAM (--cpu-moe)", action="store_true"),
        ),
        pin=lambda a: True if a.cpu_moe else (False if a.no_cpu_experts else None),
        cli_group="moe",
        exclusive="experts",
    ),
    Knob(
        "cpu_tensor_patterns",
        (
            CliOption(
                ("-ot", "--override-tensor"),
                "keep the tensors whose names match this regular expression in RAM, as llama.cpp's "
                "-ot PATTERN=CPU (repeatable); the plan sizes everything else around them",
                "PATTERN[=CPU]",
                action="append",
                dest="cpu_tensors",
            ),
        ),
        pin=lambda a: _cpu_patterns(a.cpu_tensors),
        cli_group="moe",
        server=(ServerArg("-ot", lambda v: ",".join(f"{p}=CPU" for p in v), when=bool),),
    ),
    Knob(
        "min_ctx",
        (CliOption(("--min-ctx",), "plan at least this context (the planner may choose more)", "N", context_length),),
        cli_group="moe",
    ),
    Knob(
        "tools_tokens",
        (
            CliOption(
                ("--tools-tokens",),
                "tokens the enabled tools' schemas take in every prompt: the plan shows them in the "
                "context budget and warns past a quarter of the context",
                "N",
                at_least(0),
            ),
        ),
        cli_group="moe",
    ),
    Knob(
        "keep_free_bytes",
        (
            CliOption(
                ("--keep-free",),
                "leave this much memory unused on every GPU, e.g. 2GiB (a number alone is GiB); replaces --margin",
                "SIZE",
            ),
        ),
        pin=lambda a: _gib_size(a.keep_free),
        cli_group="moe",
    ),
    # The vision projector (FILE, or auto: the one beside the model that fits it).
    # llama-cpp-python takes no keyword for it: the engine loads it with the mtmd binding, on the
    # device planner/memory/projector.py names; llama-server's --no-mmproj-offload follows mmproj_cpu
    # (export/args.py: it needs the projector's path as well).
    Knob(
        "mmproj_path",
        (
            CliOption(
                ("--mmproj",),
                "a vision projector (mmproj GGUF) to load with the model; 'auto': the one beside the "
                "model that fits it (mmproj*.gguf in the model's folder)",
                "FILE|auto",
            ),
        ),
        pin=lambda _a: None,  # resolved against the model's file (commands/plan.py plan_from_args)
        server=(ServerArg("--mmproj", when=bool),),
    ),
    Knob(
        "mmproj_cpu",
        (
            CliOption(
                ("--no-mmproj-offload",),
                "keep the vision projector on the CPU (llama.cpp's --no-mmproj-offload)",
                action="store_true",
            ),
        ),
        pin=lambda a: True if a.no_mmproj_offload else None,
    ),
    # A context past the trained one (planner/memory/rope.py): YaRN, so that llama-server serves the whole
    # slot; llama-cpp-python takes the frequency scale llama-server derives from --rope-scale. The
    # plan sets these from the context, nobody pins them.
    Knob(
        "rope_scale",
        server=(
            ServerArg("--rope-scaling", lambda _v: "yarn", "rope_scaling_type", lambda _v: _ROPE_YARN, when=bool),
            ServerArg("--rope-scale", lambda v: f"{v:g}", "rope_freq_scale", yarn_freq_scale, when=bool),
        ),
        pinned=False,
    ),
    Knob("yarn_orig_ctx", server=(ServerArg("--yarn-orig-ctx", kwarg="yarn_orig_ctx", when=bool),), pinned=False),
)


def knob(field: str) -> Knob:
    return next(k for k in KNOBS if k.field == field)


# Pins without a Plan panel row of their own, as the panel's other controls name them.
_OTHER_PIN_NAMES = {
    "tensor_split": "Tensor split",
    "n_cpu_moe": "Experts in RAM",
    "cpu_experts": "Experts",
    "min_ctx": "Minimum context",
    "keep_free_bytes": "Kept free",
    "cpu_tensor_patterns": "Tensors on the CPU",
    "mmproj_path": "Vision projector",
    "mmproj_cpu": "Vision projector on the",
}


def pinned_labels(pins: Pins) -> list[str]:
    """Each pinned setting as the Plan panel names it, with its value ("Context 32K", "Threads 4"):
    what the Models list's pinned mark lists (pins are remembered per model)."""
    out = []
    for field, value in pins.pinned().items():
        k = next((k for k in KNOBS if k.field == field and k.panel is not None), None)
        if field in ("n_ctx", "min_ctx") and isinstance(value, int):
            text = format_tokens(value)
        elif field == "keep_free_bytes" and isinstance(value, int):
            text = format_bytes(value)
        elif field == "mmproj_path":
            text = Path(str(value)).name
        elif field == "cpu_experts":
            text = "all in RAM" if value else "all on the GPU"
        elif field == "mmproj_cpu":
            text = "CPU" if value else "GPU"
        elif isinstance(value, tuple):
            text = ", ".join(map(str, value))
        elif k is not None:
            text = k.panel_text(value)
        else:
            text = {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)
        label = k.panel.label if k is not None and k.panel is not None else _OTHER_PIN_NAMES.get(field, field)
        out.append(f"{label} {text}")
    return out


def add_knob_options(p: argparse.ArgumentParser) -> None:
    """Every knob's CLI options, in the table's order (the MoE ones under their own heading)."""
    moe = p.add_argument_group("mixture of experts and constraints")
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for k in KNOBS:
        group: argparse._ActionsContainer = moe if k.cli_group == "moe" else p
        if k.exclusive:
            if k.exclusive not in exclusive:
                exclusive[k.exclusive] = group.add_mutually_exclusive_group()
            group = exclusive[k.exclusive]
        for o in k.cli:
            kwargs: dict[str, Any] = {"help": o.help, "action": o.action}
            if o.dest:
                kwargs["dest"] = o.dest
            if o.action != "store_true":
                kwargs.update(metavar=o.metavar, choices=o.choices, default=o.default)
                if o.parse is not None:
                    kwargs["type"] = o.parse
            group.add_argument(*o.flags, **kwargs)


def pins_from_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """Each pinnable knob's value from the parsed options (None: the planner chooses)."""
    return {k.field: k.pin_from(args) for k in KNOBS if k.pinned and k.cli}
