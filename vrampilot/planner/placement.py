"""Which weights of an offloaded layer stay in host memory: routed experts (--n-cpu-moe) and the
user's own `-ot PATTERN=CPU` patterns.

llama.cpp decides this per tensor while it loads (llama-model-loader.cpp, create_tensor): the
first override whose pattern `std::regex_search`es the tensor's name wins, and a CPU override
puts the tensor in the CPU's buffer types (CPU_REPACK first where the type repacks), whatever
device -ngl gave its layer. These functions say the same per layer, in bytes, for the memory
model; `cpu_override_patterns` is the one list the engine and the exported line both apply.
"""

from __future__ import annotations

import re

from vrampilot.gguf import ModelSpec
from vrampilot.gguf.spec import EXPERT_TENSOR_RE
from vrampilot.planner.settings import Settings

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")


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
    n_moe = min(max(settings.n_cpu_moe, 0), spec.n_layer)
    out = [spec.layer_expert_bytes[il] if spec.layer_expert_bytes and il < n_moe else 0 for il in range(spec.n_layer)]
    if settings.cpu_tensor_patterns:
        patterns = [re.compile(p) for p in settings.cpu_tensor_patterns]
        for t in spec.tensors:
            m = _LAYER_RE.match(t.name)
            if not m or int(m.group(1)) >= spec.n_layer:
                continue
            il = int(m.group(1))
            if il < n_moe and EXPERT_TENSOR_RE.search(t.name):
                continue  # counted above: --n-cpu-moe's patterns come first
            if any(p.search(t.name) for p in patterns):
                out[il] += t.n_bytes
    return tuple(out)


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
    a layer left on the CPU by -ngl count, as do those --n-cpu-moe keeps there."""
    if not spec.layer_expert_bytes:
        return 0, 0
    moe = [il for il, b in enumerate(spec.layer_expert_bytes) if b]
    on_host = sum(1 for il in moe if il < settings.n_cpu_moe or not (il < len(gpu_layers) and gpu_layers[il]))
    return on_host, len(moe)
