"""FP8 storage: error bounds of the round trip and the bytes it costs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vrampilot.hybrid.fp8 import FP8_ABS_ERROR, FP8_MAX, FP8_REL_ERROR, cat_fp8, quantize_fp8  # noqa: E402


@pytest.mark.parametrize("scale", [1e-4, 1.0, 37.0, 1e4])
def test_round_trip_error_bound(scale: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 50, 64) * scale
    x[0, 0, :32] = 0.0  # an all-zero group must survive
    q = quantize_fp8(x, 32)
    back = q.dequantize()
    bound = FP8_REL_ERROR * x.abs() + FP8_ABS_ERROR * q.scale()
    assert torch.all((back - x).abs() <= bound + 1e-12)
    assert torch.all(back[0, 0, :32] == 0)
    # The scale is the smallest power of two that keeps each group in range.
    amax = x.abs().unflatten(-1, (2, 32)).amax(-1)
    scale_pow = torch.exp2(q.exponent.float())
    nonzero = amax > 0
    assert torch.all(amax[nonzero] / scale_pow[nonzero] <= FP8_MAX)
    assert torch.all(amax[nonzero] / scale_pow[nonzero] > FP8_MAX / 2)


def test_bytes_counted_with_scales() -> None:
    q = quantize_fp8(torch.randn(3, 10, 64), 32)
    assert q.nbytes == 3 * 10 * 64 + 3 * 10 * 2  # one byte per value, one exponent byte per group


def test_concatenation_keeps_values() -> None:
    a, b = torch.randn(2, 4, 32), torch.randn(2, 3, 32)
    qa, qb = quantize_fp8(a, 16), quantize_fp8(b, 16)
    both = cat_fp8([qa, qb], dim=1)
    assert both.shape == (2, 7, 32)
    assert torch.equal(both.dequantize(), torch.cat((qa.dequantize(), qb.dequantize()), dim=1))


def test_group_must_divide() -> None:
    with pytest.raises(ValueError):
        quantize_fp8(torch.randn(4, 48), 32)
