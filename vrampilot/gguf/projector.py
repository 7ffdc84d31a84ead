"""Vision projector (mmproj) files: what the header says, and whether it fits a model.

A multimodal model ships as two GGUF files: the language model and a projector (a CLIP-style
vision encoder plus the projection into the model's embedding space), which llama.cpp's
tools/mtmd/clip.cpp loads. The header gives everything the plan needs: the projector type, the
width of the embeddings it outputs (which must be the language model's input width, or llama.cpp's
mtmd refuses it after loading both), the image and patch sizes that fix the tokens per image, and
the tensor table whose bytes clip.cpp allocates. Keys and tensor names are clip-impl.h's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.gguf.reader import GGUFError, GGUFFile, read_gguf
from vrampilot.gguf.spec import ModelSpec

# clip-impl.h PROJECTOR_TYPE_NAMES of the vendored llama.cpp: a type outside it is refused by
# clip.cpp ("unknown projector type").
LLAMA_CPP_PROJECTOR_TYPES = frozenset(
    [
        "mlp",
        "ldp",
        "ldpv2",
        "resampler",
        "adapter",
        "qwen2vl_merger",
        "qwen2.5vl_merger",
        "qwen3vl_merger",
        "ling3vl",
        "step3vl",
        "gemma3",
        "gemma3nv",
        "gemma3na",
        "gemma4v",
        "gemma4a",
        "gemma4uv",
        "gemma4ua",
        "phi4",
        "idefics3",
        "pixtral",
        "ultravox",
        "internvl",
        "llama4",
        "qwen2a",
        "qwen3a",
        "glma",
        "qwen2.5o",
        "voxtral",
        "meralion",
        "musicflamingo",
        "lfm2",
        "kimivl",
        "paddleocr",
        "lightonocr",
        "cogvlm",
        "janus_pro",
        "dots_ocr",
        "dots3note_v",
        "dots3note_a",
        "deepseekocr",
        "deepseekocr2",
        "deepseek4v",
        "lfm2a",
        "glm4v",
        "glm5v",
        "youtuvl",
        "yasa2",
        "kimik25",
        "nemotron_v2_vl",
        "exaone4_5",
        "hunyuanvl",
        "minicpmv4_6",
        "granite_speech",
        "mimovl",
        "minimax_m3",
        "granite4_vision",
        "mimo_audio",
        "parakeet",
        "qwen3tts_spkenc",
        "qwen3tts_gen",
        "pockettts_spkenc",
        "pockettts_gen",
        "muse-glimmer",
    ]
)

# Where clip_n_mmproj_embd (clip.cpp) reads the output width: (tensor name, dimension), with the
# tensor each type's loader (load_tensors) binds to that field. Types not listed are not checked
# here: llama.cpp checks them when it loads both files.
_OUTPUT_WIDTH: dict[str, tuple[str, int]] = {
    **dict.fromkeys(
        ("mlp", "phi4", "pixtral", "lightonocr", "dots_ocr", "lfm2", "kimivl", "paddleocr", "kimik25", "yasa2"),
        ("mm.2.weight", 1),
    ),
    "ldp": ("mm.model.mb_block.1.block.2.1.bias", 0),
    "ldpv2": ("mm.model.peg.0.bias", 0),
    "resampler": ("resampler.proj.weight", 0),
    # mm_1_b is bound to mm.2.bias for these (the merger's second linear layer)
    **dict.fromkeys(
        ("qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "exaone4_5", "youtuvl", "ling3vl"), ("mm.2.bias", 0)
    ),
    "janus_pro": ("mm.1.bias", 0),
    **dict.fromkeys(("gemma3", "gemma3nv"), ("mm.input_projection.weight", 0)),
    "gemma4v": ("mm.input_projection.weight", 1),
    "idefics3": ("mm.model.fc.weight", 1),
    **dict.fromkeys(("internvl", "nemotron_v2_vl"), ("mm.model.mlp.3.weight", 1)),
}

# Projector types whose tokens per image the plan counts (clip_n_output_tokens): one token per
# patch; patches pooled by n_merge per side (fixed, or per tile for tiled ones); two-by-two merged
# patches of a dynamic resolution up to image_max_pixels.
_PER_PATCH = frozenset({"mlp", "phi4", "janus_pro"})
_POOLED = frozenset({"gemma3", "gemma4v", "idefics3", "internvl", "nemotron_v2_vl", "llama4"})
_TILED = frozenset({"idefics3", "internvl", "nemotron_v2_vl", "llama4"})
_MERGED_2X2 = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "glm4v", "youtuvl", "exaone4_5"})
# The text mtmd.cpp wraps one image in (its img_beg / img_end, mtmd_context's constructor), for the
# types whose image tokens are counted; the model's vocabulary tokenizes it. mlp, phi4, janus_pro and
# nemotron_v2_vl add none; idefics3 adds tokens of its own per tile (not listed: not counted).
_IMAGE_MARKERS: dict[str, tuple[str, str]] = {
    "gemma3": ("<start_of_image>", "<end_of_image>"),
    "gemma4v": ("<|image>", "<image|>"),
    "internvl": ("<img>", "</img>"),
    "llama4": ("<|image_start|>", "<|image_end|>"),
    "qwen2vl_merger": ("<|vision_start|>", "<|vision_end|>"),
    "qwen2.5vl_merger": ("<|vision_start|>", "<|vision_end|>"),
    "qwen3vl_merger": ("<|vision_start|>", "<|vision_end|>"),
    "youtuvl": ("<|vision_start|>", "<|vision_end|>"),
    "glm4v": ("<|begin_of_image|>", "<|end_of_image|>"),
    "exaone4_5": ("<vision>", "</vision>"),
}


@dataclass(frozen=True)
class ProjectorSpec:
    """What the plan needs from a projector file's header."""

    path: Path
    projector_type: str
    has_vision: bool
    output_embd: int  # width of the embeddings it hands the language model
    image_size: int
    patch_size: int
    n_merge: int  # patches pooled (or merged) per side; 1 when none
    image_max_pixels: int  # dynamic resolution's largest image; 0 for a fixed size
    weight_bytes: int  # what clip.cpp allocates for the tensors (ggml_nbytes of each)
    n_tensors: int

    @property
    def image_tokens(self) -> int | None:
        """Tokens one image takes in the context at most (per tile for tiled projectors), from
        clip.cpp's clip_n_output_tokens; None for a type whose rule the plan does not know."""
        t = self.projector_type
        if self.patch_size <= 0:
            return None
        if t in _MERGED_2X2 and self.image_max_pixels > 0:
            return self.image_max_pixels // (self.patch_size * 2) ** 2
        side = self.image_size // self.patch_size
        if t in _PER_PATCH:
            return side * side
        if t in _POOLED and self.n_merge > 0:
            return side * side // (self.n_merge * self.n_merge)
        return None

    @property
    def image_markers(self) -> tuple[str, ...]:
        """The text mtmd wraps each image in, as the model's vocabulary tokenizes it (Gemma 3's
        `<start_of_image>` and `<end_of_image>`); () where it adds none."""
        return _IMAGE_MARKERS.get(self.projector_type, ())

    @property
    def tiled(self) -> bool:
        """Large images are cut into tiles of image_size, each taking image_tokens."""
        return self.projector_type in _TILED

    @property
    def dynamic(self) -> bool:
        return self.projector_type in _MERGED_2X2 and self.image_max_pixels > 0

    def tokens_text(self) -> str:
        """How many context tokens an image takes, in words (plan, inspect)."""
        n = self.image_tokens
        if n is None:
            return f"tokens per image not counted for projector type {self.projector_type}"
        if self.dynamic:
            return f"up to {n:,} tokens per image (dynamic resolution, {self.image_max_pixels:,} pixels at most)"
        if self.tiled:
            return f"{n:,} tokens per {self.image_size}x{self.image_size} tile (large images take several tiles)"
        return f"{n:,} tokens per image ({self.image_size}x{self.image_size})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["has_vision"]  # always True: a projector without vision is refused
        d.update(path=str(self.path), image_tokens=self.image_tokens, image_tokens_text=self.tokens_text())
        return d


