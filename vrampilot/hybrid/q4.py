"""4-bit storage in llama.cpp's q4_0 format, optionally after a Hadamard rotation.

q4_0 (ggml's quantize_row_q4_0_ref): blocks of 32 values share one f16 scale d = v / -8, where v is
the block's value of largest magnitude (with its sign); each value becomes the 4-bit code
q = min(15, floor(x / d + 8.5)) and reads back as (q - 8) * d. So v itself is exact, every other
value is off by at most |d| / 2, except those near -v, which the clamp at 15 leaves off by at most
|d|: the bound the tests check is |d| (plus the f16 rounding of d). 18 bytes per 32 values.

Keys have a few channels far larger than the rest, and one scale per block spends the 16 levels on
them. An orthonormal Hadamard rotation of each head vector (H H^T = I) spreads every channel over
all of them before quantizing (llama.cpp #21038 does this for its quantized cache; QuaRot, KVQuant
argue the same): dot products are unchanged (q . k = Hq . Hk), and the rounding error, isotropic in
the rotated space, is rotated back with the vector. It costs no bytes: H is fixed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from vrampilot.hybrid.layer_plan import Q4_GROUP


@functools.cache
def hadamard(d: int) -> torch.Tensor:
    """The d x d Sylvester Hadamard matrix scaled to be orthonormal (and symmetric: its own inverse)."""
    if d < 1 or d & (d - 1):
        raise ValueError(f"a Hadamard rotation needs a power-of-two size, not {d}")
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    norm: float = d**0.5
    return h / norm


@dataclass(frozen=True)
class Q4Tensor:
    """Values (..., d) as 4-bit codes, two per byte (..., d // 2), and f16 scales (..., d // group)."""

    data: torch.Tensor  # uint8: code of value 2i in the low nibble, of 2i + 1 in the high one
    scale: torch.Tensor  # float16
    group: int
    rotated: bool

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.data.shape[:-1], self.data.shape[-1] * 2))

    def codes(self) -> torch.Tensor:
        """The 4-bit codes (..., d) as int16 in 0..15."""
        lo = (self.data & 0x0F).to(torch.int16)
        hi = (self.data >> 4).to(torch.int16)
        return torch.stack((lo, hi), dim=-1).flatten(-2)

    def dequantize(self, dtype: torch.dtype = torch.float32, *, rotate_back: bool = True) -> torch.Tensor:
        """The values; rotate_back=False leaves rotated ones in the rotated space, where a reader
        that rotates its queries (and its output) instead saves a d x d product per vector."""
        values: torch.Tensor = (self.codes().to(dtype) - 8).unflatten(-1, (-1, self.group)) * self.scale.to(
            dtype
        ).unsqueeze(-1)
        out = values.flatten(-2)
        if self.rotated and rotate_back:
            out = out @ hadamard(out.shape[-1]).to(dtype)  # H is symmetric and orthonormal: H^-1 = H
        return out

    def narrow(self, dim: int, start: int, length: int) -> Q4Tensor:
        """A slice along a leading dimension (not the last one), sharing nothing with the original."""
        return Q4Tensor(
            self.data.narrow(dim, start, length).clone(),
            self.scale.narrow(dim, start, length).clone(),
            self.group,
            self.rotated,
        )


def quantize_q4(x: torch.Tensor, *, rotate: bool = False, group: int = Q4_GROUP) -> Q4Tensor:
    """q4_0 over the last dimension in blocks of `group` (32 in llama.cpp; smaller only for heads
    smaller than that), after a Hadamard rotation of the whole last dimension with rotate=True."""
    d = x.shape[-1]
    if d % group or group % 2:
        raise ValueError(f"last dimension {d} is not a multiple of the q4 block size {group}")
    xf = x.float()
    if rotate:
        xf = xf @ hadamard(d)
    xg = xf.unflatten(-1, (d // group, group))
    idx = xg.abs().argmax(dim=-1, keepdim=True)
    vmax = xg.gather(-1, idx).squeeze(-1)  # the signed value of largest magnitude
    scale = vmax / -8.0
    inv = torch.where(scale != 0, 1.0 / scale, torch.zeros_like(scale))
    codes = torch.clamp(torch.floor(xg * inv.unsqueeze(-1) + 8.5), 0, 15).to(torch.uint8).flatten(-2)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return Q4Tensor(data=packed, scale=scale.to(torch.float16), group=group, rotated=rotate)


def cat_q4(parts: list[Q4Tensor], dim: int) -> Q4Tensor:
    """Concatenate along a leading dimension (dim must not be the last one)."""
    first = parts[0]
    return Q4Tensor(
        torch.cat([p.data for p in parts], dim=dim),
        torch.cat([p.scale for p in parts], dim=dim),
        first.group,
        first.rotated,
    )
