"""Plain text, Markdown and source code: decoding with encoding detection, then blocks.

Decoding order: a BOM decides; then strict UTF-8 (what nearly every file today is); then
charset-normalizer's best guess, accepted only when it reads as language rather than noise.
A NUL byte or many control characters outside a UTF-16 file means binary: such files are refused
instead of handed to the model as garbage.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from charset_normalizer import from_bytes

from vrampilot.documents.blocks import Block
from vrampilot.documents.errors import BinaryFile, UnknownEncoding

SNIFF_BYTES = 64 * 1024
# charset-normalizer's "chaos" (0 = clean text); above this the guess is noise, not a language.
MAX_CHAOS = 0.2
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_CONTROL = set(range(0, 32)) - {9, 10, 12, 13, 27}


def looks_binary(data: bytes) -> bool:
    sample = data[:SNIFF_BYTES]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    controls = sum(1 for b in sample if b in _CONTROL)
    return controls / len(sample) > 0.05


def decode_bytes(data: bytes, path: Path) -> tuple[str, str]:
    """(text, encoding name). Raises BinaryFile or UnknownEncoding."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), encoding
            except UnicodeDecodeError:
                raise UnknownEncoding(path) from None
    if looks_binary(data):
        raise BinaryFile(path)
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    best = from_bytes(data[: 4 * SNIFF_BYTES]).best()
    if best is None or best.chaos > MAX_CHAOS:
        raise UnknownEncoding(path)
    encoding = best.encoding
    if encoding != "cp1252" and (encoding in _LATIN_FAMILIES or best.coherence == 0) and _reads_as_cp1252(data):
        # On short Western European text the detector picks a sibling code page (cp1257 for French);
        # Windows-1252 is by far the most common legacy encoding, so it wins whenever every
        # non-ASCII character it yields is a letter (Polish or Baltic text yields symbols instead).
        encoding = "cp1252"
    elif best.coherence == 0:
        # Random high bytes decode "cleanly" as Big5 or EUC-KR; no recognisable language means noise.
        raise UnknownEncoding(path)
    try:
        return data.decode(encoding), encoding
    except (UnicodeDecodeError, LookupError):
        raise UnknownEncoding(path) from None


_LATIN_FAMILIES = (
    "cp1250",
    "cp1254",
    "cp1257",
    "latin_1",
    "mac_roman",
    "mac_latin2",
    "mac_iceland",
    "mac_turkish",
    "cp775",
    "cp850",
    "cp852",
    *(f"iso8859_{n}" for n in (1, 2, 3, 4, 9, 10, 13, 14, 15, 16)),
)


def _reads_as_cp1252(data: bytes) -> bool:
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return False
    return all(c.isalpha() for c in text if ord(c) > 127)


def read_text(path: Path) -> tuple[str, str]:
    return decode_bytes(path.read_bytes(), path)


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, inner whitespace kept (lists and tables stay readable)."""
    out = []
    for para in re.split(r"\n\s*\n", _normalise(text)):
        para = para.strip("\n").rstrip()
        if para.strip():
            out.append(para)
    return out


def plain_blocks(text: str) -> list[Block]:
    return [Block(p) for p in paragraphs(text)]


_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_blocks(text: str) -> list[Block]:
    """Blocks with the heading path they sit under; fenced code is never split or read as headings."""
    lines = _normalise(text).split("\n")
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    buf: list[str] = []
    in_fence: str | None = None

    def section() -> str:
        return " > ".join(h for _, h in headings)

    def flush() -> None:
        body = "\n".join(buf).strip("\n")
        buf.clear()
        if body.strip():
            blocks.append(Block(body, section=section()))

    def heading(level: int, title: str, raw: str) -> None:
        flush()
        while headings and headings[-1][0] >= level:
            headings.pop()
        headings.append((level, title))
        blocks.append(Block(raw, section=section(), is_heading=True))

    for line in lines:
        fence = _FENCE.match(line)
        if in_fence is not None:
            buf.append(line)
            if fence and fence.group(1) == in_fence:
                in_fence = None
                flush()
            continue
        if fence:
            flush()
            in_fence = fence.group(1)
            buf.append(line)
            continue
        m = _ATX.match(line)
        if m:
            heading(len(m.group(1)), m.group(2).strip(), line.strip())
            continue
        if _SETEXT.match(line) and len(buf) == 1 and buf[0].strip():
            title = buf.pop().strip()
            # "---" under a paragraph line is a level-2 heading, "===" level 1.
            heading(1 if line.strip().startswith("=") else 2, title, f"{title}\n{line.strip()}")
            continue
        if not line.strip():
            flush()
            continue
        buf.append(line)
    flush()
    return blocks


def code_blocks(text: str) -> list[Block]:
    """Source code keeps every line; blank lines between definitions are natural split points."""
    return [Block(p) for p in paragraphs(text)]