def read_projector(path: str | os.PathLike[str], gguf: GGUFFile | None = None) -> ProjectorSpec:
    """The projector in `path`; a one-line UserError when it is not one llama.cpp can load."""
    f = gguf or read_gguf(path)
    p = Path(path)
    meta = f.metadata
    if meta.get("general.architecture") != "clip":
        raise GGUFError(
            p, f"not a vision projector (architecture {meta.get('general.architecture')!r}, expected 'clip')"
        )
    ptype = meta.get("clip.projector_type") or meta.get("clip.vision.projector_type")
    if not isinstance(ptype, str) or not ptype:
        raise GGUFError(p, "projector file names no projector type (clip.projector_type)")
    if ptype not in LLAMA_CPP_PROJECTOR_TYPES:
        raise GGUFError(p, f"projector type {ptype!r} is not one this llama.cpp knows")
    has_vision = bool(meta.get("clip.has_vision_encoder", False))
    if not has_vision:
        raise GGUFError(p, f"projector {ptype!r} has no vision encoder (an audio-only projector)")
    by_name = {t.name: t for t in f.tensors}
    width_at = _OUTPUT_WIDTH.get(ptype)
    output_embd = 0  # unknown: not checked here
    if width_at is not None and width_at[0] in by_name:
        output_embd = by_name[width_at[0]].shape[width_at[1]]
        if ptype == "qwen3vl_merger":  # the main path and each deepstack layer's, side by side
            output_embd *= 1 + sum(1 for n in by_name if n.startswith("v.deepstack.") and n.endswith(".fc2.weight"))
    image_size = int(meta.get("clip.vision.image_size", 0) or 0)
    patch_size = int(meta.get("clip.vision.patch_size", 0) or 0)
    if patch_size <= 0 or image_size <= 0:
        raise GGUFError(p, "projector header lacks clip.vision.image_size or clip.vision.patch_size")
    n_merge = int(
        meta.get("clip.vision.projector.scale_factor", 0) or meta.get("clip.vision.spatial_merge_size", 0) or 0
    )
    if ptype == "gemma3" and n_merge == 0:
        n_merge = 4  # clip.cpp's default for the Gemma 3 family
    return ProjectorSpec(
        path=p,
        projector_type=ptype,
        has_vision=has_vision,
        output_embd=output_embd,
        image_size=image_size,
        patch_size=patch_size,
        n_merge=max(n_merge, 1),
        image_max_pixels=int(meta.get("clip.vision.image_max_pixels", 0) or 0),
        weight_bytes=sum(t.n_bytes for t in f.tensors),
        n_tensors=len(f.tensors),
    )


