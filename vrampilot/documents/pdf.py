"""PDF text layer, page by page (page numbers kept for citations).

A PDF without any text layer is a scan: say so and point to OCR rather than return nothing.
Encrypted files are opened with the empty password when the author set only an owner password
(common: "no printing" restrictions); otherwise the user is told to save an unprotected copy.
"""

from __future__ import annotations

import logging
from pathlib import Path

from vrampilot.documents.blocks import Block, CancelFlag, ProgressFn
from vrampilot.documents.errors import DocumentError, EncryptedPdf, ExtractionCancelled, ScannedPdf
from vrampilot.documents.textfile import paragraphs


def pdf_blocks(path: Path, progress: ProgressFn, cancel: CancelFlag) -> tuple[list[Block], int, list[str]]:
    """(blocks, page count, warnings)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # pypdf warns per odd object; the user can do nothing
    try:
        reader = PdfReader(str(path))
    except (PdfReadError, ValueError, OSError) as exc:
        raise DocumentError(path, f"could not be read as a PDF ({exc})") from None
    if reader.is_encrypted:
        try:
            ok = reader.decrypt("")
        except (DependencyError, NotImplementedError, FileNotDecryptedError, PdfReadError):
            ok = None
        if not ok:
            raise EncryptedPdf(path)
    try:
        pages = reader.pages
        n = len(pages)
    except (FileNotDecryptedError, PdfReadError) as exc:
        if isinstance(exc, FileNotDecryptedError):
            raise EncryptedPdf(path) from None
        raise DocumentError(path, f"could not be read as a PDF ({exc})") from None
    blocks: list[Block] = []
    empty: list[int] = []
    for i in range(n):
        if cancel.is_set():
            raise ExtractionCancelled(path)
        try:
            text = pages[i].extract_text() or ""
        except Exception as exc:  # pypdf raises many types on damaged pages; one bad page is not fatal
            text = ""
            logging.getLogger(__name__).debug("page %d of %s: %s", i + 1, path, exc)
        paras = paragraphs(_join_lines(text))
        if not paras:
            empty.append(i + 1)
        blocks += [Block(p, page=i + 1) for p in paras]
        progress((i + 1) / max(n, 1), f"page {i + 1} of {n}")
    if n and not blocks:
        raise ScannedPdf(path, n)
    warnings = []
    if empty:
        shown = ", ".join(str(p) for p in empty[:10]) + ("…" if len(empty) > 10 else "")
        warnings.append(f"{len(empty)} of {n} pages have no text layer (scanned or images only): {shown}")
    return blocks, n, warnings


def _join_lines(text: str) -> str:
    """pypdf breaks every visual line; keep blank lines as paragraph breaks and join hyphenation."""
    out: list[str] = []
    for line in text.replace("\r", "").split("\n"):
        s = line.rstrip()
        if out and out[-1].endswith("-") and s[:1].islower():
            out[-1] = out[-1][:-1] + s.lstrip()
        else:
            out.append(s)
    return "\n".join(out)
