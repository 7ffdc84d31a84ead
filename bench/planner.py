"""Planner memory model vs llama.cpp's own buffers, and planning time per model.

    python bench/planner.py            # every model x the settings grid, worst errors printed last
    python bench/planner.py --quick    # fewer settings
    python bench/planner.py --fit      # re-fit vrampilot/planner/memory/compute.py's FIT table (needs scipy)

Models: the embedded SmolLM2, one tiny fixture per architecture (testkit) and header-only
copies of released models (Qwen2.5-7B, Llama-3.1-8B, Gemma-3-27B, gpt-oss-20b, DeepSeek-V2-Lite).
Ground truth is llama.cpp's dry run (no_alloc), measured in this run with a fresh load per setting.
Two predictions are compared with it: the fitted formula alone (what `--estimate` plans use and
what the search starts from) and an exact plan's number (`plan(exact=True)`, the default of the CLI
and the window: llama.cpp's allocator asked on a header kept loaded). Planning time per model is
timed with the formula, and exact (first plan of the file, which loads the header, and later plans).

    python bench/planner.py --moe      # MoE expert placement: our plan vs llama.cpp's own --fit (Markdown)
    python bench/planner.py --moe --write docs/moe-placement.md   # and put it in that page

The MoE table (docs/moe-placement.md) plans released mixture-of-experts models (testkit/real_shapes.py
MOE_FILES: sparse files at their published dimensions, no download) on hypothetical 8/12/16/24 GiB
GPUs (a --vram target, host: MOE_HOST_RAM_GIB of RAM, 8 cores) at 8K and 32K context, pinning
only the context: -ngl, --n-cpu-moe and the K/V types are the planner's. Each plan is timed
(exact, as the CLI plans, after one untimed plan of the file loads its header) and given as a
ratio to a dense model's plan (Llama-3.1-8B Q4_K_M, same kind of plan) timed in the same run.

llama.cpp's own choice comes from its --fit (common/fit.cpp, common_fit_params), run by the
bundled llama-server on the same file and budget: `--fit on --fit-target 0 -c CTX -np 1 -fa on`
with one offload device, an RPC device (`--rpc` to a bundled ggml-rpc-server on loopback,
`-dev RPC0`). A small LD_PRELOAD shim (bench/fit_shim.c, built here with the system's C compiler)
makes that device report the profile's VRAM as free and total memory, prints the n_gpu_layers and
tensor overrides common_fit_params chose, and exits before the weights would load: the fit runs
llama.cpp's own no_alloc dry runs, so its numbers are llama.cpp's for a GPU of that size (an RPC
device counts as a GPU and runs every op, as CUDA does; lavapipe would not do: it reports 2 GiB
and leaves MXFP4 weights to the CPU). The fit's settings (its -ngl and -ot patterns, f16 K/V, the
same context) are then costed with our memory and speed model, so both decode speeds are our
model's prediction. Where the fit cannot be had (no C compiler, no bundled tools, not Linux, the
fit failing) the row says n/a and why.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from testkit.gguf_models import ARCHITECTURES, BIG, write_header_only, write_model  # noqa: E402
from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.paths import embedded_model_path  # noqa: E402
from vrampilot.planner.dry_run.graph import graph_compute  # noqa: E402
from vrampilot.planner.dry_run.measure import measure_allocations  # noqa: E402
from vrampilot.planner.memory import compute as compute_model  # noqa: E402
from vrampilot.planner.memory.compute import compute_buffer_bytes, output_buffer_bytes  # noqa: E402
from vrampilot.planner.memory.kv import kv_cache_bytes, kv_refusal  # noqa: E402
from vrampilot.planner.settings import Settings  # noqa: E402
from vrampilot.units import format_bytes  # noqa: E402

PlanFn = Callable[[Path, bool], Any]


@dataclass(frozen=True)
class Row:
    model: str
    settings: Settings
    kv_pred: int
    kv_meas: int
    compute_pred: int
    compute_meas: int
    output_pred: int
    output_meas: int
    refused_pred: str | None
    refused_meas: str | None
    compute_exact: int | None = None  # what an exact plan reports for these settings

    @property
    def total_pred(self) -> int:
        return self.kv_pred + self.compute_pred + self.output_pred

    @property
    def total_meas(self) -> int:
        return self.kv_meas + self.compute_meas + self.output_meas

    @staticmethod
    def pct(pred: int, meas: int) -> float:
        return 100.0 * (pred - meas) / meas if meas else 0.0


def build_models(folder: Path) -> dict[str, Path]:
    models: dict[str, Path] = {}
    emb = embedded_model_path()
    if emb is not None and emb.is_file():
        models["smollm2-135m"] = emb
    for arch in ARCHITECTURES:
        models[f"tiny-{arch}"] = write_model(folder / f"{arch}.gguf", arch)
    for key in BIG:
        models[key] = write_header_only(folder / f"{key}.gguf", key)
    return models


def settings_grid(quick: bool) -> list[Settings]:
    ctxs = [4096, 32768] if quick else [1000, 4096, 32768]
    ubatches = [512] if quick else [128, 512, 2048]
    grid = [
        Settings(n_ctx=c, n_ubatch=u, flash_attn=fa, type_k=t, type_v=t)
        for c, u, fa, t in itertools.product(ctxs, ubatches, [True, False], ["f16", "q8_0"])
    ]
    return [*grid, Settings(n_ctx=8192, n_seq=4, swa_full=True)]


def run(
    models: dict[str, Path],
    grid: Iterable[Settings],
    plan_fn: PlanFn | None = None,
) -> tuple[list[Row], dict[str, dict[str, float]]]:
    grid = list(grid)
    rows: list[Row] = []
    timing: dict[str, dict[str, float]] = {}
    for name, path in models.items():
        t0 = time.perf_counter()
        spec = load_model_spec(path)
        t_spec = time.perf_counter() - t0
        t0 = time.perf_counter()
        preds = []
        for s in grid:
            preds.append(
                (
                    kv_refusal(spec, s),
                    kv_cache_bytes(spec, s).total_bytes,
                    compute_buffer_bytes(spec, s),
                    output_buffer_bytes(spec, s),
                )
            )
        t_model = (time.perf_counter() - t0) / len(grid)
        timing[name] = {"spec_ms": t_spec * 1e3, "memory_model_ms": t_model * 1e3}
        if plan_fn is not None:
            for key, exact in (("plan_ms", False), ("exact_first_ms", True), ("exact_ms", True)):
                t0 = time.perf_counter()
                plan_fn(path, exact)
                timing[name][key] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        for s, (refusal, kv, comp, out) in zip(grid, preds, strict=True):
            m = measure_allocations(path, s)
            g = graph_compute(path, s)
            exact_bytes = g.total_bytes if g is not None and not g.refused else None
            rows.append(
                Row(
                    name, s, kv, m.kv_bytes, comp, m.compute_total, out, m.output_bytes, refusal, m.refused, exact_bytes
                )
            )
        timing[name]["llama_dry_run_ms"] = (time.perf_counter() - t0) / len(grid) * 1e3
    return rows, timing


def _describe(s: Settings) -> str:
    kv = s.type_k if s.type_k == s.type_v else f"{s.type_k}/{s.type_v}"
    extra = f" seq{s.n_seq}" + (" swa_full" if s.swa_full else "") if s.n_seq > 1 else ""
    return f"ctx={s.n_ctx:<6} ub={s.n_ubatch:<5} fa={'on ' if s.flash_attn else 'off'} {kv:<5}{extra}"


def print_report(rows: list[Row], timing: dict[str, dict[str, float]]) -> float:
    print(
        f"{'model':<18} {'settings':<42} {'KV pred':>10} {'err B':>7} {'compute pred':>12} {'meas':>10} "
        f"{'err':>7} {'total err':>9} {'exact err':>9}"
    )
    for r in rows:
        if r.refused_meas or r.refused_pred:
            same = "ok" if r.refused_meas == r.refused_pred else "MISMATCH"
            print(f"{r.model:<18} {_describe(r.settings):<42} refused ({same}): {r.refused_meas}")
            continue
        print(
            f"{r.model:<18} {_describe(r.settings):<42} {format_bytes(r.kv_pred):>10} {r.kv_pred - r.kv_meas:>+7d} "
            f"{format_bytes(r.compute_pred):>12} {format_bytes(r.compute_meas):>10} "
            f"{Row.pct(r.compute_pred, r.compute_meas):>+6.1f}% {Row.pct(r.total_pred, r.total_meas):>+8.2f}% "
            + (f"{Row.pct(r.compute_exact, r.compute_meas):>+8.2f}%" if r.compute_exact is not None else f"{'-':>9}")
        )
    print()
    print(
        f"{'model':<18} {'spec ms':>8} {'memory model ms/setting':>24} {'plan ms':>8} {'exact 1st':>9} "
        f"{'exact ms':>8} {'llama.cpp dry run ms':>21}"
    )
    for name, t in timing.items():
        plans = "".join(
            f"{t[k]:{w}.1f}" if k in t else f"{'-':>{w}}"
            for k, w in (("plan_ms", 9), ("exact_first_ms", 10), ("exact_ms", 9))
        )
        print(f"{name:<18} {t['spec_ms']:8.1f} {t['memory_model_ms']:24.3f}{plans} {t['llama_dry_run_ms']:21.1f}")
    ok = [r for r in rows if not (r.refused_meas or r.refused_pred)]
    mismatched = [r for r in rows if r.refused_meas != r.refused_pred]
    print()
    print("worst errors per model (compute %, KV bytes vs the 2-decimal MiB print):")
    worst_compute = 0.0
    for name in timing:
        mine = [r for r in ok if r.model == name]
        if not mine:
            continue
        wc = max(mine, key=lambda r: abs(Row.pct(r.compute_pred, r.compute_meas)))
        wk = max(mine, key=lambda r: abs(r.kv_pred - r.kv_meas))
        worst_compute = max(worst_compute, abs(Row.pct(wc.compute_pred, wc.compute_meas)))
        print(
            f"  {name:<18} compute {Row.pct(wc.compute_pred, wc.compute_meas):+6.1f}% ({_describe(wc.settings)})"
            f"   KV {wk.kv_pred - wk.kv_meas:+d} B"
        )
    if mismatched:
        print(f"REFUSAL MISMATCHES: {len(mismatched)}")
    wr = max(ok, key=lambda r: abs(Row.pct(r.compute_pred, r.compute_meas)))
    wt = max(ok, key=lambda r: abs(Row.pct(r.total_pred, r.total_meas)))
    wk = max(ok, key=lambda r: abs(r.kv_pred - r.kv_meas))
    print(
        f"WORST KV error: {wk.kv_pred - wk.kv_meas:+d} bytes ({wk.model}, {_describe(wk.settings)}); "
        f"print resolution is +-5243 bytes per cache line"
    )
    print(
        f"WORST total (KV+compute+output) error: {Row.pct(wt.total_pred, wt.total_meas):+.2f}% "
        f"({wt.model}, {_describe(wt.settings)})"
    )
    print(
        f"WORST compute error (formula): {Row.pct(wr.compute_pred, wr.compute_meas):+.1f}% "
        f"({wr.model}, {_describe(wr.settings)}: predicted {format_bytes(wr.compute_pred)}, "
        f"llama.cpp {format_bytes(wr.compute_meas)})"
    )
    exact = [r for r in ok if r.compute_exact is not None]
    if exact:
        we = max(exact, key=lambda r: abs(Row.pct(r.compute_exact or 0, r.compute_meas)))
        print(
            f"WORST compute error (exact plans, {len(exact)} of {len(ok)} settings): "
            f"{Row.pct(we.compute_exact or 0, we.compute_meas):+.2f}% ({we.model}, {_describe(we.settings)})"
        )
    return worst_compute


# --------------------------------------------------------------------------------------------
# re-fitting compute.FIT (how the constants were obtained)


def _random_shape(rng: random.Random, arch: str) -> dict[str, Any]:
    e = rng.choice([576, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120])
    d = rng.choice([64, 128, 128])
    h = max(1, int(e * rng.choice([1, 1, 1, 1.5, 2]) // d))
    kw: dict[str, Any] = dict(
        n_layer=rng.choice([2, 3]),
        n_embd=e,
        n_head=h,
        head_dim=d,
        n_head_kv=rng.choice([x for x in (1, 2, 4, 8, 16) if x <= h and h % x == 0]),
        n_ff=int(e * rng.choice([2.7, 3.5, 4, 5.4]) // 64 * 64),
        n_vocab=rng.choice([32000, 49152, 128256, 151936, 201088, 262144]),
        tied=rng.random() < 0.5,
    )
    if arch in ("llama", "mistral3", "gpt-oss"):
        kw["rope_dim"] = d
    if arch in ("qwen2", "phi3"):
        kw.update(head_dim=0, n_embd=h * d, rope_dim=d if arch == "phi3" else 0)
    if arch in ("gemma2", "gemma3", "gpt-oss"):
        kw.update(sliding_window=rng.choice([64, 128, 512, 1024]), n_layer=rng.choice([2, 4, 6, 7]))
    if arch in ("qwen3moe", "gpt-oss", "deepseek2"):
        ne = rng.choice([8, 32, 64, 128])
        kw.update(
            n_expert=ne,
            n_expert_used=rng.choice([u for u in (1, 2, 4, 8) if u <= ne]),
            n_ff_expert=max(64, int(e * rng.choice([0.25, 0.5, 1]) // 64 * 64)),
        )
    if arch == "deepseek2":
        rope, nope = rng.choice([32, 64]), rng.choice([32, 64, 128])
        kw.update(
            head_dim=0,
            n_head_kv=1,
            kv_lora_rank=rng.choice([256, 512]),
            rope_dim=rope,
            head_dim_k_mla=rope + nope,
            head_dim_v_mla=rng.choice([32, 64, 128]),
            q_lora_rank=rng.choice([64, 256, 1536]),
            n_dense_lead=1,
            n_expert_shared=rng.choice([1, 2]),
        )
    return kw


def refit(folder: Path, n_shapes: int = 10, seed: int = 21) -> None:
    """Measure random realistic shapes of every architecture and re-fit compute.FIT per family."""
    import numpy as np
    from scipy.optimize import minimize

    rng = random.Random(seed)
    samples: list[tuple[compute_model.ComputeTerms, int, float]] = []  # terms, measured, weight

    def measure(path: Path, weight: float) -> None:
        spec = load_model_spec(path)
        for c, u, fa, t in itertools.product(
            [512, 2048, 8192, 32768], [128, 512, 2048], [False, True], ["f16", "q8_0"]
        ):
            s = Settings(n_ctx=c, n_ubatch=u, flash_attn=fa, type_k=t, type_v=t if fa else "f16")
            if kv_refusal(spec, s):
                continue
            m = measure_allocations(path, s)
            samples.append((compute_model.compute_terms(spec, s), m.compute_total, weight))

    for arch in ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mistral3", "qwen3moe", "gpt-oss", "deepseek2"):
        for _ in range(n_shapes):
            measure(write_header_only(folder / "fit.gguf", arch, recipe="F16", **_random_shape(rng, arch)), 1.0)
        print(f"measured {arch}", file=sys.stderr)
    # Released shapes, the ones users run, weigh 3x.
    for key in BIG:
        measure(write_header_only(folder / f"{key}.gguf", key), 3.0)
    emb = embedded_model_path()
    if emb is not None:
        measure(emb, 3.0)
    print("measured released shapes", file=sys.stderr)
    for family in ("dense", "moe", "mla"):
        mine = [(t, m, w) for t, m, w in samples if t.family == family]
        cols = np.array(
            [
                [
                    t.n_tokens,
                    t.n_vocab * t.n_outputs,
                    t.mask_bytes / 4,
                    t.kq_bytes / 4,
                    t.fixed_bytes / 4,
                    float(t.flash_attn),
                    *t.features(),
                ]
                for t, _, _ in mine
            ]
        )
        meas = np.array([m for _, m, _ in mine], float)
        weight = np.array([w for _, _, w in mine], float)
        n_tok, logits, mask, kq, fixed, fa = cols[:, :6].T
        feats = cols[:, 6:].T

        # compute.graph_peak_bytes, vectorised: the heaviest of output, attention and FFN.
        def pred(
            x: Any,
            n_tok: Any = n_tok,
            logits: Any = logits,
            mask: Any = mask,
            kq: Any = kq,
            fixed: Any = fixed,
            fa: Any = fa,
            feats: Any = feats,
        ) -> Any:
            out = logits + n_tok * x[0] * feats[0]
            attn = np.where(fa > 0, n_tok * (mask + x[8:15] @ feats), n_tok * (mask + kq + x[1:8] @ feats) + fixed)
            return 4 * np.maximum(np.maximum(out, attn), n_tok * (x[15:22] @ feats))

        def objective(x: Any, k: float, pred: Any = pred, meas: Any = meas, weight: Any = weight) -> float:
            e = (pred(x) - meas) / meas
            e = np.where(e < 0, -1.3 * e, e)  # under-prediction weighs more
            return float(np.log(np.average(np.exp(k * e), weights=weight)) / k + 0.5 * np.average(e, weights=weight))

        flat = [
            *compute_model.FIT[family]["out"],
            *compute_model.FIT[family]["attn"],
            *compute_model.FIT[family]["fa"],
            *compute_model.FIT[family]["ffn"],
        ]
        x = np.array(flat, float)
        for k in (10.0, 30.0, 60.0):
            x = minimize(objective, x, args=(k,), method="Powell", bounds=[(0, 10)] * 22).x
        x = np.round(x * 4) / 4
        e = (pred(x) - meas) / meas
        print(
            f"{family}: n={len(meas)} min {e.min() * 100:+.1f}% max {e.max() * 100:+.1f}% "
            f"mean |e| {np.abs(e).mean() * 100:.1f}%"
        )
        print(json.dumps({"out": [x[0]], "attn": x[1:8].tolist(), "fa": x[8:15].tolist(), "ffn": x[15:22].tolist()}))


def main(argv: list[str] | None = None, plan_fn: PlanFn | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer settings per model")
    ap.add_argument("--fit", action="store_true", help="re-fit the compute model's constants (needs scipy)")
    ap.add_argument("--moe", action="store_true", help="MoE placement vs llama.cpp's --fit, as a Markdown table")
    ap.add_argument(
        "--write", type=Path, metavar="PAGE", help="with --moe: put the table into PAGE (docs/moe-placement.md)"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vrampilot-bench-") as tmp:
        folder = Path(tmp)
        if args.fit:
            refit(folder)
            return 0
        if args.moe:
            report = moe_report(moe_rows(folder))
            print(report)
            if args.write is not None:
                write_moe_table(args.write, report)
            return 0
        t0 = time.perf_counter()
        rows, timing = run(build_models(folder), settings_grid(args.quick), plan_fn=plan_fn)
        worst = print_report(rows, timing)
        print(f"({len(rows)} configurations in {time.perf_counter() - t0:.1f} s)")
    return 0 if worst < 100 else 1


# --------------------------------------------------------------------------------------------
# MoE expert placement: our plan against llama.cpp's own --fit

MOE_VRAM_GIB = (8, 12, 16, 24)
MOE_CTXS = (8192, 32768)
MOE_HOST_RAM_GIB = 192  # every MoE file of the set (V4-Flash: 145 GiB) fits in host memory
BASELINE_MODEL = "llama-3.1-8b"  # testkit BIG, Q4_K_M: the dense plan every plan time is divided by
_FIT_LINE = re.compile(r"^VRAMPILOT_FIT status=(-?\d+) n_gpu_layers=(-?\d+) n_ctx=(\d+)$")
_FIT_OVERRIDE = re.compile(r"^VRAMPILOT_FIT override (.*)=([^=]*)$")
_FIT_USED = re.compile(r"common_params_fit_impl:\s+- RPC0 .*?(\d+) MiB used")
_FIT_FAILED = re.compile(r"common_fit_params: (?:failed to fit|encountered an error)[^:]*: (.*)$")


@dataclass(frozen=True)
class FitChoice:
    """What llama.cpp's common_fit_params chose for one offload device."""

    n_gpu_layers: int
    cpu_patterns: tuple[str, ...]  # the -ot PATTERN=CPU overrides it set, in its order
    device_mib: int | None  # its own projection of the device's use (None: it changed nothing)
    fit_ms: float  # the llama-server process, start to exit after the fit


