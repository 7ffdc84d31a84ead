"""Vision projector headers: what the plan reads from them, and the files refused before any load."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter

from testkit.gguf_models import write_model
from testkit.mmproj import write_projector
from vrampilot.errors import UserError
from vrampilot.gguf import load_model_spec
from vrampilot.gguf.projector import (
    check_projector,
    matching_projector,
    model_input_embd,
    projectors_beside,
    read_projector,
)
from vrampilot.gguf.reader import read_gguf


def test_mlp_projector_header(tmp_path: Path) -> None:
    p = write_projector(tmp_path / "mmproj.gguf", "mlp", n_embd_text=96, image_size=336, patch_size=14)
    spec = read_projector(p)
    assert spec.projector_type == "mlp"
    assert spec.output_embd == 96  # mm.2.weight's ne[1], what clip_n_mmproj_embd reads
    assert spec.image_tokens == (336 // 14) ** 2  # one per patch; the class token is dropped
    assert not spec.dynamic and not spec.tiled
    assert spec.weight_bytes == sum(t.n_bytes for t in read_gguf(p).tensors)


def test_gemma3_projector_pools_patches(tmp_path: Path) -> None:
    p = write_projector(tmp_path / "mmproj.gguf", "gemma3", n_embd_text=160, image_size=224, n_merge=4)
    spec = read_projector(p)
    assert spec.output_embd == 160  # mm.input_projection.weight's ne[0]
    assert spec.image_tokens == (224 // 14 // 4) ** 2


def _clip_file(path: Path, **keys: object) -> Path:
    w = GGUFWriter(str(path), "clip")
    for key, value in keys.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, str(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"clip.has_vision_encoder": True, "clip.projector_type": "warp9"}, "projector type 'warp9' is not one"),
        ({"clip.has_vision_encoder": True}, "names no projector type"),
        ({"clip.has_audio_encoder": True, "clip.projector_type": "ultravox"}, "no vision encoder"),
        ({"clip.has_vision_encoder": True, "clip.projector_type": "mlp"}, "lacks clip.vision.image_size"),
    ],
)
def test_projectors_llama_cpp_cannot_load_are_refused_in_one_line(
    tmp_path: Path, keys: dict[str, object], expected: str
) -> None:
    p = _clip_file(tmp_path / "mmproj.gguf", **keys)
    with pytest.raises(UserError) as err:
        read_projector(p)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_language_model_is_not_a_projector(tmp_path: Path) -> None:
    lm = write_model(tmp_path / "lm.gguf", "llama")
    with pytest.raises(UserError, match="not a vision projector"):
        read_projector(lm)


def test_width_mismatch_is_refused_before_load(tmp_path: Path) -> None:
    lm = load_model_spec(write_model(tmp_path / "lm.gguf", "llama"))  # n_embd 128
    proj = read_projector(write_projector(tmp_path / "mmproj.gguf", "mlp", n_embd_text=96))
    with pytest.raises(UserError) as err:
        check_projector(proj, model_input_embd(lm), lm.path.name)
    assert str(err.value) == (
        "mmproj.gguf does not fit lm.gguf: the projector outputs embeddings of 96, the model takes 128"
    )


def test_the_matching_projector_beside_the_model_is_found(tmp_path: Path) -> None:
    lm = load_model_spec(write_model(tmp_path / "lm.gguf", "llama"))
    assert matching_projector(lm) is None
    write_projector(tmp_path / "mmproj-a-other.gguf", "mlp", n_embd_text=96)  # another model's
    (tmp_path / "mmproj-b-broken.gguf").write_bytes(b"GGUF\x03")  # cut short
    good = write_projector(tmp_path / "mmproj-c.gguf", "gemma3", n_embd_text=128)
    write_model(tmp_path / "other.gguf", "llama")  # not named mmproj: not a candidate
    assert [q.name for q in projectors_beside(lm.path)] == [
        "mmproj-a-other.gguf",
        "mmproj-b-broken.gguf",
        "mmproj-c.gguf",
    ]
    assert matching_projector(lm) == good


def _header_with_tensors(path: Path, ptype: str, tensors: dict[str, tuple[int, ...]]) -> Path:
    """A projector header of `ptype` with these tensors (ggml order), zero-filled."""
    import numpy as np

    w = GGUFWriter(str(path), "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", ptype)
    w.add_uint32("clip.vision.image_size", 448)
    w.add_uint32("clip.vision.patch_size", 14)
    w.add_uint32("clip.vision.image_max_pixels", 448 * 448)
    for name, ne in tensors.items():
        w.add_tensor(name, np.zeros(tuple(reversed(ne)), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_qwen_vl_width_is_read_from_the_mergers_last_layer(tmp_path: Path) -> None:
    # clip.cpp binds mm_1_b to mm.2.bias for the Qwen-VL mergers; mm.0 is the merger's wide layer.
    p = _header_with_tensors(
        tmp_path / "mmproj.gguf",
        "qwen2.5vl_merger",
        {"mm.0.weight": (64, 256), "mm.0.bias": (256,), "mm.2.weight": (256, 96), "mm.2.bias": (96,)},
    )
    spec = read_projector(p)
    assert spec.output_embd == 96
    assert spec.dynamic and spec.image_tokens == 448 * 448 // 28**2


def test_a_type_whose_width_is_unknown_is_left_to_llama_cpp(tmp_path: Path) -> None:
    p = _header_with_tensors(tmp_path / "mmproj-x.gguf", "cogvlm", {"mm.model.fc.weight": (64, 96)})
    spec = read_projector(p)
    assert spec.output_embd == 0
    check_projector(spec, 128, "lm.gguf")  # not refused here: llama.cpp checks it at load
    lm = load_model_spec(write_model(tmp_path / "lm.gguf", "llama"))
    assert matching_projector(lm) is None  # but never picked among others as a match
