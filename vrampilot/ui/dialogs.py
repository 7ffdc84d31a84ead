"""The window's questions to the user, each one call that returns the answer (None: cancelled).

Kept apart so that the window only decides when to ask, and tests can answer for the user by
replacing one function.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QWidget

from vrampilot.documents import SUPPORTED_PATTERNS
from vrampilot.storage import IMAGE_FILE_SUFFIXES, safe_filename


def confirm(parent: QWidget, title: str, text: str) -> bool:
    """Yes or No, No by default: each question asks before something risky or lasting (load a plan
    that does not fit, delete a chat), so Enter or a stray Space keeps the safe answer."""
    yes, no = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.No
    return QMessageBox.question(parent, title, text, yes | no, no) == yes


def gguf_files(parent: QWidget) -> list[Path]:
    files, _ = QFileDialog.getOpenFileNames(parent, "Open GGUF models", "", "GGUF models (*.gguf);;All files (*)")
    return [Path(f) for f in files]


def model_folder(parent: QWidget) -> Path | None:
    folder = QFileDialog.getExistingDirectory(parent, "Add a folder of GGUF models")
    return Path(folder) if folder else None


def attachments(parent: QWidget) -> list[Path]:
    """Documents and images for the chat, in one dialog (the window sends each kind where it goes)."""
    documents = " ".join(SUPPORTED_PATTERNS)
    images = " ".join("*" + s for s in IMAGE_FILE_SUFFIXES)
    filters = f"Documents and images ({documents} {images});;Images ({images});;Documents ({documents});;All files (*)"
    files, _ = QFileDialog.getOpenFileNames(parent, "Attach documents or images", "", filters)
    return [Path(f) for f in files]


def chat_title(parent: QWidget, current: str) -> str | None:
    title, ok = QInputDialog.getText(parent, "Rename chat", "Title", text=current)
    return title if ok else None


def export_path(parent: QWidget, title: str, fmt: str) -> Path | None:
    ext, filt = (".md", "Markdown (*.md)") if fmt == "markdown" else (".json", "JSON (*.json)")
    path, _ = QFileDialog.getSaveFileName(parent, "Export chat", safe_filename(title) + ext, filt)
    return Path(path) if path else None


def about(parent: QWidget) -> None:
    from vrampilot import __version__

    QMessageBox.about(
        parent,
        "About VRAM Pilot",
        f"VRAM Pilot {__version__}\nPlans llama.cpp settings so a GGUF model fits, explains them, and runs them.",
    )