@dataclass(frozen=True)
class Costed:
    """Settings costed with our memory and speed model."""

    settings: Settings
    fits: bool
    device_bytes: int  # weights, KV, compute and output on the GPU; the device margin not counted
    decode_tps: float
    experts_in_ram: int  # MoE layers with routed-expert bytes in host memory
    moe_layers: int


@dataclass(frozen=True)
class MoeRow:
    model: str
    vram_gib: int
    n_ctx: int
    ours: Costed
    plan_ms: float
    baseline_ms: float
    fit: FitChoice | None
    fit_costed: Costed | None
    fit_why: str = ""  # why there is no fit (fit is None)


class LlamaFit:
    """llama.cpp's --fit through the bundled llama-server, one offload device of a chosen size
    (see the module docstring); `why_not` says why it cannot run here."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.why_not = ""
        self.shim: Path | None = None
        self.rpc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.env: dict[str, str] = {}

    def __enter__(self) -> LlamaFit:
        from vrampilot.server.binaries import ToolMissingError, tool_env, tool_path

        if not sys.platform.startswith("linux"):
            self.why_not = "needs Linux (an LD_PRELOAD shim reads the fit)"
            return self
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            self.why_not = "no C compiler to build bench/fit_shim.c"
            return self
        try:
            self.server, rpc_server = tool_path("llama-server"), tool_path("ggml-rpc-server")
        except ToolMissingError as exc:
            self.why_not = str(exc)
            return self
        shim = self.folder / "fit_shim.so"
        built = subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(ROOT / "bench" / "fit_shim.c"), "-ldl"],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            self.why_not = f"bench/fit_shim.c did not build: {built.stderr.strip().splitlines()[-1:]}"
            return self
        self.shim = shim
        self.env = tool_env()
        port = _free_port()
        self.endpoint = f"127.0.0.1:{port}"
        self.rpc = subprocess.Popen(
            [str(rpc_server), "-H", "127.0.0.1", "-p", str(port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not _wait_for_port(port, 15.0):
            self.why_not = "the bundled ggml-rpc-server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rpc is not None:
            self.rpc.terminate()
            try:
                self.rpc.wait(10)
            except subprocess.TimeoutExpired:
                self.rpc.kill()
                self.rpc.wait()

    def choose(self, path: Path, vram_bytes: int, margin_bytes: int, n_ctx: int) -> FitChoice | str:
        """llama.cpp's choice for `path` on a device of `vram_bytes` that keeps `margin_bytes`
        free (--fit-target, whole MiB) at `n_ctx`, or why none."""
        if self.why_not or self.shim is None:
            return self.why_not
        argv = [
            str(self.server),
            *("-m", str(path), "--rpc", self.endpoint, "-dev", "RPC0"),
            *("--fit", "on", "--fit-target", str(margin_bytes // 2**20), "-c", str(n_ctx), "-np", "1", "-fa", "on"),
            *("-b", "2048", "-ub", "512", "-lv", "4", "--host", "127.0.0.1", "--port", str(_free_port())),
        ]
        env = {**self.env, "LD_PRELOAD": str(self.shim), "VRAMPILOT_FIT_DEVICE_BYTES": str(vram_bytes)}
        t0 = time.perf_counter()
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace", timeout=300)
        except subprocess.TimeoutExpired:
            return "llama-server did not finish its fit in 300 s"
        fit_ms = (time.perf_counter() - t0) * 1e3
        return parse_fit_log(done.stdout + "\n" + done.stderr, fit_ms)


def parse_fit_log(log: str, fit_ms: float) -> FitChoice | str:
    """The shim's lines (and llama.cpp's own projection) from a llama-server log, or why none."""
    status = n_gpu_layers = None
    patterns: list[str] = []
    used: int | None = None
    failed = ""
    ended = False
    for line in log.splitlines():
        line = line.strip()
        if line == "VRAMPILOT_FIT end":
            ended = True
        elif m := _FIT_LINE.match(line):
            status, n_gpu_layers = int(m.group(1)), int(m.group(2))
        elif m := _FIT_OVERRIDE.match(line):
            if m.group(2) != "CPU":
                return f"llama.cpp overrode {m.group(1)} to {m.group(2)}, not the CPU"
            patterns.append(m.group(1))
        elif m := _FIT_USED.search(line):
            used = int(m.group(1))
        elif m := _FIT_FAILED.search(line):
            failed = m.group(1)
    if status is None or n_gpu_layers is None:
        tail = [ln for ln in log.splitlines() if " E " in ln or "error" in ln.lower()][-1:]
        return f"llama-server gave no fit ({tail[0].strip() if tail else 'no log line'})"
    if status != 0:
        return f"llama.cpp's fit failed: {failed or f'status {status}'}"
    if not ended:
        return "llama-server's fit report was cut short"
    return FitChoice(n_gpu_layers, tuple(patterns), used, fit_ms)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def cost(spec: Any, target: Any, settings: Settings) -> Costed:
    """`settings` through our memory and speed model (the numbers a plan reports for them)."""
    from vrampilot.planner.memory.breakdown import layer_placement, memory_breakdown
    from vrampilot.planner.memory.placement import experts_in_ram
    from vrampilot.planner.speed_model.predict import predict_speed

    mem = memory_breakdown(spec, settings, target)
    speed = predict_speed(spec, settings, target, mem)
    on_gpu, _ = layer_placement(spec, settings.n_gpu_layers)
    in_ram, moe_layers = experts_in_ram(spec, settings, on_gpu)
    fits = all(c.total_bytes <= g.memory_budget_bytes for c, g in zip(mem.per_device, target.gpus, strict=False))
    fits = fits and mem.host.total_bytes <= target.host_ram_bytes
    used = mem.device.total_bytes - mem.device.margin_bytes
    return Costed(settings, fits, used, speed.decode_tps, in_ram, moe_layers)


def moe_rows(
    folder: Path,
    keys: Iterable[str] | None = None,
    vram_gib: Iterable[int] = MOE_VRAM_GIB,
    ctxs: Iterable[int] = MOE_CTXS,
    *,
    with_fit: bool = True,
) -> list[MoeRow]:
    """Plan every MoE shape on every profile and context, with llama.cpp's fit beside it."""
    from testkit.machines import cpu_machine
    from testkit.real_shapes import MOE_FILES, write_real
    from vrampilot.planner.errors import PlanError
    from vrampilot.planner.memory.placement import unmatched_patterns
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.units import GIB

    machine = cpu_machine(ram_gib=MOE_HOST_RAM_GIB)
    targets = {g: resolve_target(TargetRequest(vram_bytes=g * GIB), machine) for g in vram_gib}
    ctxs = tuple(ctxs)
    # The baseline: a dense model's exact plan, timed here, median of five after the header loads.
    dense = load_model_spec(write_header_only(folder / f"{BASELINE_MODEL}.gguf", BASELINE_MODEL))
    first = next(iter(targets.values()))
    plan(dense, first, Pins(n_ctx=ctxs[0]), exact=True)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        plan(dense, first, Pins(n_ctx=ctxs[0]), exact=True)
        times.append((time.perf_counter() - t0) * 1e3)
    baseline_ms = statistics.median(times)

    rows: list[MoeRow] = []
    with LlamaFit(folder) as fitter:
        if not with_fit:
            fitter.why_not = "not asked for"
        for key in keys if keys is not None else MOE_FILES:
            path = write_real(key, folder)
            spec = load_model_spec(path)
            plan(spec, first, Pins(n_ctx=ctxs[0]), exact=True)  # loads the header: later plans are timed
            for g, target in targets.items():
                for ctx in ctxs:
                    t0 = time.perf_counter()
                    p = plan(spec, target, Pins(n_ctx=ctx), exact=True)
                    plan_ms = (time.perf_counter() - t0) * 1e3
                    # The plan's own numbers (its compute buffer is llama.cpp's), the expert count ours.
                    ours = replace(
                        cost(spec, target, p.settings),
                        fits=p.fits,
                        device_bytes=p.memory.device.total_bytes - p.memory.device.margin_bytes,
                        decode_tps=p.speed.decode_tps,
                    )
                    # llama.cpp keeps the same margin free that our plan reserves on the device
                    # (its own default --fit-target is 1024 MiB, ours DEFAULT_DEVICE_MARGIN_BYTES).
                    margin = target.gpus[0].margin_bytes(target.device_margin_bytes)
                    choice = fitter.choose(path, g * GIB, margin, ctx)
                    fit_costed = None
                    if isinstance(choice, FitChoice):
                        ngl = choice.n_gpu_layers if choice.n_gpu_layers >= 0 else spec.n_layer + 1
                        # The fit's settings, every one pinned, planned exactly as ours is (its
                        # compute buffer asked of llama.cpp's dry run, not the formula's bound).
                        pins = Pins(
                            n_ctx=ctx,
                            type_k="f16",
                            type_v="f16",
                            n_gpu_layers=ngl,
                            flash_attn=True,
                            n_batch=2048,
                            n_ubatch=512,
                            n_cpu_moe=0,
                            # The fit also names the layer past the last (blk.N), which matches
                            # nothing (and which our planner refuses from a user as a typo).
                            cpu_tensor_patterns=tuple(
                                x for x in choice.cpu_patterns if x not in unmatched_patterns(spec, (x,))
                            ),
                        )
                        try:
                            fp = plan(spec, target, pins, exact=True, alternatives=False)
                            fit_costed = replace(
                                cost(spec, target, fp.settings),
                                fits=fp.fits,
                                device_bytes=fp.memory.device.total_bytes - fp.memory.device.margin_bytes,
                                decode_tps=fp.speed.decode_tps,
                            )
                        except PlanError:
                            # Past the budget by our exact count: the pins are refused, so cost
                            # the same settings with the formula (shown "over").
                            unpinned = plan(
                                spec,
                                target,
                                replace(pins, n_cpu_moe=None, cpu_tensor_patterns=None),
                                alternatives=False,
                            ).settings
                            fit_costed = cost(
                                spec,
                                target,
                                unpinned.with_(
                                    n_gpu_layers=ngl,
                                    n_batch=2048,
                                    n_ubatch=512,
                                    n_cpu_moe=0,
                                    cpu_tensor_patterns=pins.cpu_tensor_patterns or (),
                                ),
                            )
                    rows.append(
                        MoeRow(
                            key,
                            g,
                            ctx,
                            ours,
                            plan_ms,
                            baseline_ms,
                            choice if isinstance(choice, FitChoice) else None,
                            fit_costed,
                            choice if isinstance(choice, str) else "",
                        )
                    )
    return rows


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}"


