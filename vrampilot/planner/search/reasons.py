"""Why the plan is what it is: one sentence per setting (pinned, or what the search weighed), then
the outcome. The search calls it once it has chosen; the window and the CLI show the sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from vrampilot.gguf import ModelSpec
from vrampilot.planner.context_budget import context_budget
from vrampilot.planner.memory.breakdown import MemoryBreakdown
from vrampilot.planner.memory.placement import experts_in_ram, no_repack_reason
from vrampilot.planner.plan import DEFAULT_MAX_CTX, DEFAULT_UBATCH, FULL_PRECISION_KV, Pins
from vrampilot.planner.settings import QUANTIZED_KV_TYPES, Settings
from vrampilot.planner.speed_model.basis import speed_basis
from vrampilot.planner.speed_model.predict import HEADLINE_PROMPT_TOKENS, SpeedPrediction, network_share, predict_speed
from vrampilot.planner.target import Target
from vrampilot.units import format_bytes, format_count, format_tokens


def plan_reasons(
    spec: ModelSpec,
    target: Target,
    pins: Pins,
    s: Settings,
    mem: MemoryBreakdown,
    speed: SpeedPrediction,
    tried: list[tuple[Settings, MemoryBreakdown, bool]],
    fits: bool,
    compute_measured: bool = False,
    refused: str | None = None,
) -> list[str]:
    r: list[str] = []
    by = ", sized by llama.cpp's own allocator" if compute_measured else ""
    gpu = target.has_gpu
    budget = target.device_budget_bytes if gpu else target.host_ram_bytes
    where = "VRAM" if gpu else "RAM"

    def total(m: MemoryBreakdown) -> int:
        return m.device.total_bytes if gpu else m.host.total_bytes

    # Context
    if pins.n_ctx is not None:
        r.append(f"{format_tokens(s.n_ctx)} context: pinned by you.")
    else:
        cap = "" if spec.n_ctx_train <= DEFAULT_MAX_CTX else f", capped at {format_tokens(DEFAULT_MAX_CTX)}"
        r.append(
            f"{format_tokens(s.n_ctx)} context: what the model was trained for "
            f"({format_tokens(spec.n_ctx_train)}){cap}; llama.cpp pads the cache to {mem.kv.n_cells} cells."
        )
    r += _context_scaling_reasons(spec, pins, s)
    tools = context_budget(s.n_ctx, pins.tools_tokens).reason()
    if tools:
        r.append(tools)
    # KV cache type
    kv_text = f"{s.type_k}" if s.type_k == s.type_v else f"K {s.type_k} / V {s.type_v}"
    if pins.type_k and pins.type_v:
        r.append(f"{kv_text} KV cache: pinned by you ({format_bytes(mem.kv.total_bytes)}).")
    elif pins.type_k or pins.type_v:
        which, pinned, other, other_t = (
            ("K", s.type_k, "V", s.type_v) if pins.type_k else ("V", s.type_v, "K", s.type_k)
        )
        why = (
            "matches it: CUDA's flash-attention kernels need one type for both"
            if gpu and other_t == pinned
            else ("full precision fits" if other_t in FULL_PRECISION_KV else "the most precise that fits")
        )
        r.append(f"{which} {pinned} pinned by you; {other} {other_t}: {why} ({format_bytes(mem.kv.total_bytes)}).")
    else:
        rejected = [
            (t, m)
            for t, m, ok in tried
            if not ok
            and (t.type_k, t.type_v) != (s.type_k, s.type_v)
            and t.n_gpu_layers == s.n_gpu_layers
            and t.n_cpu_moe == s.n_cpu_moe
        ]
        seen_types: set[str] = set()
        parts = []
        for t, m in rejected:
            if t.type_k in seen_types:
                continue
            seen_types.add(t.type_k)
            parts.append(
                f"{t.type_k} KV would need {format_bytes(m.kv.total_bytes)}, "
                f"{format_bytes(total(m) - budget)} over the {format_bytes(budget)} {where}"
            )
        if parts:
            r.append(
                f"{kv_text} KV cache at {format_tokens(s.n_ctx)} context: "
                + "; ".join(parts)
                + f"; {kv_text} KV ({format_bytes(mem.kv.total_bytes)}) fits with "
                f"{format_bytes(budget - total(mem))} to spare."
                if fits
                else f"{kv_text} KV cache: " + "; ".join(parts) + "."
            )
        elif {s.type_k, s.type_v} <= FULL_PRECISION_KV:
            r.append(
                f"{kv_text} KV cache ({format_bytes(mem.kv.total_bytes)}): full precision fits, "
                "so the cache is not quantized."
            )
        else:
            # Quantized though no full-precision cache was refused at this offload: it was traded
            # for layers (a full-precision cache fits only with fewer of them on the GPU).
            full = [t for t, _m, ok in tried if ok and {t.type_k, t.type_v} <= FULL_PRECISION_KV]
            most = max((t.n_gpu_layers for t in full), default=None)
            fewest_moe = min((t.n_cpu_moe for t in full if t.n_gpu_layers == s.n_gpu_layers), default=None)
            if fewest_moe is not None and fewest_moe > s.n_cpu_moe:
                trade = (
                    f"a full-precision cache fits only with the experts of {fewest_moe} layers in RAM, "
                    f"{s.n_cpu_moe} with this one"
                )
            elif most is not None and most < s.n_gpu_layers:
                trade = (
                    f"a full-precision cache fits only with {most} layers on the GPU, {s.n_gpu_layers} with this one"
                )
            else:
                trade = "it keeps more of the model on the GPU"
            r.append(f"{kv_text} KV cache ({format_bytes(mem.kv.total_bytes)}): quantized because {trade}.")
    if spec.has_swa:
        n_swa = sum(spec.swa_layers)
        if s.swa_full:
            r.append(f"--swa-full on: the {n_swa} sliding-window layers keep all {mem.kv.n_cells} cells.")
        else:
            r.append(
                f"{n_swa} of {spec.n_layer} layers use a {spec.sliding_window}-token sliding window and keep only "
                f"{mem.kv.n_cells_swa} cells (llama-server's default; --swa-full on keeps them all)."
            )
    if s.no_repack:
        repack = no_repack_reason(spec, target.cpu_variant)
        r.append(f"--no-repack: {repack}." if repack else "--no-repack: weights in plain CPU buffers.")
    # GPU layers
    if gpu:
        max_ngl = spec.n_layer + 1
        if spec.layer_expert_bytes:
            r.append(_experts_reason(spec, pins, s, mem, speed, target.device_budget_bytes))
            r[-1] += _other_placement(spec, target, s, mem, tried)
        if s.n_cpu_moe and s.n_gpu_layers >= max_ngl and pins.n_gpu_layers is None:
            pass  # the experts' sentence said where everything is
        elif pins.n_gpu_layers is not None:
            r.append(f"{s.n_gpu_layers} of {max_ngl} layers on the GPU: pinned by you.")
        elif s.n_gpu_layers >= max_ngl:
            r.append(
                f"All {max_ngl} layers on the GPU (the {spec.n_layer} blocks and the output layer): "
                f"{format_bytes(mem.device.total_bytes)} of {format_bytes(budget)} VRAM with the "
                f"{format_bytes(mem.device.margin_bytes)} safety margin."
            )
        elif s.n_gpu_layers == 0 and len(target.gpus) == 1 and target.device_margin_bytes >= budget:
            # "One more would pass" would blame the layer; what leaves no room is the margin.
            r.append(
                f"No layer on the GPU: its {format_bytes(budget)} VRAM is no more than the "
                f"{format_bytes(target.device_margin_bytes)} kept free for the driver and other programs "
                f"(--margin); all {max_ngl} layers run on the CPU ({speed.decode_tps:.1f} tokens/s)."
            )
        else:
            r.append(
                f"{s.n_gpu_layers} of {max_ngl} layers on the GPU: one more would pass the "
                f"{format_bytes(budget)} VRAM; the {max_ngl - s.n_gpu_layers} layers on the CPU are read at "
                f"system-memory speed, which sets the pace ({speed.decode_tps:.1f} tokens/s)."
            )
    else:
        r.append(
            "No GPU in this plan: every layer runs on the CPU "
            f"({format_bytes(mem.host.total_bytes)} of {format_bytes(budget)} usable RAM)."
        )
    if gpu:
        r.extend(target.device_reasons)  # which backend runs a card several can drive, and why
    if gpu and (len(target.gpus) > 1 or any(g.kind == "rpc" for g in target.gpus)):
        r.extend(_device_reasons(spec, target, pins, s, mem, speed))
    if mem.projector is not None:
        r.append(_projector_reason(spec, target, s, mem))
    # Batch
    if pins.n_ubatch is not None:
        r.append(f"ubatch {s.n_ubatch}: pinned by you; batch {s.n_batch}.")
    elif pins.n_batch is not None:
        capped = " (llama.cpp caps ubatch at batch)" if s.n_ubatch == s.n_batch < DEFAULT_UBATCH else ""
        r.append(f"batch {s.n_batch}: pinned by you; ubatch {s.n_ubatch}{capped}.")
    elif gpu and s.n_ubatch > DEFAULT_UBATCH:
        r.append(
            f"ubatch {s.n_ubatch}, batch {s.n_batch}: headroom allows a larger compute buffer "
            f"({format_bytes(mem.device.compute_bytes)}{by}), so prompts are processed faster."
        )
    elif s.n_ubatch < DEFAULT_UBATCH:
        r.append(f"ubatch {s.n_ubatch}: the default 512 would not fit; prompts are processed a little slower.")
    else:
        r.append(
            f"ubatch {s.n_ubatch}, batch {s.n_batch}: llama-server's defaults; compute buffer "
            f"{format_bytes(mem.device.compute_bytes if gpu else mem.host.compute_bytes)}{by}."
        )
    # Threads
    if pins.n_threads is not None:
        r.append(f"{_threads_text(s.n_threads)}: pinned by you.")
    elif gpu and s.n_gpu_layers >= spec.n_layer + 1 and s.n_cpu_moe:
        r.append(
            f"{_threads_text(s.n_threads)}: one per physical core ({target.cpu_physical_cores}); the CPU runs the "
            f"experts of {min(s.n_cpu_moe, spec.n_layer)} layers, reading them at system-memory speed."
        )
    elif gpu and s.n_gpu_layers >= spec.n_layer + 1:
        r.append(
            f"{_threads_text(s.n_threads)} for generation: everything runs on the GPU, and more CPU threads only "
            f"spin; {s.n_threads_batch} for prompts."
        )
    else:
        r.append(
            f"{_threads_text(s.n_threads)}: one per physical core ({target.cpu_physical_cores}); hyper-threads add "
            "nothing to memory-bound decoding."
        )
    # Flash attention
    if pins.flash_attn is not None:
        r.append(f"Flash attention {'on' if s.flash_attn else 'off'}: pinned by you.")
    elif s.type_v in QUANTIZED_KV_TYPES:
        r.append("Flash attention on: llama.cpp requires it for a quantized V cache.")
    else:
        r.append("Flash attention on: smaller compute buffer and faster long prompts.")
    # Outcome
    if refused:
        r.append(f"llama.cpp would refuse these settings: {refused}.")
    elif fits:
        r.append(
            f"Predicted {format_count(speed.decode_tps, 1)} tokens/s generating "
            f"({format_count(speed.decode_tps_full_ctx, 1)} with the context full), "
            f"{format_count(speed.prefill_tps)} tokens/s "
            f"reading a {min(HEADLINE_PROMPT_TOKENS, s.n_ctx)}-token prompt ({format_count(speed.prefill_tps_full_ctx)} "
            "reading one that fills the context)."
        )
        r.append(speed_basis(spec, target, s, speed))
    else:
        over = total(mem) - budget
        r.append(
            f"Does not fit: needs {format_bytes(total(mem))} of {where}, {format_bytes(max(over, 0))} more "
            f"than the {format_bytes(budget)} available."
            if over > 0
            else "Does not fit in system RAM."
        )
    return r


def _projector_reason(spec: ModelSpec, target: Target, s: Settings, mem: MemoryBreakdown) -> str:
    """Where the vision projector is, what it holds, what an image takes, and what it cost the
    model: RAM only, or the VRAM that would otherwise have held layers."""
    proj = mem.projector
    assert proj is not None
    held = proj.weights_bytes + proj.compute_bytes
    head = f"Vision projector {proj.spec.path.name} ({proj.spec.projector_type})"
    bytes_text = (
        f"weights {format_bytes(proj.weights_bytes)} + compute {format_bytes(proj.compute_bytes)} ({proj.source})"
    )
    if proj.device < 0:
        why = (
            "kept there by you (--no-mmproj-offload)"
            if s.mmproj_cpu
            else (
                "no layer is on the GPU, so it is kept off the GPU too (--no-mmproj-offload)"
                if target.has_gpu
                else "no GPU in this plan"
            )
        )
        return (
            f"{head} on the CPU, {why}: {bytes_text}; {proj.spec.tokens_text()}. It costs "
            f"{format_bytes(held)} of RAM and no VRAM; images are encoded at CPU speed."
        )
    gpu_dev = target.gpus[proj.device]
    where = gpu_dev.llama_name or gpu_dev.name
    beside = f", + {format_bytes(proj.host_compute_bytes)} CPU buffer beside it" if proj.host_compute_bytes else ""
    cpu_layers = [il for il, on in enumerate(mem.gpu_layers) if not on]
    if not cpu_layers:
        cost = f"every layer still fits on the GPU beside its {format_bytes(held)}"
    else:
        # llama.cpp offloads the last layers first: the next to move are the highest on the CPU.
        kv_per_layer = mem.kv.total_bytes // max(spec.n_layer, 1)
        room, n = held, 0
        for il in reversed(cpu_layers):
            need = spec.layer_weight_bytes[il] + kv_per_layer
            if need > room:
                break
            room -= need
            n += 1
        cost = (
            f"its {format_bytes(held)} of VRAM would hold about {n} more layer{'s' if n != 1 else ''} "
            "(their weights and cache) without it"
            if n
            else f"its {format_bytes(held)} of VRAM is less than one more layer would take"
        )
    return (
        f"{head} on {where}, the first offload device, where llama.cpp puts it: {bytes_text}{beside}; "
        f"{proj.spec.tokens_text()}; {cost}."
    )


def _experts_reason(
    spec: ModelSpec, pins: Pins, s: Settings, mem: MemoryBreakdown, speed: SpeedPrediction, budget: int
) -> str:
    """Where the routed experts are and why: what was pinned, or what the search traded."""
    in_ram, n_moe = experts_in_ram(spec, s, mem.gpu_layers)
    routed = f"a token reads {spec.n_expert_used} of {spec.n_expert} routed experts per layer"
    ram_read = f"{format_bytes(speed.host_bytes_per_token)} of them from RAM per token" if in_ram else ""
    where = placement_text(spec, s, mem)
    if pins.cpu_experts is not None or pins.n_cpu_moe is not None:
        return f"{where[0].upper()}{where[1:]}: pinned by you ({routed}{'; ' + ram_read if ram_read else ''})."
    if not in_ram:
        return f"{where[0].upper()}{where[1:]}: the whole model fits, so no expert is read from RAM ({routed})."
    if s.n_cpu_moe and s.n_gpu_layers > spec.n_layer:
        return (
            f"Experts of {in_ram} of {n_moe} layers in RAM (--n-cpu-moe {s.n_cpu_moe}, layers 0-{s.n_cpu_moe - 1}), "
            f"every layer's attention, norms, shared experts and KV cache on the GPU: with {s.n_cpu_moe - 1} the GPU "
            f"would pass its {format_bytes(budget)}; {routed}, {ram_read}, at system-memory speed "
            f"({speed.decode_tps:.1f} tokens/s)."
        )
    return (
        f"{where[0].upper()}{where[1:]}: whole layers on the CPU, their experts with them; {routed}, "
        f"{ram_read} ({speed.decode_tps:.1f} tokens/s)."
    )


def _other_placement(
    spec: ModelSpec,
    target: Target,
    s: Settings,
    mem: MemoryBreakdown,
    tried: list[tuple[Settings, MemoryBreakdown, bool]],
) -> str:
    """What the other way of freeing the GPU would have given (the search priced both): whole
    layers on the CPU beside experts in RAM, or the reverse; "" when it did not try it."""
    if not experts_in_ram(spec, s, mem.gpu_layers)[0]:
        return ""
    whole = s.n_gpu_layers <= spec.n_layer
    others = [(t, m) for t, m, ok in tried if ok and (t.n_gpu_layers <= spec.n_layer) != whole]
    # The same cache types first: the placement is what differs.
    others.sort(key=lambda tm: (tm[0].type_k, tm[0].type_v) != (s.type_k, s.type_v))
    if not others:
        return ""
    t, m = others[0]
    return (
        f" The other way, {placement_text(spec, t, m)}, would decode at "
        f"{predict_speed(spec, t, target, m).decode_tps:.1f} tokens/s."
    )


def _device_reasons(
    spec: ModelSpec, target: Target, pins: Pins, s: Settings, mem: MemoryBreakdown, speed: SpeedPrediction
) -> list[str]:
    """One line per device: which layers, how full; then the split and what the network costs."""
    lines = []
    for d, (gpu, c) in enumerate(zip(target.gpus, mem.per_device, strict=False)):
        layers = mem.device_layers(d)
        what = _ranges(layers) + (" + output" if mem.output_device == d else "")
        state = (
            ""
            if c.total_bytes <= gpu.memory_budget_bytes
            else f", {format_bytes(c.total_bytes - gpu.memory_budget_bytes)} too much"
        )
        budget = f"{format_bytes(gpu.memory_budget_bytes)}{' pinned' if gpu.budget_pinned else ''}"
        lines.append(f"{gpu.label}: {what or 'nothing'}, {format_bytes(c.total_bytes)} of {budget}{state}.")
    if s.tensor_split:
        shares = ", ".join(f"{x:g}" for x in s.tensor_split)
        why = (
            "pinned by you"
            if pins.tensor_split is not None
            else ("each device's room for layers after its margin, compute buffer and (on the last) the output layer")
        )
        lines.append(f"Split -ts {shares}: {why}.")
    share = network_share(spec, target, mem) if s.n_gpu_layers > 0 else 0.0
    if share > 0.005:
        lines.append(
            f"Crossing to and from the RPC hosts takes {share:.0%} of each token's time "
            f"(a round trip per hop, {max(g.rtt_ms for g in target.gpus if g.kind == 'rpc'):.1f} ms measured)."
        )
    return lines


def _ranges(layers: Sequence[int]) -> str:
    """(0, 1, 2, 5, 6) -> "layers 0-2, 5-6"."""
    if not layers:
        return ""
    runs: list[tuple[int, int]] = []
    for il in layers:
        if runs and il == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], il)
        else:
            runs.append((il, il))
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
    return ("layer " if len(layers) == 1 else "layers ") + text


def _threads_text(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def placement_text(spec: ModelSpec, s: Settings, mem: MemoryBreakdown) -> str:
    """Where the model runs, in words: "every layer's attention on the GPU, experts of 14 of 48
    layers in RAM", "30 of 49 layers on the GPU", "everything on the GPU"."""
    max_ngl = spec.n_layer + 1
    in_ram, n_moe = experts_in_ram(spec, s, mem.gpu_layers)
    on_gpu = sum(mem.gpu_layers) + (1 if mem.output_on_gpu else 0)
    if on_gpu == 0:
        return "everything in RAM (no layer on the GPU)"
    experts = f"experts of {in_ram} of {n_moe} layers in RAM" if n_moe else ""
    if on_gpu >= max_ngl:
        if not in_ram:
            return "everything on the GPU" + (" (experts too)" if n_moe else "")
        return f"every layer's attention on the GPU, {experts}"
    layers = f"{on_gpu} of {max_ngl} layers on the GPU"
    return f"{layers}, {experts}" if n_moe else layers


def _context_scaling_reasons(spec: ModelSpec, pins: Pins, s: Settings) -> list[str]:
    """How a context past the trained one runs (planner/memory/rope.py), in llama-server and the app alike."""
    trained = format_tokens(spec.n_ctx_train)
    if s.rope_scale:
        return [
            f"Past the {trained} the model was trained for: YaRN RoPE scaling by {s.rope_scale:g} from "
            f"{format_tokens(s.yarn_orig_ctx)} (--rope-scaling yarn --rope-scale {s.rope_scale:g} "
            f"--yarn-orig-ctx {s.yarn_orig_ctx}), in llama-server and in the app alike: without it "
            f"llama-server caps each slot at {trained} while allocating the whole cache."
        ]
    asked = pins.n_ctx if pins.n_ctx is not None else (pins.min_ctx or 0)
    if asked > s.n_ctx == spec.n_ctx_train:
        return [
            f"Capped at the trained {trained} (asked {format_tokens(asked)}): this model's own "
            f"{spec.rope_scaling_type} RoPE scaling is not stretched by YaRN, and llama-server serves no "
            "more than the trained context per slot."
        ]
    return []
