"""FP8 (e4m3) storage with one power-of-two scale per small group, as DeepSeek-V4 stores its cache.

A power-of-two scale costs one signed byte (the exponent) and rescaling by it is exact, so the only
error is e4m3's own rounding: at most 2^-4 of a value's magnitude for normal numbers (3 mantissa
bits, round to nearest) and at most half the subnormal step, 2^-10 times the group scale, near zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
# Bounds used by the tests and quoted in the docs: relative part and absolute part (times scale).
FP8_REL_ERROR = 2.0**-4
FP8_ABS_ERROR = 2.0**-10


@dataclass(frozen=True)
class Fp8Tensor:
    """Values (..., d) stored as e4m3 bytes plus int8 exponents (..., d // group)."""

    data: torch.Tensor  # float8_e4m3fn, shape (..., d)
    exponent: torch.Tensor  # int8, shape (..., d // group)
    group: int

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.exponent.numel() * self.exponent.element_size()

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        scale = torch.exp2(self.exponent.to(dtype))
        values: torch.Tensor = self.data.to(dtype).unflatten(-1, (-1, self.group)) * scale.unsqueeze(-1)
        return values.flatten(-2)

    def scale(self) -> torch.Tensor:
        """Per-element scale (..., d), for error bounds."""
        return torch.exp2(self.exponent.float()).repeat_interleave(self.group, dim=-1)


def quantize_fp8(x: torch.Tensor, group: int = 32) -> Fp8Tensor:
    """Quantize the last dimension in groups of `group` values, each with the smallest power-of-two
    scale that keeps the group's largest magnitude within e4m3's range."""
    d = x.shape[-1]
    if d % group:
        raise ValueError(f"last dimension {d} is not a multiple of the FP8 group size {group}")
    xg = x.float().unflatten(-1, (d // group, group))
    amax = xg.abs().amax(dim=-1).clamp_min(2.0**-100)
    exponent = torch.ceil(torch.log2(amax / FP8_MAX)).clamp(-127, 127)
    scaled = xg / torch.exp2(exponent).unsqueeze(-1)
    data = scaled.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).flatten(-2)
    return Fp8Tensor(data=data, exponent=exponent.to(torch.int8), group=group)


def cat_fp8(parts: list[Fp8Tensor], dim: int) -> Fp8Tensor:
    """Concatenate along a leading dimension (dim must not be the last one)."""
    group = parts[0].group
    # torch.cat has no float8 kernel on every build: concatenate the raw bytes instead.
    data = torch.cat([p.data.view(torch.uint8) for p in parts], dim=dim).view(FP8_DTYPE)
    return Fp8Tensor(data=data, exponent=torch.cat([p.exponent for p in parts], dim=dim), group=group)
