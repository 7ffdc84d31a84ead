"""Errors a user causes by attaching a file; each message says what is wrong and what to do."""

from __future__ import annotations

from pathlib import Path

from vrampilot.errors import UserError


class DocumentError(UserError):
    """A file could not be turned into text for the model."""

    def __init__(self, path: Path | str, text: str) -> None:
        self.path = Path(path)
        super().__init__(f"{self.path.name}: {text}")


class UnsupportedFormat(DocumentError):
    pass


class ScannedPdf(DocumentError):
    def __init__(self, path: Path | str, pages: int) -> None:
        super().__init__(
            path,
            f"none of its {pages} pages has a text layer (it looks scanned): run OCR on it first "
            "(for example `ocrmypdf in.pdf out.pdf`) and attach the result",
        )


class EncryptedPdf(DocumentError):
    def __init__(self, path: Path | str) -> None:
        super().__init__(
            path,
            "the PDF is password-protected: open it with its password and save or print an unprotected copy, "
            "then attach that",
        )


class BinaryFile(DocumentError):
    def __init__(self, path: Path | str) -> None:
        super().__init__(
            path,
            "this is a binary file, not text: attach a PDF, Word (.docx), HTML, Markdown, plain-text or source file",
        )


class UnknownEncoding(DocumentError):
    def __init__(self, path: Path | str) -> None:
        super().__init__(
            path,
            "the text encoding could not be recognised: save it as UTF-8 (most editors offer this under "
            "'Save as') and attach it again",
        )


class EmptyDocument(DocumentError):
    def __init__(self, path: Path | str) -> None:
        super().__init__(path, "there is no text in this file")


class ExtractionCancelled(DocumentError):
    def __init__(self, path: Path | str) -> None:
        super().__init__(path, "reading was cancelled")
