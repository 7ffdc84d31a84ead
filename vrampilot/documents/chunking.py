"""Chunks for retrieval: split at headings and paragraph ends, sized in model tokens, with overlap.

A chunk never mixes two sections: a heading closes the chunk in progress, so a retrieved passage
is about one thing and its label can name the section. Within a section paragraphs are packed up
to `target_tokens`; the next chunk starts with the last paragraph(s) of the previous one (up to
`overlap_tokens`) so an answer that straddles a boundary is whole in at least one chunk. A single
paragraph longer than the target is cut at sentence ends, then at words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vrampilot.documents.blocks import Block, Document
from vrampilot.documents.tokens import TokenCounter

DEFAULT_CHUNK_TOKENS = 256
DEFAULT_OVERLAP_TOKENS = 48

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


@dataclass(frozen=True)
class Chunk:
    doc: str  # the document's file name
    index: int  # position in its document, from 0
    text: str
    tokens: int
    page_start: int | None = None
    page_end: int | None = None
    section: str = ""

    @property
    def where(self) -> str:
        """'p. 12', 'pp. 12-13', '§ Results' or '' — for labels and citations."""
        if self.page_start is not None:
            if self.page_end is not None and self.page_end != self.page_start:
                return f"pp. {self.page_start}-{self.page_end}"
            return f"p. {self.page_start}"
        if self.section:
            return f"§ {self.section.split(' > ')[-1]}"
        return ""

    @property
    def label(self) -> str:
        return f"{self.doc}, {self.where}" if self.where else self.doc

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.doc,
            "index": self.index,
            "page": self.page_start,
            "page_end": self.page_end,
            "section": self.section,
            "tokens": self.tokens,
        }


@dataclass
class _Piece:
    text: str
    tokens: int
    page: int | None
    section: str


def _split_long(block: Block, count: TokenCounter, limit: int) -> list[_Piece]:
    """Cut one oversized block at sentence ends (then words) into pieces of at most `limit` tokens."""
    sentences = [s for s in _SENTENCE_END.split(block.text) if s.strip()]
    units: list[str] = []
    for s in sentences:
        if count(s) <= limit:
            units.append(s)
            continue
        words = s.split(" ")
        cur: list[str] = []
        for w in words:
            if cur and count(" ".join([*cur, w])) > limit:
                units.append(" ".join(cur))
                cur = []
            cur.append(w)
        if cur:
            units.append(" ".join(cur))
    pieces: list[_Piece] = []
    cur_units: list[str] = []
    cur_tokens = 0
    for u in units:
        t = count(u)
        if cur_units and cur_tokens + t > limit:
            text = " ".join(cur_units)
            pieces.append(_Piece(text, count(text), block.page, block.section))
            cur_units, cur_tokens = [], 0
        cur_units.append(u)
        cur_tokens += t + 1
    if cur_units:
        text = " ".join(cur_units)
        pieces.append(_Piece(text, count(text), block.page, block.section))
    return pieces


def _tail(piece: _Piece, count: TokenCounter, budget: int) -> _Piece | None:
    """The last whole sentences of `piece` within `budget` tokens, or None."""
    if budget <= 0:
        return None
    sentences = [s for s in _SENTENCE_END.split(piece.text) if s.strip()]
    taken: list[str] = []
    for s in reversed(sentences[1:]):
        text = " ".join([s, *taken])
        if count(text) > budget:
            break
        taken.insert(0, s)
    if not taken:
        return None
    text = " ".join(taken)
    return _Piece(text, count(text), piece.page, piece.section)


def chunk_document(
    doc: Document,
    count: TokenCounter,
    *,
    target_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    if target_tokens < 16:
        raise ValueError("chunks must be at least 16 tokens")
    overlap_tokens = max(0, min(overlap_tokens, target_tokens // 2))
    pieces: list[_Piece] = []
    breaks: set[int] = set()  # piece indexes that must start a new chunk (headings)
    for b in doc.blocks:
        if b.is_heading:
            breaks.add(len(pieces))
        t = count(b.text)
        if t > target_tokens:
            pieces += _split_long(b, count, target_tokens)
        else:
            pieces.append(_Piece(b.text, t, b.page, b.section))

    chunks: list[Chunk] = []
    cur: list[_Piece] = []
    cur_tokens = 0
    carried = 0  # how many pieces at the start of `cur` are overlap from the previous chunk

    def emit() -> None:
        nonlocal cur, cur_tokens, carried
        if len(cur) > carried:
            text = "\n\n".join(p.text for p in cur)
            pages = [p.page for p in cur if p.page is not None]
            section = next((p.section for p in reversed(cur) if p.section), "")
            chunks.append(
                Chunk(
                    doc=doc.name,
                    index=len(chunks),
                    text=text,
                    tokens=count(text),
                    page_start=min(pages) if pages else None,
                    page_end=max(pages) if pages else None,
                    section=section,
                )
            )

    for i, piece in enumerate(pieces):
        if i in breaks and len(cur) > carried:
            emit()
            cur, cur_tokens, carried = [], 0, 0
        elif i in breaks:
            cur, cur_tokens, carried = [], 0, 0
        if cur and cur_tokens + piece.tokens > target_tokens and len(cur) > carried:
            emit()
            # Overlap: keep trailing pieces of the same section up to the overlap budget.
            keep: list[_Piece] = []
            kept = 0
            for p in reversed(cur):
                if p.section != piece.section:
                    break
                if kept + p.tokens > overlap_tokens:
                    # A paragraph longer than the overlap: carry its closing sentences instead.
                    tail = _tail(p, count, overlap_tokens - kept)
                    if tail is not None:
                        keep.insert(0, tail)
                        kept += tail.tokens
                    break
                keep.insert(0, p)
                kept += p.tokens
            cur, cur_tokens, carried = keep, kept, len(keep)
        cur.append(piece)
        cur_tokens += piece.tokens
    emit()
    return chunks
