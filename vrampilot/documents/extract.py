"""One entry point from a file to a Document: picks the reader by extension (then by content),
reports progress and honours a cancel flag. Runs on a worker; touches no Qt."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from vrampilot.documents.blocks import CancelFlag, DocKind, Document, ProgressFn
from vrampilot.documents.errors import DocumentError, EmptyDocument, ExtractionCancelled, UnsupportedFormat
from vrampilot.documents.textfile import code_blocks, decode_bytes, markdown_blocks, plain_blocks

TEXT_SUFFIXES = {".txt", ".text", ".log", ".rst", ".csv", ".tsv", ".tex", ".org", ".srt", ".vtt"}
MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdown", ".mkd"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
# Extension -> fence language for source files.
CODE_LANGUAGES = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".jsx": "jsx",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".cs": "csharp",
    ".java": "java",
    ".kt": "kotlin",
    ".go": "go",
    ".rs": "rust",
    ".rb": "ruby",
    ".php": "php",
    ".swift": "swift",
    ".scala": "scala",
    ".sh": "bash",
    ".bash": "bash",
    ".zsh": "zsh",
    ".ps1": "powershell",
    ".bat": "bat",
    ".sql": "sql",
    ".r": "r",
    ".lua": "lua",
    ".pl": "perl",
    ".m": "objectivec",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".ini": "ini",
    ".cfg": "ini",
    ".xml": "xml",
    ".css": "css",
    ".scss": "scss",
    ".vue": "vue",
    ".dart": "dart",
    ".zig": "zig",
    ".cmake": "cmake",
    ".mk": "make",
    ".dockerfile": "dockerfile",
}
CODE_NAMES = {"makefile": "make", "dockerfile": "dockerfile", "cmakelists.txt": "cmake"}
REFUSED = {
    ".doc": "old Word .doc files are not supported: save it as .docx (Word: File > Save As) and attach that",
    ".xls": "spreadsheets are not supported: export the sheet as CSV and attach that",
    ".xlsx": "spreadsheets are not supported: export the sheet as CSV and attach that",
    ".ppt": "presentations are not supported: export it as PDF and attach that",
    ".pptx": "presentations are not supported: export it as PDF and attach that",
    ".odt": "OpenDocument text is not supported: save it as .docx or PDF and attach that",
    ".rtf": "RTF is not supported: save it as .docx or plain text and attach that",
    ".epub": "e-books are not supported: convert it to PDF or HTML and attach that",
}

SUPPORTED_PATTERNS = sorted(
    {"*.pdf", "*.docx", *(f"*{s}" for s in TEXT_SUFFIXES | MARKDOWN_SUFFIXES | HTML_SUFFIXES | set(CODE_LANGUAGES))}
)


def kind_for(path: Path) -> DocKind | None:
    """The reader a file name asks for; None: decide by content."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return "pdf"
    if suffix == ".docx":
        return "docx"
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in TEXT_SUFFIXES:
        return "text"
    if suffix in CODE_LANGUAGES or path.name.lower() in CODE_NAMES:
        return "code"
    return None


def is_supported(path: Path) -> bool:
    """Worth trying (drag and drop accepts these); unknown extensions are tried as text."""
    return path.suffix.lower() not in REFUSED and path.suffix.lower() != ".gguf"


def _sniff(data: bytes) -> DocKind:
    head = data[:2048].lstrip().lower()
    if head.startswith(b"%pdf"):
        return "pdf"
    if head.startswith(b"pk\x03\x04"):
        return "docx"
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    return "text"


def extract(path: str | Path, *, progress: ProgressFn | None = None, cancel: CancelFlag | None = None) -> Document:
    """Read `path` into a Document. Raises a DocumentError subclass with a message for the user."""
    path = Path(path).expanduser()
    report: ProgressFn = progress or (lambda _f, _t: None)
    flag: CancelFlag = cancel or threading.Event()
    if not path.is_file():
        raise DocumentError(path, "file not found" if not path.exists() else "not a file")
    if path.suffix.lower() in REFUSED:
        raise UnsupportedFormat(path, REFUSED[path.suffix.lower()])
    if path.suffix.lower() == ".gguf":
        raise UnsupportedFormat(path, "this is a model file: open it from the Models panel, not as a document")
    report(0.0, "reading")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(path, f"could not be read ({exc.strerror or exc})") from None
    if flag.is_set():
        raise ExtractionCancelled(path)
    sha = hashlib.sha256(data).hexdigest()
    kind = kind_for(path) or _sniff(data)
    warnings: list[str] = []
    n_pages: int | None = None
    language = ""
    if kind == "pdf":
        from vrampilot.documents.pdf import pdf_blocks

        blocks, n_pages, warnings = pdf_blocks(path, report, flag)
    elif kind == "docx":
        from vrampilot.documents.word import docx_blocks

        blocks = docx_blocks(path, report, flag)
    else:
        text, encoding = decode_bytes(data, path)
        if encoding not in ("utf-8", "utf-8-sig", "ascii"):
            warnings.append(f"read as {encoding}")
        if kind == "markdown":
            blocks = markdown_blocks(text)
        elif kind == "html":
            from vrampilot.documents.webpage import html_blocks

            blocks = html_blocks(text)
        elif kind == "code":
            language = CODE_LANGUAGES.get(path.suffix.lower(), CODE_NAMES.get(path.name.lower(), ""))
            blocks = code_blocks(text)
        else:
            blocks = plain_blocks(text)
    if flag.is_set():
        raise ExtractionCancelled(path)
    blocks = [b for b in blocks if b.text.strip()]
    if not blocks:
        raise EmptyDocument(path)
    report(1.0, "done")
    return Document(path, kind, tuple(blocks), sha, n_pages, language, tuple(warnings))
