"""ModelSpec: a GGUF header turned into the hyperparameters the planner needs.

Key names and per-architecture defaults follow llama.cpp's own loader (src/models/<arch>.cpp,
src/llama-model.cpp), so the planner sees the model the way llama.cpp will build it. Anything the
header does not say is listed in `ModelSpec.unknown` instead of being guessed silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import LlamaFileType

from vrampilot.gguf.reader import GGUFError, GGUFFile, SkippedArray, TensorInfo, read_gguf

# Architectures whose sliding-window layout llama.cpp fixes in code when the file has no
# `<arch>.attention.sliding_window_pattern`: (default pattern period, default window).
# set_swa_pattern(n): layer il is SWA when il % n < n - 1.
_SWA_DEFAULTS: dict[str, tuple[int, int | None]] = {
    "gemma2": (2, 4096),
    "gemma3": (6, None),  # SWA only when the file sets a window
    "gpt-oss": (2, None),
    "cohere2": (4, None),
}
# phi3 files may carry a window, but llama.cpp disables Phi SWA (src/models/phi3.cpp).
_SWA_DISABLED = {"phi3"}

DSV4_ARCH = "deepseek4"
# Keys llama_model_deepseek4::load_arch_hparams reads without a default (src/models/deepseek4.cpp):
# llama.cpp refuses a file without any of them. The first four size its cache.
DSV4_REQUIRED_KEYS = (
    "attention.compress_ratios",
    "attention.sliding_window",
    "attention.indexer.key_length",
    "attention.key_length",
    "attention.layer_norm_rms_epsilon",
    "attention.q_lora_rank",
    "expert_feed_forward_length",
    "expert_shared_count",
    "expert_weights_scale",
    "expert_weights_norm",
    "swiglu_clamp_exp",
    "attention.indexer.head_count",
    "attention.indexer.top_k",
    "attention.output_group_count",
    "attention.output_lora_rank",
    "attention.compress_rope_freq_base",
    "hyper_connection.count",
    "hyper_connection.sinkhorn_iterations",
    "hyper_connection.epsilon",
    "hash_layer_count",
    "expert_gating_func",
)
DSA_ARCH = "deepseek32"
# Keys llama_model_deepseek32::load_arch_hparams reads without a default (src/models/deepseek32.cpp),
# and the MLA ones its cache is sized by: llama.cpp refuses a file without any of them.
DSA_REQUIRED_KEYS = (
    "attention.indexer.key_length",
    "attention.kv_lora_rank",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "attention.layer_norm_rms_epsilon",
    "attention.q_lora_rank",
    "expert_feed_forward_length",
    "expert_shared_count",
    "attention.indexer.head_count",
    "attention.indexer.top_k",
    "expert_gating_func",
)
DSV4_RATIOS = (0, 4, 128)  # window only, CSA (+ indexer), HCA: the only ones llama.cpp loads
_DSV4_SQRT_SOFTPLUS = 4  # llama-hparams.h LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS
_DSV4_HC_MULT = 4  # src/models/deepseek4.cpp asserts hc == 4 when it builds the graph
_DSV4_ROT_BLOCK = 64  # llama-kv-cache.cpp rotates the indexer keys in Hadamard blocks of 64
_MAX_LAYERS = 512  # LLAMA_MAX_LAYERS

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
# llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h): the routed experts' tensors, which
# --n-cpu-moe / --cpu-moe keep in host memory. The router (ffn_gate_inp) and shared experts
# (ffn_*_shexp) do not match.
EXPERT_TENSOR_RE = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
SPLIT_NAME_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<count>\d{5})\.gguf$")


def active_share(name: str, expert_share: float) -> float:
    """The share of a layer tensor one token reads: n_expert_used / n_expert of a routed-expert
    tensor (`*_exps`), all of any other."""
    return expert_share if "_exps" in name and expert_share > 0 else 1.0


@dataclass(frozen=True)
class ModelSpec:
    path: Path
    file_bytes: int
    architecture: str
    name: str | None
    file_type: str | None
    n_params: int
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_vocab: int
    n_head: tuple[int, ...]  # per layer
    n_head_kv: tuple[int, ...]  # per layer; 0 for layers without attention (recurrent)
    n_ff: tuple[int, ...]  # per layer
    head_dim_k: int
    head_dim_v: int
    sliding_window: int  # 0 when the model has no sliding-window layers
    swa_layers: tuple[bool, ...]  # per layer: True when the layer uses the sliding window
    kv_lora_rank: int  # MLA latent rank (0 when not MLA)
    q_lora_rank: int
    head_dim_k_mla: int  # MLA absorbed head dims (0 when not MLA)
    head_dim_v_mla: int
    n_rot: int  # RoPE dimensions
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    n_ff_expert: int
    rope_freq_base: float | None
    rope_scaling_type: str | None
    rope_scaling_factor: float | None
    rope_original_ctx: int | None
    recurrent_layers: tuple[bool, ...]
    ssm_d_conv: int
    ssm_d_inner: int
    ssm_d_state: int
    ssm_n_group: int
    wkv_head_size: int
    chat_template: str | None
    token_embd_bytes: int
    output_bytes: int  # output.weight + output_norm (0 bytes of output.weight when tied)
    layer_weight_bytes: tuple[int, ...]
    # What one token reads of each layer: MoE layers count only the experts a token is routed to.
    layer_active_bytes: tuple[float, ...]
    layer_active_params: tuple[float, ...]
    other_weight_bytes: int  # tensors outside blocks besides embedding and output
    weight_bytes: int  # sum of every tensor in the file(s)
    tied_embeddings: bool
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    unknown: tuple[str, ...] = ()
    split_paths: tuple[Path, ...] = ()
    # Multi-token-prediction blocks counted in block_count (`nextn_predict_layers`): llama.cpp gives
    # them no KV cache in the main context and does not run them there.
    n_layer_nextn: int = 0
    # Per repeating layer: bytes of its routed experts' tensors (EXPERT_TENSOR_RE), the part
    # --n-cpu-moe moves to host memory; () for a file without experts.
    layer_expert_bytes: tuple[int, ...] = ()
    # Per repeating layer: what one token reads of those experts (the routed share).
    layer_expert_active_bytes: tuple[float, ...] = ()
    # Per repeating layer: its largest expert tensor (what a device copies in to run it).
    layer_expert_max_bytes: tuple[int, ...] = ()
    # `tokenizer.ggml.model` ("gpt2", "llama", ...); None when the file has none, or says "none":
    # llama.cpp loads such a file (weights only) but aborts the process on its first tokenize.
    tokenizer_model: str | None = None
    # DeepSeek-V4 (`deepseek4`) compressed cache: per layer 0 (window only), 4 (CSA + lightning
    # indexer) or 128 (HCA); the indexer's key length (also DeepSeek-V3.2's, `deepseek32`, whose
    # DSA indexer caches one key per token). Empty / 0 for every other architecture.
    compress_ratios: tuple[int, ...] = ()
    indexer_head_size: int = 0
    # The lightning indexer's heads and the compressed entries each query keeps (DeepSeek-V4's
    # CSA layers, V3.2's DSA): what a decoded token's attention reads (planner/speed_model/predict.py).
    indexer_n_head: int = 0
    indexer_top_k: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0 and self.head_dim_k_mla > 0

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 1

    @property
    def has_swa(self) -> bool:
        return self.sliding_window > 0 and any(self.swa_layers)

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    @property
    def display_name(self) -> str:
        return one_line(self.name or self.path.stem)

    def layer_tensors(self, il: int) -> tuple[TensorInfo, ...]:
        prefix = f"blk.{il}."
        return tuple(t for t in self.tensors if t.name.startswith(prefix))


# Metadata strings are shown on one line and at most this long: a file may carry megabytes there.
MAX_SHOWN_CHARS = 120


def one_line(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """A metadata string as a line of text: whitespace runs as one space, cut at `limit` with "…"."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# A file name is shown whole (it is what the user types to open the file again), but within one
# line: a line break or tab in it is written as its escape.
_NAME_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def file_name_line(path: Path) -> str:
    """`path`'s name for a line of text: whole, with line breaks and tabs written \\n, \\r, \\t."""
    return path.name.translate(_NAME_BREAKS)


