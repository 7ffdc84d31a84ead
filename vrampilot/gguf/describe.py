"""ModelSpec as JSON-safe data and as text: `vrampilot inspect`, the model library and the GUI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vrampilot.gguf.projector import ProjectorSpec
from vrampilot.gguf.spec import ModelSpec, one_line
from vrampilot.units import format_bytes


def _compact(values: tuple[int, ...]) -> int | list[int]:
    """A per-layer tuple as one number when all layers agree, else the list."""
    if values and all(v == values[0] for v in values):
        return values[0]
    return list(values)


def spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    return {
        "path": str(spec.path),
        "file_bytes": spec.file_bytes,
        "architecture": spec.architecture,
        "name": spec.name,
        "file_type": spec.file_type,
        "parameter_count": spec.n_params,
        "context_length_trained": spec.n_ctx_train,
        "layers": spec.n_layer,
        "embedding_size": spec.n_embd,
        "vocab_size": spec.n_vocab,
        "heads": _compact(spec.n_head),
        "kv_heads": _compact(spec.n_head_kv),
        "feed_forward_size": _compact(spec.n_ff),
        "head_dim_k": spec.head_dim_k,
        "head_dim_v": spec.head_dim_v,
        "sliding_window": spec.sliding_window,
        "sliding_window_layers": [i for i, s in enumerate(spec.swa_layers) if s],
        "mla": {
            "kv_lora_rank": spec.kv_lora_rank,
            "q_lora_rank": spec.q_lora_rank,
            "head_dim_k": spec.head_dim_k_mla,
            "head_dim_v": spec.head_dim_v_mla,
        }
        if spec.kv_lora_rank
        else None,
        "experts": {
            "count": spec.n_expert,
            "used": spec.n_expert_used,
            "shared": spec.n_expert_shared,
            "feed_forward_size": spec.n_ff_expert,
        }
        if spec.n_expert
        else None,
        "rope": {
            "dimensions": spec.n_rot,
            "freq_base": spec.rope_freq_base,
            "scaling_type": spec.rope_scaling_type,
            "scaling_factor": spec.rope_scaling_factor,
            "original_context_length": spec.rope_original_ctx,
        },
        "recurrent_layers": [i for i, r in enumerate(spec.recurrent_layers) if r],
        "chat_template": spec.has_chat_template,
        "weights": {
            "total_bytes": spec.weight_bytes,
            "token_embd_bytes": spec.token_embd_bytes,
            "output_bytes": spec.output_bytes,
            "other_bytes": spec.other_weight_bytes,
            "per_layer_bytes": list(spec.layer_weight_bytes),
            "tied_embeddings": spec.tied_embeddings,
        },
        "tensor_count": len(spec.tensors),
        "split_files": [str(p) for p in spec.split_paths],
        "unknown": list(spec.unknown),
    }


def format_spec(spec: ModelSpec, extra: Sequence[tuple[str, str]] = ()) -> str:
    d = spec_to_dict(spec)
    rows: list[tuple[str, str]] = [
        ("File", f"{spec.path} ({format_bytes(spec.file_bytes)})"),
        ("Name", spec.display_name),
        ("Architecture", one_line(spec.architecture)),
        ("Parameters", f"{spec.n_params / 1e9:.2f} B" if spec.n_params >= 1e9 else f"{spec.n_params / 1e6:.0f} M"),
        ("File type", one_line(spec.file_type or "unknown")),
        ("Context trained", str(spec.n_ctx_train)),
        ("Layers", str(spec.n_layer)),
        ("Embedding size", str(spec.n_embd)),
        ("Heads / KV heads", f"{d['heads']} / {d['kv_heads']}"),
        ("Head dim K / V", f"{spec.head_dim_k} / {spec.head_dim_v}"),
        ("Feed-forward size", str(d["feed_forward_size"])),
        ("Vocabulary", str(spec.n_vocab)),
    ]
    if spec.has_swa:
        rows.append(
            ("Sliding window", f"{spec.sliding_window} tokens on {sum(spec.swa_layers)} of {spec.n_layer} layers")
        )
    if spec.kv_lora_rank:
        rows.append(
            ("MLA", f"kv_lora_rank {spec.kv_lora_rank}, q_lora_rank {spec.q_lora_rank}, rope dims {spec.n_rot}")
        )
    if spec.n_expert:
        rows.append(
            ("Experts", f"{spec.n_expert_used} of {spec.n_expert} used per token, {spec.n_expert_shared} shared")
        )
    rope = f"{spec.n_rot} dims, base {spec.rope_freq_base:g}" if spec.rope_freq_base else f"{spec.n_rot} dims"
    if spec.rope_scaling_type and spec.rope_scaling_type != "none":
        rope += f", {one_line(spec.rope_scaling_type)} x{spec.rope_scaling_factor}"
    rows.append(("RoPE", rope))
    rows.append(("Chat template", "yes" if spec.has_chat_template else "no"))
    per_layer = spec.layer_weight_bytes
    layer_text = format_bytes(per_layer[0]) if per_layer and len(set(per_layer)) == 1 else "varies"
    rows.append(
        (
            "Weights",
            f"{format_bytes(spec.weight_bytes)} total: {format_bytes(spec.token_embd_bytes)} embedding, "
            f"{layer_text} per layer, {format_bytes(spec.output_bytes)} output"
            + (" (tied to the embedding)" if spec.tied_embeddings else ""),
        )
    )
    if spec.unknown:
        rows.append(("Could not determine", "; ".join(spec.unknown)))
    return _format_rows([*rows, *extra])


def format_projector(proj: ProjectorSpec) -> str:
    """A vision projector, as the plan reads it (planner/memory/projector.py counts its memory)."""
    return _format_rows(
        [
            ("File", str(proj.path)),
            ("Vision projector", one_line(proj.projector_type)),
            ("Output width", f"{proj.output_embd} (the model's n_embd must match)"),
            ("Image / patch", f"{proj.image_size} px / {proj.patch_size} px"),
            ("Image tokens", proj.tokens_text()),
            ("Weights", f"{format_bytes(proj.weight_bytes)} in {proj.n_tensors} tensors"),
        ]
    )


def _format_rows(rows: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