def moe_report(rows: list[MoeRow]) -> str:
    """The rows as Markdown: one line per model, GPU size and context."""
    out = [
        "| model | GPU | ctx | ours: -ngl | --n-cpu-moe | K/V | experts in RAM | GPU GiB | decode t/s "
        "| plan ms (x dense) | --fit: -ngl | experts in RAM | GPU GiB (ours / llama.cpp) | decode t/s "
        "| ours / fit | fit ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        o = r.ours
        s = o.settings
        kv = s.type_k if s.type_k == s.type_v else f"{s.type_k}/{s.type_v}"
        mine = (
            f"| {r.model} | {r.vram_gib} GiB | {r.n_ctx // 1024}K | {s.n_gpu_layers} | {s.n_cpu_moe} | {kv} "
            f"| {o.experts_in_ram}/{o.moe_layers} | {_gib(o.device_bytes)}{'' if o.fits else ' (no fit)'} "
            f"| {o.decode_tps:.1f} | {r.plan_ms:.0f} ({r.plan_ms / r.baseline_ms:.1f}x) "
        )
        if r.fit is None or r.fit_costed is None:
            out.append(mine + f"| n/a: {r.fit_why} | | | | | |")
            continue
        f = r.fit_costed
        theirs = f"{r.fit.device_mib / 1024:.1f}" if r.fit.device_mib is not None else "-"
        ratio = f"{o.decode_tps / f.decode_tps:.2f}" if f.decode_tps > 0 else "-"
        out.append(
            mine + f"| {f.settings.n_gpu_layers} | {f.experts_in_ram}/{f.moe_layers} "
            f"| {_gib(f.device_bytes)}{'' if f.fits else ' (over)'} / {theirs} | {f.decode_tps:.1f} | {ratio} "
            f"| {r.fit.fit_ms:.0f} |"
        )
    baseline = rows[0].baseline_ms if rows else 0.0
    out.append("")
    out.append(
        f"Plan times are exact plans (as the CLI plans) after the file's header is loaded; x dense: "
        f"divided by a dense {BASELINE_MODEL} Q4_K_M plan timed in the same run ({baseline:.0f} ms). "
        f"Host: {MOE_HOST_RAM_GIB} GiB RAM, 8 cores; GPUs hypothetical (a --vram target). "
        "GPU GiB: weights, KV, compute and output buffers on the GPU, without the 1 GiB margin both keep free "
        "(llama.cpp: --fit-target 1024); (over): our memory model puts the fit's settings past the budget. "
        "--fit: llama.cpp's common_fit_params with f16 K/V; its decode t/s is our speed model's for its settings."
    )
    return "\n".join(out)


MOE_TABLE_START = "<!-- moe-table:start -->"
MOE_TABLE_END = "<!-- moe-table:end -->"


def measured_on() -> str:
    """The commit the bench runs on, and whether the tree differs from it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return (head or "unknown") + (" with uncommitted changes" if dirty.stdout.strip() else "")


def write_moe_table(page: Path, report: str) -> None:
    """Replace what stands between the page's moe-table markers with `report`, stamped with the
    commit and the date: the page is regenerated by the one command, never edited by hand."""
    text = page.read_text(encoding="utf-8")
    start, end = text.find(MOE_TABLE_START), text.find(MOE_TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{page} has no {MOE_TABLE_START} ... {MOE_TABLE_END} section to fill")
    stamp = (
        f"Measured on commit {measured_on()}, {time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"by `python bench/planner.py --moe --write {page.as_posix()}`."
    )
    body = f"{MOE_TABLE_START}\n{stamp}\n\n{report}\n"
    page.write_text(text[:start] + body + text[end:], encoding="utf-8")


def plan_for_8gb(path: Path, exact: bool) -> None:
    """The full planner (search, reasons, alternatives) for a hypothetical 8 GiB GPU."""
    from testkit.machines import cpu_machine
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.units import GIB

    plan(load_model_spec(path), resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine()), exact=exact)


if __name__ == "__main__":
    sys.exit(main(plan_fn=plan_for_8gb))
