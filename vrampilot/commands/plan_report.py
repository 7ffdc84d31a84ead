"""A Plan as JSON-safe data (the `plan --json` contract) and as a readable table."""

from __future__ import annotations

from typing import Any

from vrampilot.gguf import file_name_line
from vrampilot.planner.calibration import last_reply_for
from vrampilot.planner.memory.breakdown import Components, MemoryBreakdown
from vrampilot.planner.memory.placement import experts_in_ram
from vrampilot.planner.plan import Plan
from vrampilot.planner.search.cache_table import CacheTable, tokens_label
from vrampilot.planner.search.explain import (
    REASON,
    WARNING,
    alternative_rows,
    cache_source_text,
    last_measured,
    prompt_tokens,
    why_lines,
)
from vrampilot.planner.search.reasons import placement_text
from vrampilot.planner.speed_model.predict import backend_key
from vrampilot.server.binaries import PORTABLE_NOTE, exported_command
from vrampilot.speed import encode_record
from vrampilot.units import format_bytes

_COMPONENTS = ("weights", "kv", "compute", "output", "margin", "projector", "total")


def memory_to_dict(mem: MemoryBreakdown) -> dict[str, dict[str, int]]:
    dev, host = mem.device.as_dict(), mem.host.as_dict()
    return {c: {"device": dev[c], "host": host[c]} for c in _COMPONENTS}


def server_host_to_dict(plan: Plan) -> dict[str, Any] | None:
    """llama-server's own host memory (prompt cache, checkpoints, the process) and the host's
    total when the plan runs in llama-server."""
    server = plan.memory.server
    if server is None:
        return None
    return {**server.as_dict(), "host_total": plan.memory.served_host_bytes}


def server_host_lines(plan: Plan) -> list[str]:
    """The memory table's llama-server rows: what it adds on the host, and the host's total then."""
    server = plan.memory.server
    if server is None:
        return []
    ckpt = (
        f", {server.ctx_checkpoints} checkpoints of {format_bytes(server.checkpoint_bytes)} per slot "
        f"(--ctx-checkpoints {server.ctx_checkpoints})"
        if server.checkpoint_bytes
        else ""
    )
    return [
        f"  llama-server adds on the host: prompt cache {format_bytes(server.cache_bytes)} "
        f"(--cache-ram {server.cache_ram_mib}){ckpt}, the process {format_bytes(server.process_bytes)}",
        f"  host under llama-server: {format_bytes(plan.memory.served_host_bytes)} of {format_bytes(plan.host_budget_bytes)}",
    ]


def devices_to_dict(plan: Plan) -> list[dict[str, Any]]:
    """Each offload device: what it is, its budget, the layers it holds and their bytes."""
    mem = plan.memory
    out = []
    for d, (g, c) in enumerate(zip(plan.target.gpus, mem.per_device, strict=False)):
        out.append(
            {
                "name": g.name,
                "kind": g.kind,
                "llama_name": g.llama_name,
                "endpoint": g.endpoint,
                "budget_bytes": g.memory_budget_bytes,
                "budget_pinned": g.budget_pinned,
                "layers": list(mem.device_layers(d)),
                "output_layer": mem.output_device == d,
                "memory": c.as_dict(),
                "fits": c.total_bytes <= g.memory_budget_bytes,
            }
        )
    return out


def placement_to_dict(plan: Plan) -> dict[str, Any]:
    """Where the model runs: GPU layers, and a MoE file's routed experts (n_cpu_moe: the leading
    layers whose experts stay in RAM; experts_in_ram_layers counts those of CPU layers too)."""
    in_ram, n_moe = experts_in_ram(plan.spec, plan.settings, plan.memory.gpu_layers)
    return {
        "n_gpu_layers": plan.settings.n_gpu_layers,
        "n_cpu_moe": plan.settings.n_cpu_moe,
        "experts_in_ram_layers": in_ram,
        "moe_layers": n_moe,
        "text": placement_text(plan.spec, plan.settings, plan.memory),
    }


