"""4-bit storage (llama.cpp's q4_0, optionally after a Hadamard rotation): the round-trip error
bound, the bytes it costs, and what the rotation preserves."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

from vrampilot.hybrid.layer_plan import vector_bytes
from vrampilot.hybrid.q4 import Q4Tensor, cat_q4, hadamard, quantize_q4


def _block_scale(q: Q4Tensor, d: int) -> torch.Tensor:
    return q.scale.float().abs().repeat_interleave(32, dim=-1)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 37.0, 1e3])
def test_round_trip_error_bound(scale: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 50, 64) * scale
    x[0, 0, :32] = 0.0  # an all-zero block must come back as zeros
    x[1, 1, 5] = 40.0 * scale  # an outlier channel
    q = quantize_q4(x)
    back = q.dequantize()
    d = _block_scale(q, 64)
    # Every value within one step |d| (the clamp at code 15 costs a full step; round to nearest
    # half of one elsewhere); the f16 rounding of d adds at most 2^-11 of 8 steps.
    assert torch.all((back - x).abs() <= d * (1 + 8 * 2.0**-11) + 1e-30)
    assert torch.all(back[0, 0, :32] == 0)
    # The largest magnitude of each block is exact up to the f16 rounding of d.
    blocks = x.unflatten(-1, (2, 32))
    idx = blocks.abs().argmax(-1, keepdim=True)
    assert torch.allclose(back.unflatten(-1, (2, 32)).gather(-1, idx), blocks.gather(-1, idx), rtol=2.0**-10)
    assert q.codes().min() >= 0 and q.codes().max() <= 15


def test_rotation_is_orthonormal_and_the_bound_holds_in_rotated_space() -> None:
    h = hadamard(64)
    assert torch.allclose(h @ h, torch.eye(64), atol=1e-6) and torch.equal(h, h.T)
    torch.manual_seed(1)
    x = torch.randn(2, 40, 64)
    x[..., 3] *= 30.0  # keys have a few large channels; the rotation spreads them over all 64
    q = quantize_q4(x, rotate=True)
    back = q.dequantize()
    # The error is bounded per value in the rotated space, and the rotation back keeps its norm.
    err_rot = (back - x) @ h
    assert torch.all(err_rot.abs() <= _block_scale(q, 64) * (1 + 8 * 2.0**-11) + 1e-30)
    assert torch.allclose((back - x).norm(dim=-1), err_rot.norm(dim=-1), rtol=1e-4)
    # And with an outlier channel the rotated error is well below the plain one.
    plain = quantize_q4(x).dequantize()
    assert (back - x).norm() < 0.5 * (plain - x).norm()
    # Dot products (attention logits) are what the rotation preserves exactly before rounding.
    qv = torch.randn(64)
    assert torch.allclose((x @ h) @ (qv @ h), x @ qv, atol=1e-3)


def test_bytes_are_llama_cpp_q4_0s() -> None:
    q = quantize_q4(torch.randn(3, 10, 64))
    assert q.nbytes == 3 * 10 * (64 // 2 + 2 * 2)  # 18 bytes per 32 values
    assert q.nbytes == 3 * 10 * vector_bytes("q4", 64)
    assert q.shape == (3, 10, 64)


def test_concatenation_and_slicing_keep_values() -> None:
    a, b = torch.randn(2, 4, 32), torch.randn(2, 3, 32)
    qa, qb = quantize_q4(a, rotate=True), quantize_q4(b, rotate=True)
    both = cat_q4([qa, qb], dim=1)
    assert both.shape == (2, 7, 32)
    assert torch.allclose(both.dequantize(), torch.cat((qa.dequantize(), qb.dequantize()), dim=1), atol=1e-6)
    assert torch.allclose(both.narrow(1, 4, 3).dequantize(), qb.dequantize(), atol=1e-6)


def test_sizes_must_fit() -> None:
    with pytest.raises(ValueError):
        quantize_q4(torch.randn(4, 48))
    with pytest.raises(ValueError):
        hadamard(48)
