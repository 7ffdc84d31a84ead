"""The one place that turns byte counts into text and text into byte counts."""

from __future__ import annotations

import re

KIB = 1024
MIB = 1024**2
GIB = 1024**3

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KIB,
    "ki": KIB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MIB,
    "mi": MIB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GIB,
    "gi": GIB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "ti": 1024**4,
}


def format_bytes(n: int | float) -> str:
    """Binary units, as llama.cpp and NVIDIA tools print them (GiB, not GB)."""
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if v >= size:
            return f"{sign}{v / size:.2f} {unit}"
    return f"{sign}{int(v)} B"


def format_count(n: float, decimals: int = 0) -> str:
    """Counts and rates as users read them, thousands separated: 7313 -> '7,313' (a prompt speed),
    1234.56 with one decimal -> '1,234.6'. Every number of tokens or tokens/s shown goes through it.
    A value that is not zero never reads as 0: it keeps two significant digits (0.37 -> '0.37', where
    a prompt speed with the context full read "0 filling the context")."""
    text = f"{n:,.{decimals}f}"
    if n and not any(c in "123456789" for c in text):
        return f"{n:.2g}"
    return text


def format_tokens(n: int) -> str:
    """Context sizes the way users say them: 32768 -> '32K', 1000 -> '1000'."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return format_count(n)


def parse_size(text: str) -> int:
    """'8GiB', '8 GB', '8000MB', '8g' -> bytes. A bare 'G' means GiB: that is what users mean for VRAM."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8GiB, 8000MB, 12GB)")
    value = float(m.group(1))
    unit = (m.group(2) or "").lower()
    if unit in ("k", "m", "g", "t"):
        unit += "i"
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit in {text!r} (use B, KB, MB, GB, KiB, MiB, GiB)")
    return int(value * _UNITS[unit])