def plan_to_dict(plan: Plan, *, shell: str = "bash") -> dict[str, Any]:
    return {
        "model": str(plan.spec.path),
        "target": plan.target.description,
        "settings": plan.settings.to_dict(),
        "placement": placement_to_dict(plan),
        "memory": memory_to_dict(plan.memory),
        "devices": devices_to_dict(plan),
        "projector": projector_to_dict(plan),
        "compute_source": plan.compute_source,
        "kv_source": plan.kv_source,
        "kv_source_text": cache_source_text(plan),
        "budget": {"device_bytes": plan.device_budget_bytes, "host_bytes": plan.host_budget_bytes},
        "context_budget": plan.context_budget.as_dict(),
        "server_host": server_host_to_dict(plan),
        "fits": plan.fits,
        "speed": _speed_dict(plan),
        "reasons": list(plan.reasons),
        "warnings": list(plan.warnings),
        "refused": plan.refused,
        "suggestion": plan.suggestion,
        "pinned": sorted(plan.pins.pinned()),
        "alternatives": [
            {
                "label": a.label,
                "settings": a.settings.to_dict(),
                "memory_total": a.memory_total_bytes,
                "fits": a.fits,
                "speed": a.speed.as_dict(),
                "refused": a.refused,
            }
            for a in plan.alternatives
        ],
        "llama_server": exported_command(plan.spec.path, plan.settings, shell, elsewhere=plan.target.elsewhere),
        "draft": draft_to_dict(plan),
    }


def draft_to_dict(plan: Plan) -> dict[str, Any] | None:
    """The plan's speculative decoding: the draft's bytes per device and the speed-up predicted."""
    d = plan.draft
    if d is None:
        return None
    return {
        "kind": d.kind,
        "model": str(d.spec.path) if d.spec is not None else None,
        "device": d.device,
        "n_draft": d.n_draft,
        "bytes_by_device": d.bytes_by_device(),
        "memory": memory_to_dict(d.memory) if d.memory is not None else None,
        "acceptance": round(d.acceptance.p, 4),
        "acceptance_measured": d.acceptance.measured,
        "acceptance_replies": d.acceptance.replies,
        "predicted_speedup": round(d.speedup, 3),
        "decode_tps": round(d.decode_tps, 2),
        "draft_tps": round(d.draft_tps, 2),
    }


def _speed_dict(plan: Plan) -> dict[str, Any]:
    """The headline figures, what corrected them, where they come from, and the last measured reply."""
    sp = plan.speed
    probe = plan.target.host_probe
    last = last_reply_for(plan)
    return {
        **sp.as_dict(),
        "prompt_tokens": prompt_tokens(plan),
        "backend": backend_key(plan.target, plan.settings),
        "host_rates": f"measured {probe.measured_at}" if probe is not None else "assumed",
        "gpu_rates": "assumed" if plan.target.has_gpu else None,
        "calibration": {
            "replies": sp.calibration_replies,
            "model": sp.calibration_model or None,  # whose replies: this model's own, or None for every model's
            "decode_factor": round(sp.decode_factor, 4),
            "prefill_factor": round(sp.prefill_factor, 4),
        },
        "last_measured": encode_record(last) if last is not None else None,
    }


def _bar(parts: Components, budget: int, width: int = 40) -> str:
    """A text bar: W weights, K KV, C compute, O output, M margin, P vision projector, . free."""
    if budget <= 0:
        return ""
    scale = width / max(budget, parts.total_bytes)
    cells = ""
    for ch, n in (
        ("W", parts.weights_bytes),
        ("K", parts.kv_bytes),
        ("C", parts.compute_bytes),
        ("O", parts.output_bytes),
        ("M", parts.margin_bytes),
        ("P", parts.projector_bytes),
    ):
        cells += ch * round(n * scale)
    cells = cells[:width] if parts.total_bytes <= budget else cells
    return "[" + cells + "." * max(0, width - len(cells)) + "]"


