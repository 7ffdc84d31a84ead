"""Which weights of an offloaded layer stay in host memory: routed experts (--n-cpu-moe) and the
user's own `-ot PATTERN=CPU` patterns.

llama.cpp decides this per tensor while it loads (llama-model-loader.cpp, create_tensor): the
first override whose pattern `std::regex_search`es the tensor's name wins, and a CPU override
puts the tensor in the CPU's buffer types (CPU_REPACK first where the type repacks), whatever
device -ngl gave its layer. These functions say the same per layer, in bytes, for the memory
model; `cpu_override_patterns` is the one list the engine and the exported line both apply.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence

import numpy as np

from vrampilot.gguf import DSV4_ARCH, EXPERT_TENSOR_RE, ModelSpec, TensorInfo, active_share
from vrampilot.planner.errors import PlanError
from vrampilot.planner.settings import Settings

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
# Python syntax that C++'s std::regex (ECMAScript grammar, what llama.cpp compiles patterns with)
# lacks: named groups, lookbehind, comments, inline flags, \A and \Z. Python compiles them, llama.cpp
# would throw regex_error in the middle of the load.
_NOT_ECMASCRIPT = re.compile(r"\(\?(?:P|<|#|[aiLmsux])|\\[AZ]")
# GGML_OP_OFFLOAD_MIN_BATCH's default (ggml-cuda, ggml-vulkan, ggml-metal): an op over at least
# this many tokens whose weight sits in host memory runs on the GPU anyway, its weight copied into
# the GPU's compute buffer for the ubatch (ggml-backend.cpp, the scheduler's offload_op pass).
OP_OFFLOAD_MIN_BATCH = 32


def split_points(shares: Sequence[float]) -> list[float]:
    """llama-model.cpp's cumulative split points for -ts (or the free memory), in float32 as it
    computes them, so that a layer on a boundary lands where llama.cpp puts it."""
    total = np.float32(0.0)
    points = []
    for x in shares:
        total = np.float32(total + np.float32(x))
        points.append(total)
    return [float(np.float32(p / total)) if total > 0 else 1.0 for p in points]


def offloaded_layer_device(k: int, n_offloaded: int, points: Sequence[float]) -> int:
    """The device of the k-th of `n_offloaded` offloaded layers (the output layer is the last)
    for these split points (llama-model.cpp, load_tensors): the first whose point exceeds k / N."""
    x = np.float32(np.float32(k) / np.float32(n_offloaded))
    return min(bisect.bisect_right(points, float(x)), len(points) - 1)


@functools.lru_cache(maxsize=1024)  # part of every measured buffer's key (compute.graph_key): asked often
def layers_per_device(n_gpu_layers: int, shares: tuple[float, ...]) -> tuple[int, ...]:
    """How many of the -ngl offloaded layers each device of the split takes, first to last."""
    counts = [0] * len(shares)
    if n_gpu_layers > 0 and shares:
        points = split_points(shares)
        for k in range(n_gpu_layers):
            counts[offloaded_layer_device(k, n_gpu_layers, points)] += 1
    return tuple(counts)


def expert_layer_pattern(il: int) -> str:
    """llama.cpp's pattern for layer il's routed experts (llm_ffn_block_regex(il, LLM_FFN_EXPS_REGEX))."""
    return rf"blk\.{il}{EXPERT_TENSOR_RE.pattern}"


def cpu_override_patterns(settings: Settings) -> tuple[str, ...]:
    """Every tensor-name pattern this plan keeps on the CPU, in llama.cpp's order: what
    `--n-cpu-moe N` expands to (layers 0..N-1), then the user's patterns."""
    return tuple(expert_layer_pattern(il) for il in range(settings.n_cpu_moe)) + settings.cpu_tensor_patterns


def host_layer_bytes(spec: ModelSpec, settings: Settings) -> tuple[int, ...]:
    """Per repeating layer: the bytes of its weights that stay in host memory whichever device
    holds the layer."""
    if settings.cpu_tensor_patterns:
        out = [0] * spec.n_layer
        for il, t in _kept(spec, settings):
            out[il] += t.n_bytes
        return tuple(out)
    # --n-cpu-moe alone: its experts' bytes per layer are in the spec already (the search asks often).
    n_moe = min(max(settings.n_cpu_moe, 0), spec.n_layer)
    return tuple(
        spec.layer_expert_bytes[il] if spec.layer_expert_bytes and il < n_moe else 0 for il in range(spec.n_layer)
    )