def model_input_embd(spec: ModelSpec, metadata: Mapping[str, Any] | None = None) -> int:
    """The width llama.cpp expects image embeddings in (llama_model_n_embd_inp): n_embd, times
    one plus the deepstack layers of Qwen3-VL-style models (a key ModelSpec does not keep: the
    header's metadata, or the local file's header read again, which takes milliseconds)."""
    meta = metadata if metadata is not None else read_gguf(spec.path).metadata
    deep = meta.get(f"{spec.architecture}.n_deepstack_layers", 0) or 0
    return spec.n_embd * (1 + int(deep))


def check_projector(proj: ProjectorSpec, model_embd: int, model_name: str) -> None:
    """Refuse, before anything loads, a projector whose embeddings the model cannot take (mtmd
    refuses it only after loading both files)."""
    if proj.output_embd <= 0:
        return  # a type whose width this reader does not know: llama.cpp checks it at load
    if proj.output_embd != model_embd:
        raise UserError(
            f"{proj.path.name} does not fit {model_name}: the projector outputs embeddings of "
            f"{proj.output_embd}, the model takes {model_embd}"
        )


def projectors_beside(model_path: str | os.PathLike[str]) -> list[Path]:
    """mmproj*.gguf files in the model's folder (how Hub repos and llama.cpp's -hf name them)."""
    folder = Path(model_path).parent
    try:
        found = [
            q
            for q in folder.iterdir()
            if q.is_file() and q.name.lower().startswith("mmproj") and q.suffix.lower() == ".gguf"
        ]
    except OSError:
        return []
    return sorted(found)


def fits(proj: ProjectorSpec, model_embd: int) -> bool:
    """Known to fit: what picking a projector among several needs (an unknown width is no match)."""
    return proj.output_embd == model_embd


def matching_projector(spec: ModelSpec) -> Path | None:
    """The first projector beside the model that fits it; None when there is none. Files that are
    not projectors or do not fit are passed over (a folder may hold several models' projectors)."""
    want = model_input_embd(spec)
    for candidate in projectors_beside(spec.path):
        try:
            if fits(read_projector(candidate), want):
                return candidate
        except UserError:
            continue
    return None