def format_plan(plan: Plan) -> str:
    s = plan.settings
    lines = [
        f"Model   {plan.spec.display_name} ({file_name_line(plan.spec.path)})",
        f"Target  {plan.target.description}",
        "",
    ]
    rows = [
        ("context", str(s.n_ctx) + (f" ({split})" if (split := plan.context_budget.text()) else "")),
        ("K / V cache", f"{s.type_k} / {s.type_v}"),
        ("GPU layers", f"{s.n_gpu_layers} of {plan.spec.n_layer + 1}" if plan.target.has_gpu else "0 (CPU only)"),
        ("batch / ubatch", f"{s.n_batch} / {s.n_ubatch}"),
        ("threads / batch threads", f"{s.n_threads} / {s.n_threads_batch}"),
        ("flash attention", "on" if s.flash_attn else "off"),
    ]
    if plan.spec.has_swa:
        rows.append(("swa-full", "on" if s.swa_full else "off"))
    if plan.target.has_gpu and plan.spec.layer_expert_bytes:  # a dense model's GPU layers say it all
        moe = f" (--n-cpu-moe {s.n_cpu_moe})" if s.n_cpu_moe else ""
        rows.insert(3, ("placement", placement_text(plan.spec, s, plan.memory) + moe))
    pinned = plan.pins.pinned()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        mark = " (pinned)" if _row_field(k) & set(pinned) else ""
        lines.append(f"  {k:<{width}}  {v}{mark}")
    lines.append("")
    legend = "W weights, K KV cache, C compute, O output, M margin"
    if plan.memory.projector is not None:
        legend += ", P vision projector (in the totals)"
    lines.append(f"Memory ({legend})")
    header = f"  {'':<7}{'weights':>11}{'KV':>11}{'compute':>11}{'output':>11}{'margin':>11}{'total':>11}  of"
    lines.append(header)
    gpus = plan.target.gpus
    if len(plan.memory.per_device) > 1 or any(g.kind == "rpc" for g in gpus):
        sides = [
            (g.llama_name or f"dev{i}", c, g.memory_budget_bytes)
            for i, (g, c) in enumerate(zip(gpus, plan.memory.per_device, strict=False))
        ]
    else:
        sides = [("GPU", plan.memory.device, plan.device_budget_bytes)] if plan.target.has_gpu else []
    for name, comp, budget in (*sides, ("host", plan.memory.host, plan.host_budget_bytes)):
        vals = "".join(
            f"{format_bytes(v):>11}"
            for v in (
                comp.weights_bytes,
                comp.kv_bytes,
                comp.compute_bytes,
                comp.output_bytes,
                comp.margin_bytes,
                comp.total_bytes,
            )
        )
        lines.append(f"  {name:<7}{vals}  {format_bytes(budget)}")
        lines.append(f"  {'':<7}{_bar(comp, budget)}")
    lines += server_host_lines(plan)
    lines.append(f"  {_compute_source_line(plan)}")
    lines.append(f"  {cache_source_text(plan)}")
    if plan.memory.projector is not None:
        lines.append(f"  {projector_text(plan)}")
    lines.append("")
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines.append(
        f"Verdict {verdict}; predicted {plan.speed.decode_tps:.1f} tokens/s generating, "
        f"{plan.speed.prefill_tps:.0f} tokens/s reading a {prompt_tokens(plan)}-token prompt"
    )
    last = last_measured(plan)
    if last is not None:
        lines.append(
            f"Last measured {last.decode_tps} tokens/s generating (predicted {last.predicted_decode_tps}), "
            f"{last.prefill_tps} reading a {last.prompt_tokens}-token prompt (predicted "
            f"{last.predicted_prefill_tps}), {last.at_utc} UTC"
            + (f"; not learned from: {last.set_aside}" if last.set_aside else "")
        )
    if plan.refused:
        lines.append(f"llama.cpp would refuse these settings: {plan.refused}")
    if plan.suggestion:
        lines.append(f"Suggestion: {plan.suggestion}")  # above the reasons, where it is read first
    lines.append("")
    lines.append("Why")
    marks = {REASON: "-", WARNING: "!"}
    lines += [f"  {marks[w.kind]} {w.text}" for w in why_lines(plan) if w.kind in marks]
    alts = alternative_rows(plan)
    if alts:
        lines.append("")
        # The label column as wide as the longest label (a MoE plan's placements are long).
        w = max(30, *(len(a.label) for a in alts))
        lines.append(f"{'Alternatives':<{w + 2}}{'memory':>12}  verdict   generate (full ctx)   prompt (full ctx)")
        for a in alts:
            lines.append(
                f"  {a.label:<{w}} {format_bytes(a.memory_total_bytes):>11}  {a.verdict:<8} "
                f"{a.speed.decode_tps:6.1f} ({a.speed.decode_tps_full_ctx:5.1f}) tok/s "
                f"{a.speed.prefill_tps:6.0f} ({a.speed.prefill_tps_full_ctx:5.0f}) tok/s"
            )
    lines.append("")
    elsewhere = plan.target.elsewhere
    lines.append(f"llama-server ({PORTABLE_NOTE})" if elsewhere else "llama-server")
    lines.append("  " + exported_command(plan.spec.path, plan.settings, "bash", elsewhere=elsewhere))
    return "\n".join(lines)