def unmatched_patterns(spec: ModelSpec, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The patterns that match no tensor of the file (a typo keeps nothing on the CPU), or do not
    compile (llama.cpp would throw std::regex_error and abort the load)."""
    bad = []
    for p in patterns:
        try:
            rx = re.compile(p)
        except re.error:
            bad.append(p)
            continue
        if not any(rx.search(t.name) for t in spec.tensors):
            bad.append(p)
    return tuple(bad)


def experts_in_ram(spec: ModelSpec, settings: Settings, gpu_layers: tuple[bool, ...]) -> tuple[int, int]:
    """(layers whose routed experts are in host memory, layers with routed experts): experts of
    a layer left on the CPU by -ngl count, as do those a CPU override keeps there (--n-cpu-moe,
    or the user's -ot patterns)."""
    if not spec.layer_expert_bytes:
        return 0, 0
    if settings.cpu_tensor_patterns:
        held = {il for il, t in _kept(spec, settings) if EXPERT_TENSOR_RE.search(t.name)}
    else:
        held = set(range(min(max(settings.n_cpu_moe, 0), spec.n_layer)))
    moe = [il for il, b in enumerate(spec.layer_expert_bytes) if b]
    on_host = sum(1 for il in moe if il in held or not (il < len(gpu_layers) and gpu_layers[il]))
    return on_host, len(moe)


def _kept_tensors(spec: ModelSpec, settings: Settings) -> list[tuple[int, int]]:
    """(layer, bytes) of every tensor of a repeating layer that a CPU override keeps in host memory."""
    return [(il, t.n_bytes) for il, t in _kept(spec, settings)]


def _kept(spec: ModelSpec, settings: Settings) -> list[tuple[int, TensorInfo]]:
    n_moe = min(max(settings.n_cpu_moe, 0), spec.n_layer)
    patterns = [re.compile(p) for p in settings.cpu_tensor_patterns]
    out = []
    for t in spec.tensors:
        m = _LAYER_RE.match(t.name)
        if not m or int(m.group(1)) >= spec.n_layer:
            continue
        il = int(m.group(1))
        if (il < n_moe and EXPERT_TENSOR_RE.search(t.name)) or any(p.search(t.name) for p in patterns):
            out.append((il, t))
    return out


def host_layer_active_bytes(spec: ModelSpec, settings: Settings) -> tuple[float, ...]:
    """Per repeating layer: what a decoded token reads of the tensors a CPU override keeps in
    host memory (routed experts: their routed share, as ModelSpec.layer_active_bytes counts
    them), whichever device holds the rest of the layer. The speed model reads these at the
    host's rate; the user's -ot patterns count here as --n-cpu-moe's experts do."""
    if not settings.cpu_tensor_patterns:
        # --n-cpu-moe alone (the search's many candidates): per layer from the spec, no tensor walk.
        n_moe = min(max(settings.n_cpu_moe, 0), spec.n_layer)
        active = spec.layer_expert_active_bytes
        return tuple(active[il] if active and il < n_moe else 0.0 for il in range(spec.n_layer))
    share = spec.n_expert_used / spec.n_expert if spec.n_expert else 0.0
    out = [0.0] * spec.n_layer
    for il, t in _kept(spec, settings):
        out[il] += t.n_bytes * active_share(t.name, share)
    return tuple(out)


def largest_held_offloaded_bytes(spec: ModelSpec, settings: Settings) -> int:
    """The largest tensor a CPU override keeps in host memory although its layer is offloaded
    (0 when there is none): an expert whose matmul the host or the device must run for that layer."""
    if not (settings.n_cpu_moe or settings.cpu_tensor_patterns):
        return 0
    first_offloaded = spec.n_layer + 1 - max(settings.n_gpu_layers, 0)  # -ngl counts the output layer first
    if not settings.cpu_tensor_patterns:
        # --n-cpu-moe alone (every compute-buffer estimate asks): per layer from the spec.
        held = range(max(first_offloaded, 0), min(settings.n_cpu_moe, spec.n_layer))
        return max((spec.layer_expert_max_bytes[il] for il in held if spec.layer_expert_max_bytes), default=0)
    return max((b for il, b in _kept_tensors(spec, settings) if il >= first_offloaded), default=0)


def offload_copy_bytes(spec: ModelSpec, settings: Settings, n_tokens: int) -> int:
    """What a device's compute buffer gains for the weights kept in host memory of its offloaded
    layers: at a ubatch of OP_OFFLOAD_MIN_BATCH tokens or more the scheduler runs their matmuls on
    the device and copies the weight into its compute buffer, one at a time, so the largest such
    tensor. An upper bound: llama.cpp's allocator lays the copy over activations already dead
    where it can (measured on lavapipe: 1.75 of a 2 MiB expert tensor at ubatch 64, nothing at
    512, where attention's peak is higher); a plan made exact measures the true buffer. Below
    that ubatch the host runs them, and its compute buffer holds their activations instead."""
    return largest_held_offloaded_bytes(spec, settings) if n_tokens >= OP_OFFLOAD_MIN_BATCH else 0


def check_placement(spec: ModelSpec, n_cpu_moe: int | None, patterns: tuple[str, ...]) -> None:
    """Refuse, in one line, a placement llama.cpp or llama-server would not run as planned: a
    --n-cpu-moe outside 0..n_layer, and user patterns that would not survive llama-server's -ot
    parsing (it splits the list at ',' and each item at '='), do not compile as a regular
    expression (llama.cpp throws std::regex_error mid-load), or match no tensor (a typo that
    keeps nothing on the CPU while the plan counted it there)."""
    if n_cpu_moe is not None and not 0 <= n_cpu_moe <= spec.n_layer:
        raise PlanError(f"n_cpu_moe {n_cpu_moe} is outside 0..{spec.n_layer} (this model has {spec.n_layer} layers)")
    for p in patterns:
        if not p:
            raise PlanError("an empty tensor pattern would keep every tensor on the CPU; remove it")
        if "," in p or "=" in p:
            raise PlanError(
                f"tensor pattern {p!r} contains ',' or '=', which llama-server's -ot splits on; "
                r"write them as \x2c and \x3d (the regular expression reads the same)"
            )
        try:
            re.compile(p)
        except re.error as exc:
            raise PlanError(f"tensor pattern {p!r} is not a valid regular expression ({exc})") from None
        if m := _NOT_ECMASCRIPT.search(p):
            raise PlanError(
                f"tensor pattern {p!r} uses {m[0]!r}, which llama.cpp's regular expressions (C++ std::regex, "
                "ECMAScript) do not know"
            )
    for p in unmatched_patterns(spec, patterns):
        raise PlanError(f"tensor pattern {p!r} matches no tensor of {spec.path.name}; check the tensor names")


# CPU variants whose extra buffer type is ggml's AMX one (ggml-cpu/amx): it takes a weight for
# every matrix product llama.cpp tests at load, then refuses one whose other operand is not
# contiguous, and no other backend can read the weight it repacked.
AMX_VARIANTS = ("sapphirerapids",)


def no_repack_reason(spec: ModelSpec, cpu_variant: str | None) -> str | None:
    """Why this model's weights must stay out of ggml-cpu's extra buffer types here, or None.

    DeepSeek-2's multi-head latent attention multiplies attn_k_b by a permuted (not contiguous)
    view of the queries (llama.cpp's deepseek2 graph, also DeepSeek-3.2's), and DeepSeek-V4's
    compressed attention has such products too. On the AMX variant those weights are repacked for
    AMX at load, AMX then refuses the product, and llama.cpp's scheduler aborts the process
    (GGML_ASSERT "*cur_backend_id != -1", ggml-backend.cpp) at the first graph, as the deepseek2,
    deepseek32 and deepseek4 fixtures do on an AMX CPU. Without the extra
    buffer types every weight sits in a plain buffer, as on a CPU without AMX; the other
    variants' repacking takes such products."""
    if cpu_variant not in AMX_VARIANTS:
        return None
    latent = any(t.name.endswith(".attn_k_b.weight") for t in spec.tensors)
    if not latent and spec.architecture != DSV4_ARCH:
        return None
    return (
        f"weights not repacked for AMX (--no-repack): llama.cpp's AMX code cannot run some of this model's "
        f"attention products, and its {cpu_variant} CPU code would stop at the first prompt"
    )