def _arch_key(meta: dict[str, Any], arch: str, key: str, default: Any = None) -> Any:
    return meta.get(f"{arch}.{key}", default)


def _per_layer(value: Any, n_layer: int, what: str, path: Path) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != n_layer:
            raise GGUFError(path, f"{what} has {len(value)} entries for {n_layer} layers")
        return tuple(int(v) for v in value)
    return (int(value),) * n_layer


def _file_type_name(meta: dict[str, Any]) -> str | None:
    ft = meta.get("general.file_type")
    if ft is None:
        return None
    try:
        return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type{ft}"


def _split_siblings(path: Path, meta: dict[str, Any]) -> list[Path]:
    count = int(meta.get("split.count", 1) or 1)
    if count <= 1:
        return [path]
    m = SPLIT_NAME_RE.match(path.name)
    if not m:
        raise GGUFError(path, f"file declares {count} splits but its name is not <name>-00001-of-{count:05d}.gguf")
    return [path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def load_model_spec(path: str | os.PathLike[str]) -> ModelSpec:
    """Read a GGUF file (all parts of a split model) and describe it. Raises GGUFError."""
    first = read_gguf(path)
    parts = [first]
    paths = _split_siblings(first.path, first.metadata)
    if len(paths) > 1:
        if first.metadata.get("split.no", 0) != 0:
            raise GGUFError(first.path, "this is not the first part of a split model; open the -00001- file")
        for p in paths[1:]:
            if not p.exists():
                raise GGUFError(p, "part of a split model is missing")
            parts.append(read_gguf(p))
    return spec_from_gguf(first, parts)


def spec_from_gguf(first: GGUFFile, parts: list[GGUFFile] | None = None) -> ModelSpec:
    try:
        return _spec_from_gguf(first, parts or [first])
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        if isinstance(exc, GGUFError):
            raise
        # A header whose values have the wrong types (a string where a count belongs, ...).
        raise GGUFError(first.path, f"unexpected metadata value: {exc}") from None


def _spec_from_gguf(first: GGUFFile, parts: list[GGUFFile]) -> ModelSpec:
    meta = first.metadata
    path = first.path
    unknown: list[str] = []

    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(path, "general.architecture is missing: not a model file llama.cpp can load")

    tensors = tuple(t for part in parts for t in part.tensors)
    by_name = {t.name: t for t in tensors}

    n_layer = _arch_key(meta, arch, "block_count")
    if n_layer is None:
        ids = [int(m.group(1)) for t in tensors if (m := _LAYER_RE.match(t.name))]
        n_layer = max(ids) + 1 if ids else 0
        unknown.append("block_count (counted from tensor names)")
    n_layer = int(n_layer)
    # Every per-layer table below has n_layer entries: a damaged count (a flipped byte of a u32
    # makes billions) took 23 GB of RAM before anything failed. llama.cpp asserts
    # 0 < block_count <= LLAMA_MAX_LAYERS (llama-model.cpp, load_hparams); 0 is let through here
    # for files without blocks.
    if not 0 <= n_layer <= _MAX_LAYERS:
        raise GGUFError(path, f"{arch}.block_count is {n_layer}; llama.cpp allows 0 to {_MAX_LAYERS} layers")

    n_embd = _arch_key(meta, arch, "embedding_length")
    if n_embd is None:
        emb = by_name.get("token_embd.weight")
        n_embd = emb.shape[0] if emb else 0
        unknown.append("embedding_length" + (" (taken from token_embd)" if emb else ""))
    n_embd = int(n_embd)

    n_ctx_train = _arch_key(meta, arch, "context_length")
    if n_ctx_train is None:
        unknown.append("context_length (assuming 4096)")
        n_ctx_train = 4096
    n_ctx_train = int(n_ctx_train)

    n_head = _per_layer(_arch_key(meta, arch, "attention.head_count"), n_layer, "head_count", path)
    if n_head is None:
        unknown.append("attention.head_count")
        n_head = (0,) * n_layer
    n_head_kv = _per_layer(_arch_key(meta, arch, "attention.head_count_kv"), n_layer, "head_count_kv", path)
    if n_head_kv is None:
        n_head_kv = n_head  # llama.cpp: no GQA when the key is absent
    n_ff = _per_layer(_arch_key(meta, arch, "feed_forward_length"), n_layer, "feed_forward_length", path)
    if n_ff is None:
        n_ff = (0,) * n_layer
        if n_layer:
            unknown.append("feed_forward_length")

    head0 = (n_head[0] or max(n_head)) if n_head else 0  # llama.cpp divides by layer 0's count
    default_head_dim = n_embd // head0 if head0 else 0
    head_dim_k = int(_arch_key(meta, arch, "attention.key_length", default_head_dim))
    head_dim_v = int(_arch_key(meta, arch, "attention.value_length", default_head_dim))
    if head_dim_k == 0 and any(n_head):
        unknown.append("attention.key_length")

    # Sliding window
    window = int(_arch_key(meta, arch, "attention.sliding_window", 0) or 0)
    swa_layers: tuple[bool, ...] = (False,) * n_layer
    if arch == DSV4_ARCH:
        swa_layers = (True,) * n_layer  # every layer attends over the raw window (set_swa_pattern(0))
    elif arch in _SWA_DISABLED:
        window = 0
    elif arch in _SWA_DEFAULTS:
        period, default_window = _SWA_DEFAULTS[arch]
        if window == 0 and default_window is not None:
            window = default_window
        pattern = _arch_key(meta, arch, "attention.sliding_window_pattern")
        if window > 0:
            if isinstance(pattern, list):
                swa_layers = tuple(bool(v) for v in pattern[:n_layer])
            else:
                n = int(pattern) if pattern is not None else period
                swa_layers = tuple(n == 0 or (il % n < n - 1) for il in range(n_layer))
    elif window > 0:
        pattern = _arch_key(meta, arch, "attention.sliding_window_pattern")
        if isinstance(pattern, list):
            swa_layers = tuple(bool(v) for v in pattern[:n_layer])
        elif pattern is not None:
            n = int(pattern)
            swa_layers = tuple(n == 0 or (il % n < n - 1) for il in range(n_layer))
        else:
            # The file names a window but this architecture's loader may not use it; llama.cpp
            # for llama/qwen2/mistral ignores it, so plan the full cache and say so.
            unknown.append(f"sliding_window {window} present but no layer pattern: planned as full attention")
            window = 0
    if not any(swa_layers) and arch != DSV4_ARCH:
        window = 0

    # MLA
    kv_lora_rank = int(_arch_key(meta, arch, "attention.kv_lora_rank", 0) or 0)
    q_lora_rank = int(_arch_key(meta, arch, "attention.q_lora_rank", 0) or 0)
    head_dim_k_mla = int(_arch_key(meta, arch, "attention.key_length_mla", 0) or 0)
    head_dim_v_mla = int(_arch_key(meta, arch, "attention.value_length_mla", 0) or 0)

    n_rot = int(_arch_key(meta, arch, "rope.dimension_count", head_dim_k) or 0)

    # Experts
    n_expert = int(_arch_key(meta, arch, "expert_count", 0) or 0)
    n_expert_used = int(_arch_key(meta, arch, "expert_used_count", 0) or 0)
    n_expert_shared = int(_arch_key(meta, arch, "expert_shared_count", 0) or 0)
    n_ff_expert = int(_arch_key(meta, arch, "expert_feed_forward_length", 0) or 0)

    # Recurrent state (Mamba/RWKV-style); layers without attention heads are recurrent in hybrids.
    ssm_d_conv = int(_arch_key(meta, arch, "ssm.conv_kernel", 0) or 0)
    ssm_d_inner = int(_arch_key(meta, arch, "ssm.inner_size", 0) or 0)
    ssm_d_state = int(_arch_key(meta, arch, "ssm.state_size", 0) or 0)
    ssm_n_group = int(_arch_key(meta, arch, "ssm.group_count", 0) or 0)
    wkv_head_size = int(_arch_key(meta, arch, "wkv.head_size", 0) or 0)
    is_recurrent_model = bool(ssm_d_state or wkv_head_size)
    recurrent_layers = tuple(is_recurrent_model and n_head_kv[il] == 0 for il in range(n_layer))
    if is_recurrent_model and not any(recurrent_layers):
        recurrent_layers = (True,) * n_layer

    # Vocabulary
    n_vocab = _arch_key(meta, arch, "vocab_size")
    if n_vocab is None:
        tokens = meta.get("tokenizer.ggml.tokens")
        if isinstance(tokens, (list, SkippedArray)):
            n_vocab = len(tokens)
        else:
            emb = by_name.get("token_embd.weight")
            n_vocab = emb.shape[1] if emb and len(emb.shape) > 1 else 0
            unknown.append("vocabulary size" + (" (taken from token_embd)" if n_vocab else ""))
    n_vocab = int(n_vocab)

    if n_expert > 1:
        _check_experts(path, tensors, n_layer, n_expert)

    # Weights
    layer_bytes = [0] * n_layer
    expert_bytes = [0] * n_layer
    expert_active = [0.0] * n_layer
    expert_max = [0] * n_layer
    active_bytes = [0.0] * n_layer
    active_params = [0.0] * n_layer
    expert_share = int(_arch_key(meta, arch, "expert_used_count", 0) or 0) / int(
        _arch_key(meta, arch, "expert_count", 1) or 1
    )
    token_embd_bytes = output_bytes = other_bytes = 0
    n_params = 0
    for t in tensors:
        n_params += t.n_elements
        m = _LAYER_RE.match(t.name)
        if m and int(m.group(1)) < n_layer:
            il = int(m.group(1))
            layer_bytes[il] += t.n_bytes
            share = active_share(t.name, expert_share)
            if EXPERT_TENSOR_RE.search(t.name):
                expert_bytes[il] += t.n_bytes
                expert_active[il] += t.n_bytes * share
                expert_max[il] = max(expert_max[il], t.n_bytes)
            active_bytes[il] += t.n_bytes * share
            active_params[il] += t.n_elements * share
        elif t.name.startswith("token_embd."):
            token_embd_bytes += t.n_bytes
        elif t.name.startswith("output.") or t.name.startswith("output_norm."):
            output_bytes += t.n_bytes
        else:
            other_bytes += t.n_bytes
    weight_bytes = sum(t.n_bytes for t in tensors)

    rope_type = _arch_key(meta, arch, "rope.scaling.type")
    factor = _arch_key(meta, arch, "rope.scaling.factor")
    orig = _arch_key(meta, arch, "rope.scaling.original_context_length")
    base = _arch_key(meta, arch, "rope.freq_base")
    template = meta.get("tokenizer.chat_template")
    tokenizer = meta.get("tokenizer.ggml.model")

    n_layer_nextn = min(int(_arch_key(meta, arch, "nextn_predict_layers", 0) or 0), n_layer)
    compress_ratios: tuple[int, ...] = ()
    indexer_head_size = indexer_n_head = indexer_top_k = 0
    if arch in (DSV4_ARCH, DSA_ARCH):
        indexer_n_head = int(_arch_key(meta, arch, "attention.indexer.head_count", 0) or 0)
        indexer_top_k = int(_arch_key(meta, arch, "attention.indexer.top_k", 0) or 0)
    if arch == DSV4_ARCH:
        _check_dsv4_header(meta, path, n_layer, n_head, n_head_kv, head_dim_k, head_dim_v, n_rot)
        compress_ratios = tuple(int(r) for r in meta[f"{arch}.attention.compress_ratios"][:n_layer])
        indexer_head_size = int(meta[f"{arch}.attention.indexer.key_length"])
        if n_layer_nextn and f"blk.{n_layer - n_layer_nextn}.nextn.eh_proj.weight" not in by_name:
            n_layer_nextn = 0  # llama.cpp drops MTP layers whose weights the file does not carry
    elif arch == DSA_ARCH:
        _check_dsa_header(meta, path)
        indexer_head_size = int(meta[f"{arch}.attention.indexer.key_length"])

    return ModelSpec(
        path=path,
        file_bytes=sum(p.file_bytes for p in parts),
        architecture=arch,
        name=meta.get("general.name") if isinstance(meta.get("general.name"), str) else None,
        file_type=_file_type_name(meta),
        n_params=n_params,
        n_ctx_train=n_ctx_train,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=n_vocab,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        sliding_window=window,
        swa_layers=swa_layers,
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=q_lora_rank,
        head_dim_k_mla=head_dim_k_mla,
        head_dim_v_mla=head_dim_v_mla,
        n_rot=n_rot,
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_expert_shared=n_expert_shared,
        n_ff_expert=n_ff_expert,
        rope_freq_base=float(base) if base is not None else None,
        rope_scaling_type=str(rope_type) if rope_type is not None else None,
        rope_scaling_factor=float(factor) if factor is not None else None,
        rope_original_ctx=int(orig) if orig is not None else None,
        recurrent_layers=recurrent_layers,
        ssm_d_conv=ssm_d_conv,
        ssm_d_inner=ssm_d_inner,
        ssm_d_state=ssm_d_state,
        ssm_n_group=ssm_n_group,
        wkv_head_size=wkv_head_size,
        chat_template=template if isinstance(template, str) else None,
        tokenizer_model=tokenizer if isinstance(tokenizer, str) and tokenizer not in ("none", "no_vocab") else None,
        token_embd_bytes=token_embd_bytes,
        output_bytes=output_bytes,
        layer_weight_bytes=tuple(layer_bytes),
        layer_active_bytes=tuple(active_bytes),
        layer_active_params=tuple(active_params),
        other_weight_bytes=other_bytes,
        weight_bytes=weight_bytes,
        tied_embeddings="output.weight" not in by_name,
        tensors=tensors,
        unknown=tuple(unknown),
        split_paths=tuple(p.path for p in parts) if len(parts) > 1 else (),
        n_layer_nextn=n_layer_nextn,
        layer_expert_bytes=tuple(expert_bytes) if any(expert_bytes) else (),
        layer_expert_active_bytes=tuple(expert_active) if any(expert_bytes) else (),
        layer_expert_max_bytes=tuple(expert_max) if any(expert_bytes) else (),
        compress_ratios=compress_ratios,
        indexer_head_size=indexer_head_size,
        indexer_n_head=indexer_n_head,
        indexer_top_k=indexer_top_k,
    )


_EXPERT_WEIGHT_RE = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$")


def _check_experts(path: Path, tensors: Sequence[TensorInfo], n_layer: int, n_expert: int) -> None:
    """A mixture-of-experts file whose routed experts llama.cpp would refuse (check_tensor_dims,
    "missing tensor") only after it started loading, refused here in one line: every layer with a
    router (ffn_gate_inp) has a down projection and an up (or fused gate-up) projection of its
    experts, and each expert matrix is 3-D with one slice per expert and agreeing widths.
    The placement (--n-cpu-moe) counts these tensors, so a plan of a broken file would be wrong too.
    Chunked experts (`_chexps`, GroveMoE) have their own count along the third dimension."""
    by_layer: dict[int, dict[str, TensorInfo]] = {}
    routed: set[int] = set()
    for t in tensors:
        if (m := _EXPERT_WEIGHT_RE.match(t.name)) and int(m[1]) < n_layer:
            by_layer.setdefault(int(m[1]), {})[m[2] + ("_ch" if m[3] else "")] = t
        elif (m := _LAYER_RE.match(t.name)) and t.name.endswith(".ffn_gate_inp.weight") and int(m[1]) < n_layer:
            routed.add(int(m[1]))
    for il in sorted(routed | set(by_layer)):
        mats = by_layer.get(il, {})
        if il in routed and ("down" not in mats or not ({"up", "gate_up"} & set(mats))):
            need = "ffn_down_exps" if "down" not in mats else "ffn_up_exps"
            raise GGUFError(path, f"blk.{il}.{need}.weight is missing: layer {il} routes to experts it does not have")
        for key, t in mats.items():
            if len(t.shape) != 3 or (not key.endswith("_ch") and t.shape[2] != n_expert):
                raise GGUFError(
                    path,
                    f"{t.name} has shape {list(t.shape)}: expected one matrix per expert "
                    f"({n_expert} in the header) along its third dimension",
                )
        for ch in ("", "_ch"):
            down, gate, up, fused = (mats.get(k + ch) for k in ("down", "gate", "up", "gate_up"))
            wide = up or fused
            if down is not None and wide is not None:
                ff = wide.shape[1] // (1 if up is not None else 2)
                if (down.shape[0], down.shape[1]) != (ff, wide.shape[0]):
                    raise GGUFError(
                        path,
                        f"{down.name} has shape {list(down.shape)}, which does not match {wide.name} {list(wide.shape)}",
                    )
            if gate is not None and up is not None and gate.shape != up.shape:
                raise GGUFError(
                    path, f"{gate.name} has shape {list(gate.shape)}, {up.name} {list(up.shape)}: they must match"
                )


def _check_dsv4_header(
    meta: dict[str, Any],
    path: Path,
    n_layer: int,
    n_head: tuple[int, ...],
    n_head_kv: tuple[int, ...],
    head_k: int,
    head_v: int,
    n_rot: int,
) -> None:
    """Refuse, in one line, a DeepSeek-V4 header llama.cpp would refuse or crash on.

    The checks are llama.cpp's (load_arch_hparams / load_arch_tensors throw, the graph and the
    cache assert); an assert kills the process, so they are made here before anything loads.
    """
    a = DSV4_ARCH
    for key in DSV4_REQUIRED_KEYS:
        if f"{a}.{key}" not in meta:
            raise GGUFError(path, f"{a}.{key} is missing: llama.cpp needs it to load a DeepSeek-V4 model")
    ratios = meta[f"{a}.attention.compress_ratios"]
    if not isinstance(ratios, list):
        raise GGUFError(path, f"{a}.attention.compress_ratios is not a per-layer array")
    if len(ratios) < n_layer:
        raise GGUFError(path, f"{a}.attention.compress_ratios has {len(ratios)} entries for {n_layer} layers")
    if len(ratios) > _MAX_LAYERS:
        raise GGUFError(
            path, f"{a}.attention.compress_ratios has {len(ratios)} entries; llama.cpp allows {_MAX_LAYERS}"
        )
    for il, r in enumerate(ratios[:n_layer]):
        if int(r) not in DSV4_RATIOS:
            raise GGUFError(path, f"compression ratio {r} at layer {il}: llama.cpp supports only 0, 4 and 128")
    gating = int(meta[f"{a}.expert_gating_func"])
    if gating != _DSV4_SQRT_SOFTPLUS:
        raise GGUFError(
            path, f"{a}.expert_gating_func is {gating}: llama.cpp's DeepSeek-V4 loader expects 4 (sqrtsoftplus)"
        )
    hc = int(meta[f"{a}.hyper_connection.count"])
    if hc != _DSV4_HC_MULT:
        raise GGUFError(path, f"{a}.hyper_connection.count is {hc}: llama.cpp's DeepSeek-V4 graph supports only 4")
    if head_k != head_v:
        raise GGUFError(path, f"key_length {head_k} and value_length {head_v} differ: DeepSeek-V4 needs them equal")
    # V4 attends with one shared KV head: the cache is sized by head_count_kv but the graph writes
    # one head's row into it (ggml_set_rows asserts in build_raw_attention and the process dies).
    if any(h != 1 for h in n_head_kv[:n_layer]):
        raise GGUFError(
            path, f"{a}.attention.head_count_kv is {max(n_head_kv)}: llama.cpp's DeepSeek-V4 graph supports only 1"
        )
    groups = int(meta[f"{a}.attention.output_group_count"])
    if groups <= 0 or any(h % groups for h in n_head):
        raise GGUFError(path, f"{a}.attention.output_group_count {groups} does not divide the head count")
    # llama.cpp builds the CSA, HCA and indexer caches' Hadamard inputs even for an empty cache, and
    # an empty one that rotates (the indexer's always; CSA/HCA when key_length equals the indexer's)
    # divides by zero (llama_kv_cache::build_input_k_rot): such a pattern kills the process.
    used = {int(r) for r in ratios[:n_layer]}
    if 4 not in used:
        raise GGUFError(path, "no layer has compression ratio 4: llama.cpp's DeepSeek-V4 cache needs one (it crashes)")
    indexer = int(meta[f"{a}.attention.indexer.key_length"])
    if 128 not in used and head_k == indexer:
        raise GGUFError(
            path,
            f"no layer has compression ratio 128 and key_length equals the indexer's ({indexer}): llama.cpp crashes",
        )
    if n_rot > head_k:
        raise GGUFError(path, f"rope.dimension_count {n_rot} is larger than the head ({head_k})")
    if indexer <= 0 or indexer % _DSV4_ROT_BLOCK:
        raise GGUFError(
            path,
            f"{a}.attention.indexer.key_length {indexer} is not a multiple of {_DSV4_ROT_BLOCK}, as llama.cpp needs",
        )
    if n_rot > indexer:
        raise GGUFError(path, f"rope.dimension_count {n_rot} is larger than the indexer head ({indexer})")


def _check_dsa_header(meta: dict[str, Any], path: Path) -> None:
    """Refuse, in one line, a DeepSeek-V3.2 (DSA) header llama.cpp would refuse or crash on."""
    a = DSA_ARCH
    for key in DSA_REQUIRED_KEYS:
        if f"{a}.{key}" not in meta:
            raise GGUFError(path, f"{a}.{key} is missing: llama.cpp needs it to load a DeepSeek-V3.2 model")
    # The indexer's keys are rotated by one Hadamard matrix the size of the largest power of two
    # (>= 64) dividing key_length (llama_kv_cache::build_input_k_rot), multiplied with the whole key
    # (src/models/deepseek32.cpp): any other length fails a GGML_ASSERT, which kills the process.
    indexer = int(meta[f"{a}.attention.indexer.key_length"])
    if indexer < _DSV4_ROT_BLOCK or indexer & (indexer - 1):
        raise GGUFError(
            path,
            f"{a}.attention.indexer.key_length {indexer} is not a power of two of at least {_DSV4_ROT_BLOCK}, "
            "as llama.cpp needs",
        )