def projector_text(plan: Plan) -> str:
    """The vision projector in one line: its bytes, where they go, the tokens an image takes."""
    proj = plan.memory.projector
    if proj is None:
        return ""
    where = (
        "CPU" if proj.device < 0 else (plan.target.gpus[proj.device].llama_name or plan.target.gpus[proj.device].name)
    )
    host = (
        f" (+ {format_bytes(proj.host_compute_bytes)} CPU compute)"
        if proj.device >= 0 and proj.host_compute_bytes
        else ""
    )
    return (
        f"vision projector {proj.spec.path.name} ({proj.spec.projector_type}) on {where}: weights "
        f"{format_bytes(proj.weights_bytes)}, compute {format_bytes(proj.compute_bytes)}{host} ({proj.source}); "
        f"{proj.spec.tokens_text()}"
    )


def projector_to_dict(plan: Plan) -> dict[str, Any] | None:
    proj = plan.memory.projector
    if proj is None:
        return None
    return {
        "path": str(proj.spec.path),
        "projector_type": proj.spec.projector_type,
        "device": proj.device,
        "weights_bytes": proj.weights_bytes,
        "compute_bytes": proj.compute_bytes,
        "host_compute_bytes": proj.host_compute_bytes,
        "compute_source": proj.source,
        "image_tokens": proj.spec.image_tokens,
        "image_tokens_text": proj.spec.tokens_text(),
    }


def _compute_source_line(plan: Plan) -> str:
    if plan.compute_source == "llama.cpp":
        return "compute buffer: llama.cpp's own allocator (dry run of the installed build)"
    if plan.exact:
        return "compute buffer: estimated (llama.cpp could not be asked about this file)"
    return "compute buffer: estimated by the formula (--estimate)"


def _row_field(label: str) -> set[str]:
    return {
        "context": {"n_ctx"},
        "K / V cache": {"type_k", "type_v"},
        "GPU layers": {"n_gpu_layers"},
        "batch / ubatch": {"n_batch", "n_ubatch"},
        "threads / batch threads": {"n_threads", "n_threads_batch"},
        "flash attention": {"flash_attn"},
        "swa-full": {"swa_full"},
        "placement": {"n_cpu_moe", "cpu_experts"},
    }.get(label, set())


def format_cache_table(table: CacheTable) -> str:
    """The cache by part at each context, then the labelled "what if" caches and their assumptions."""
    names = [name for name, _ in table.rows[0].parts] if table.rows else []
    kinds = [name for name, _ in table.rows[0].what_if] if table.rows else []
    head = f"{'tokens':>7}" + "".join(f"{n:>12}" for n in names) + f"{'total':>12}"
    lines = [f"Cache by part (this model, K {table.type_k} / V {table.type_v}, {table.source_text})", head]
    for r in table.rows:
        cells = "".join(f"{format_bytes(b):>12}" for _, b in r.parts)
        lines.append(f"{tokens_label(r.n_ctx):>7}{cells}{format_bytes(r.total_bytes):>12}")
    lines += ["", "What if this model had a plain cache (not this model's cache; same layers, f16 K and V)"]
    lines.append(f"{'tokens':>7}{'this model':>12}" + "".join(f"{k:>12}{'this/' + k:>10}" for k in kinds))
    for r in table.rows:
        cells = "".join(f"{format_bytes(b):>12}{100.0 * r.total_bytes / b if b else 0.0:>9.1f}%" for _, b in r.what_if)
        lines.append(f"{tokens_label(r.n_ctx):>7}{format_bytes(r.total_bytes):>12}{cells}")
    lines += ["Assumptions:"] + [f"  {a}" for a in table.assumptions]
    return "\n".join(lines)
