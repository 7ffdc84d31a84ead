"""Word .docx: paragraphs with their heading path (from the "Heading N" / "Title" styles) and
tables as pipe-separated rows, in document order. A .docx has no pages until a word processor
lays it out, so blocks carry no page number."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from vrampilot.documents.blocks import Block, CancelFlag, ProgressFn
from vrampilot.documents.errors import DocumentError, ExtractionCancelled

_HEADING = re.compile(r"^(?:Heading|Überschrift|Titre)\s*(\d)$", re.IGNORECASE)


def docx_blocks(path: Path, progress: ProgressFn, cancel: CancelFlag) -> list[Block]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise DocumentError(path, f"could not be read as a Word .docx file ({exc})") from None
    items = list(document.iter_inner_content())
    headings: list[tuple[int, str]] = []
    blocks: list[Block] = []
    for i, item in enumerate(items):
        if cancel.is_set():
            raise ExtractionCancelled(path)
        if isinstance(item, Paragraph):
            text = item.text.strip()
            if not text:
                continue
            style = item.style.name if item.style is not None else ""
            level = _heading_level(style or "")
            if level is not None:
                while headings and headings[-1][0] >= level:
                    headings.pop()
                headings.append((level, text))
                blocks.append(Block(text, section=" > ".join(h for _, h in headings), is_heading=True))
            else:
                blocks.append(Block(text, section=" > ".join(h for _, h in headings)))
        elif isinstance(item, Table):
            rows = []
            for row in item.rows:
                cells = [c.text.strip().replace("\n", " ") for c in row.cells]
                rows.append(" | ".join(cells))
            if rows:
                blocks.append(Block("\n".join(rows), section=" > ".join(h for _, h in headings)))
        if i % 50 == 0 or i == len(items) - 1:
            progress((i + 1) / len(items), f"paragraph {i + 1} of {len(items)}")
    return blocks


def _heading_level(style: str) -> int | None:
    if style.lower() == "title":
        return 1
    m = _HEADING.match(style.strip())
    return int(m.group(1)) if m else None
