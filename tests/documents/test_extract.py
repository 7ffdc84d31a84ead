"""Extraction: each format to blocks with pages and sections; every refusal has a clear message."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from tests.documents.writers import write_docx, write_encrypted_pdf, write_pdf, write_scanned_pdf
from vrampilot.documents import (
    BinaryFile,
    DocumentError,
    EmptyDocument,
    EncryptedPdf,
    ExtractionCancelled,
    ScannedPdf,
    UnknownEncoding,
    UnsupportedFormat,
    extract,
)


def test_pdf_keeps_page_numbers_and_marks_them(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "a.pdf", [["Valves are checked yearly.", "A hyphen-\nated word."], ["Page two."]])
    progress: list[float] = []
    doc = extract(pdf, progress=lambda f, _t: progress.append(f))
    assert doc.kind == "pdf" and doc.n_pages == 2
    assert [b.page for b in doc.blocks] == [1, 2]
    assert "hyphenated word" in doc.blocks[0].text
    text = doc.text()
    assert text.index("[page 1]") < text.index("Valves") < text.index("[page 2]") < text.index("Page two.")
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert len(doc.sha256) == 64


def test_scanned_pdf_says_to_run_ocr(tmp_path: Path) -> None:
    with pytest.raises(ScannedPdf, match=r"none of its 2 pages has a text layer.*OCR"):
        extract(write_scanned_pdf(tmp_path / "scan.pdf", 2))


def test_pdf_with_some_image_pages_warns_which(tmp_path: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    text = write_pdf(tmp_path / "t.pdf", [["Real text here."]])
    scan = write_scanned_pdf(tmp_path / "s.pdf", 1)
    w = PdfWriter()
    for p in (*PdfReader(str(text)).pages, *PdfReader(str(scan)).pages):
        w.add_page(p)
    mixed = tmp_path / "mixed.pdf"
    with mixed.open("wb") as f:
        w.write(f)
    doc = extract(mixed)
    assert doc.n_pages == 2 and doc.warnings == ("1 of 2 pages have no text layer (scanned or images only): 2",)


def test_encrypted_pdf_asks_for_an_unprotected_copy(tmp_path: Path) -> None:
    with pytest.raises(EncryptedPdf, match=r"password-protected.*unprotected copy"):
        extract(write_encrypted_pdf(tmp_path / "locked.pdf"))


def test_pdf_with_only_an_owner_password_opens(tmp_path: Path) -> None:
    doc = extract(write_encrypted_pdf(tmp_path / "restricted.pdf", user_password=False))
    assert "Confidential numbers: 42." in doc.text()


def test_damaged_pdf_is_a_document_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.7\n" + bytes(random.Random(1).randrange(256) for _ in range(500)))
    with pytest.raises(DocumentError, match=r"bad\.pdf"):
        extract(bad)


def test_text_encodings(tmp_path: Path) -> None:
    cases = {
        "utf8.txt": "Grüße, naïve café — “quotes”.".encode(),
        "bom16.txt": "Grüße aus Köln.".encode("utf-16"),
        "latin.txt": "Café crème, déjà vu, naïve façade. Les élèves étudient.\n".encode("cp1252") * 3,
        "cyr.txt": "Привет, как дела? Это длинный текст на русском языке.\n".encode("cp1251") * 3,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    assert extract(tmp_path / "utf8.txt").text() == "Grüße, naïve café — “quotes”."
    assert extract(tmp_path / "bom16.txt").text() == "Grüße aus Köln."
    latin = extract(tmp_path / "latin.txt")
    assert latin.text().startswith("Café crème, déjà vu") and latin.warnings == ("read as cp1252",)
    assert extract(tmp_path / "cyr.txt").text().startswith("Привет, как дела?")


def test_binary_and_unknown_encoding_are_refused(tmp_path: Path) -> None:
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "noise.txt").write_bytes(bytes(random.Random(1).randrange(0x80, 0x100) for _ in range(3000)))
    (tmp_path / "program").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))
    with pytest.raises(BinaryFile, match="binary file, not text"):
        extract(tmp_path / "blob.txt")
    with pytest.raises(BinaryFile):
        extract(tmp_path / "program")
    with pytest.raises(UnknownEncoding, match="save it as UTF-8"):
        extract(tmp_path / "noise.txt")


def test_markdown_sections_and_fences(tmp_path: Path) -> None:
    md = tmp_path / "notes.md"
    md.write_text(
        "# Guide\n\nIntro text.\n\n## Install\n\nRun this:\n\n```sh\n# not a heading\npip install x\n```\n\n"
        "Setext\n------\n\nUnder setext.\n"
    )
    doc = extract(md)
    assert doc.kind == "markdown"
    by_text = {b.text: b for b in doc.blocks}
    assert by_text["Intro text."].section == "Guide"
    fence = next(b for b in doc.blocks if b.text.startswith("```sh"))
    assert "# not a heading" in fence.text and fence.section == "Guide > Install" and not fence.is_heading
    assert by_text["Under setext."].section == "Guide > Setext"


def test_docx_headings_and_tables(tmp_path: Path) -> None:
    path = write_docx(
        tmp_path / "r.docx",
        [("Intro", ["Hello world."]), ("Results", ["Latency fell by 30%."])],
        table=[["metric", "value"], ["p50", "12 ms"]],
    )
    doc = extract(path)
    assert doc.kind == "docx" and doc.n_pages is None
    lat = next(b for b in doc.blocks if b.text.startswith("Latency"))
    assert lat.section == "Results"
    assert any(b.text == "metric | value\np50 | 12 ms" for b in doc.blocks)


def test_html_drops_scripts_and_navigation(tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    page.write_text(
        "<html><head><title>t</title><script>var secret=1;</script><style>p{}</style></head><body>"
        "<nav>Home | About</nav><h1>Title</h1><p>Para <b>bold</b> &amp; more.</p><h2>Sub</h2>"
        "<ul><li>one</li><li>two</li></ul><table><tr><td>a</td><td>b</td></tr></table></body></html>"
    )
    doc = extract(page)
    text = doc.text()
    assert "secret" not in text and "Home | About" not in text
    assert "Para bold & more." in text and "- one" in text and "a | b" in text
    assert next(b for b in doc.blocks if b.text == "- two").section == "Title > Sub"


def test_source_code_is_fenced_with_its_language(tmp_path: Path) -> None:
    src = tmp_path / "tool.py"
    src.write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    doc = extract(src)
    assert doc.kind == "code" and doc.language == "python"
    assert doc.text() == "```python\ndef f():\n    return 1\n\ndef g():\n    return 2\n```"


def test_refusals_with_advice(tmp_path: Path) -> None:
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    (tmp_path / "empty.txt").write_text("  \n\n ")
    with pytest.raises(UnsupportedFormat, match=r"save it as \.docx"):
        extract(tmp_path / "old.doc")
    with pytest.raises(EmptyDocument, match="no text"):
        extract(tmp_path / "empty.txt")
    with pytest.raises(DocumentError, match="file not found"):
        extract(tmp_path / "missing.pdf")


def test_cancel_stops_a_pdf_between_pages(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "long.pdf", [[f"Page {i} text."] for i in range(30)])
    cancel = threading.Event()

    def progress(fraction: float, _what: str) -> None:
        if fraction > 0.2:
            cancel.set()

    with pytest.raises(ExtractionCancelled, match="cancelled"):
        extract(pdf, progress=progress, cancel=cancel)
