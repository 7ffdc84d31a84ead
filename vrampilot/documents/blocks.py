"""What extraction produces: a document as a sequence of text blocks that remember their page and
section, so chunks and citations can say where a passage came from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

DocKind = Literal["pdf", "text", "markdown", "docx", "html", "code"]

# (fraction done 0..1, what is happening) — called from the worker that extracts.
ProgressFn = Callable[[float, str], None]


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Block:
    """A paragraph, list, table row group or code block; never split across pages."""

    text: str
    page: int | None = None  # 1-based PDF page; None where the format has no pages
    section: str = ""  # heading path, e.g. "Results > Latency"
    is_heading: bool = False


@dataclass(frozen=True)
class Document:
    path: Path
    kind: DocKind
    blocks: tuple[Block, ...]
    sha256: str
    n_pages: int | None = None
    language: str = ""  # source code: the fence language
    warnings: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.path.name

    def text(self) -> str:
        """The whole document as the model reads it. PDF page starts are marked so the model can
        cite pages; source code keeps its layout inside a fence."""
        if self.kind == "code":
            body = "\n\n".join(b.text for b in self.blocks)
            return f"```{self.language}\n{body}\n```"
        parts: list[str] = []
        page: int | None = None
        for b in self.blocks:
            if b.page is not None and b.page != page:
                page = b.page
                parts.append(f"[page {page}]")
            parts.append(b.text)
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "sha256": self.sha256,
            "n_pages": self.n_pages,
            "language": self.language,
            "warnings": list(self.warnings),
            "blocks": [[b.text, b.page, b.section, b.is_heading] for b in self.blocks],
        }

    @staticmethod
    def from_dict(d: dict[str, object]) -> Document:
        blocks = tuple(
            Block(str(t), None if p is None else int(p), str(s), bool(h))
            for t, p, s, h in d["blocks"]  # type: ignore[attr-defined]  # a JSON dict we wrote (to_dict); its values are as written
        )
        n_pages = d.get("n_pages")
        return Document(
            path=Path(str(d["path"])),
            kind=d["kind"],  # type: ignore[arg-type]  # a JSON dict we wrote (to_dict); its values are as written
            blocks=blocks,
            sha256=str(d["sha256"]),
            n_pages=None if n_pages is None else int(n_pages),  # type: ignore[call-overload]  # a JSON dict we wrote (to_dict); its values are as written
            language=str(d.get("language", "")),
            warnings=tuple(str(w) for w in d.get("warnings", ())),  # type: ignore[attr-defined]  # a JSON dict we wrote (to_dict); its values are as written
        )
