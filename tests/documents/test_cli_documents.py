"""`vrampilot chat --document`: the fit message on stderr, full text or retrieval, and --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.documents.writers import long_report, write_pdf, write_scanned_pdf
from vrampilot.cli import main

FAST = ["--ctx", "1024", "--threads", "1", "--threads-batch", "1", "--cpu-only", "--temperature", "0", "--seed", "1"]


@pytest.mark.slow
def test_small_document_is_given_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe spare key is under the blue flower pot.\n")
    code = main(
        ["chat", "--prompt", "Where is the spare key?", "--document", str(note), "--max-tokens", "6", "--json", *FAST]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "vrampilot: note.md: " in captured.err and "fits: " in captured.err and "of 1K context" in captured.err
    out = json.loads(captured.out)
    (doc,) = out["documents"]
    assert doc["name"] == "note.md" and doc["mode"] == "full" and doc["chunks"] == [] and doc["pages"] is None
    assert doc["tokens"] > 10 and out["fit"]["status"] == "fits"
    assert out["stats"]["prompt_tokens"] > doc["tokens"]


@pytest.mark.slow
def test_long_pdf_and_a_second_file_use_retrieval_with_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = long_report()
    sections = report.markdown.split("\n## ")
    pages = [[p for p in ("## " + s).split("\n\n") if p.strip()] for s in sections[1:]]
    pdf = write_pdf(tmp_path / "review.pdf", pages)
    extra = tmp_path / "extra.txt"
    extra.write_text("Unrelated notes about lunch.\n")
    q = next(x for x in report.questions if x.text.startswith("Who was the chief engineer"))
    code = main(
        [
            "chat",
            "--prompt",
            q.text,
            "--document",
            str(pdf),
            "--document",
            str(extra),
            "--max-tokens",
            "4",
            "--json",
            *FAST,
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert f"review.pdf: {len(pages)} pages, " in captured.err
    assert "needs " in captured.err and "the current plan has 1K" in captured.err
    assert "run again with --ctx" in captured.err
    out = json.loads(captured.out)
    assert out["fit"]["status"] == "replan" and out["fit"]["mode"] == "retrieval"
    by_name = {d["name"]: d for d in out["documents"]}
    assert set(by_name) == {"review.pdf", "extra.txt"}
    pdf_doc = by_name["review.pdf"]
    assert pdf_doc["mode"] == "retrieval" and pdf_doc["pages"] == len(pages)
    first = min((c for d in out["documents"] for c in d["chunks"]), key=lambda c: c["n"])
    assert first["source"] == "review.pdf" and isinstance(first["page"], int)
    assert {"n", "source", "page", "section", "tokens", "score", "cited"} <= set(first)
    assert out["stats"]["prompt_tokens"] + 4 <= 1024


def test_unreadable_document_fails_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scan = write_scanned_pdf(tmp_path / "scan.pdf", 1)
    code = main(["chat", "--prompt", "hi", "--document", str(scan), *FAST])
    assert code == 2
    err = capsys.readouterr().err
    assert "scan.pdf: none of its 1 pages has a text layer" in err and "OCR" in err
