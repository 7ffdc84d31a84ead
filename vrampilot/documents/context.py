"""What the model is given for each question, and which passages a reply cites.

Full mode: the documents go into the system message, ahead of the whole conversation, so every
follow-up shares that prefix with the turn before and llama.cpp evaluates only the new tokens.

Retrieval mode: the system message holds only the instructions; each question's user turn carries
its numbered excerpts ("[2] report.pdf, p. 12"). What a turn carried is recorded, and earlier turns
are re-sent exactly as they were, so the cache prefix still matches and follow-ups stay cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from vrampilot.documents.blocks import Document
from vrampilot.documents.bm25 import BM25
from vrampilot.documents.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS, Chunk, chunk_document
from vrampilot.documents.fit import DEFAULT_REPLY_TOKENS, TEMPLATE_TOKENS, FitReport, analyze_fit
from vrampilot.documents.tokens import TokenCounter
from vrampilot.gguf import ProjectorSpec
from vrampilot.message import Message
from vrampilot.planner.plan import Plan

Mode = Literal["full", "retrieval"]
MAX_CHUNKS = 8
# Retrieved excerpts may take at most this share of the context: the conversation needs the rest.
RETRIEVAL_SHARE = 0.6

FULL_INSTRUCTIONS = (
    "The user attached the document(s) below. Answer their questions from the documents. "
    "When you use a passage from a PDF, cite its page like (p. 3)."
)
RETRIEVAL_INSTRUCTIONS = (
    "The user attached documents that are too long to read whole. Each question comes with numbered "
    "excerpts from them. Answer from the excerpts and cite the numbers you used, like [2]. "
    "If the excerpts do not contain the answer, say so."
)


@dataclass(frozen=True)
class Attachment:
    document: Document
    tokens: int  # the document as inserted in full mode, in the model's tokens
    chunks: tuple[Chunk, ...]

    @property
    def name(self) -> str:
        return self.document.name

    @property
    def sha256(self) -> str:
        return self.document.sha256


@dataclass(frozen=True)
class GivenChunk:
    n: int  # the number the model sees, [n]
    chunk: Chunk
    score: float

    def to_dict(self) -> dict[str, object]:
        return {"n": self.n, **self.chunk.to_dict(), "score": round(self.score, 3)}


@dataclass(frozen=True)
class ContextGiven:
    """What one question was answered from; shown in "Context given to the model" and saved."""

    mode: Mode
    question: str
    user_content: str  # the user turn exactly as the model read it
    documents: tuple[tuple[str, int, int | None], ...]  # (name, tokens, pages)
    chunks: tuple[GivenChunk, ...] = field(default=())

    @property
    def chunk_tokens(self) -> int:
        return sum(g.chunk.tokens for g in self.chunks)

    def summary(self) -> str:
        if self.mode == "full":
            names = ", ".join(f"{n} ({t} tokens)" for n, t, _ in self.documents)
            return f"Whole document{'s' if len(self.documents) > 1 else ''}: {names}"
        return f"{len(self.chunks)} passages ({self.chunk_tokens} tokens) chosen by BM25 for this question"

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "question": self.question,
            "user_content": self.user_content,
            "documents": [{"name": n, "tokens": t, "pages": p} for n, t, p in self.documents],
            "chunks": [{**g.to_dict(), "text": g.chunk.text} for g in self.chunks],
        }

    @staticmethod
    def from_dict(d: Mapping[str, object]) -> ContextGiven:
        chunks = []
        for c in d.get("chunks", ()):  # type: ignore[attr-defined]  # a JSON dict we wrote (to_dict); its values are as written
            chunk = Chunk(
                doc=c["source"],
                index=c["index"],
                text=c["text"],
                tokens=c["tokens"],
                page_start=c.get("page"),
                page_end=c.get("page_end"),
                section=c.get("section", ""),
            )
            chunks.append(GivenChunk(c["n"], chunk, c.get("score", 0.0)))
        docs = tuple((x["name"], x["tokens"], x.get("pages")) for x in d.get("documents", ()))  # type: ignore[attr-defined]  # a JSON dict we wrote (to_dict); its values are as written
        return ContextGiven(d["mode"], d["question"], d["user_content"], docs, tuple(chunks))  # type: ignore[arg-type]  # a JSON dict we wrote (to_dict); its values are as written


@dataclass(frozen=True)
class Composed:
    messages: list[Message]
    given: ContextGiven


def document_block(doc: Document) -> str:
    pages = f' pages="{doc.n_pages}"' if doc.n_pages else ""
    return f'<document name="{doc.name}"{pages}>\n{doc.text()}\n</document>'


def excerpt_block(given: Sequence[GivenChunk]) -> str:
    parts = ["Excerpts from the attached documents:"]
    for g in given:
        section = f" ({g.chunk.section})" if g.chunk.section and g.chunk.page_start is not None else ""
        parts.append(f"[{g.n}] {g.chunk.label}{section}\n{g.chunk.text}")
    return "\n\n".join(parts)


class DocumentSet:
    """The documents attached to one chat: token counts, chunks, the fit, and prompt composition."""

    def __init__(
        self,
        count: TokenCounter,
        *,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    ) -> None:
        self.count = count
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens
        self._attachments: list[Attachment] = []
        self._index: BM25 | None = None
        self._all_chunks: list[Chunk] = []

    # -- attachments ---------------------------------------------------------------------------
    @property
    def attachments(self) -> list[Attachment]:
        return list(self._attachments)

    def __len__(self) -> int:
        return len(self._attachments)

    def __bool__(self) -> bool:
        return bool(self._attachments)

    def prepare(self, doc: Document) -> Attachment:
        """Count and chunk `doc` without attaching it (slow for long files: a worker calls this)."""
        tokens = self.count(document_block(doc))
        chunks = tuple(
            chunk_document(doc, self.count, target_tokens=self.chunk_tokens, overlap_tokens=self.overlap_tokens)
        )
        return Attachment(doc, tokens, chunks)

    def attach(self, doc: Document) -> Attachment:
        """Prepare and attach `doc`; attaching the same content again replaces it."""
        att = self.prepare(doc)
        self.add_prepared(att)
        return att

    def add_prepared(self, att: Attachment) -> None:
        self._attachments = [a for a in self._attachments if a.sha256 != att.sha256] + [att]
        self._reindex()

    def remove(self, sha256: str) -> None:
        self._attachments = [a for a in self._attachments if a.sha256 != sha256]
        self._reindex()

    def clear(self) -> None:
        self._attachments = []
        self._reindex()

    def _reindex(self) -> None:
        self._all_chunks = [c for a in self._attachments for c in a.chunks]
        self._index = BM25([f"{c.section}\n{c.text}" for c in self._all_chunks]) if self._all_chunks else None

    @property
    def doc_tokens(self) -> int:
        """Tokens of the documents as full mode inserts them, instructions included (each document
        was counted once when attached; the joins add a token or two each)."""
        if not self._attachments:
            return 0
        return sum(a.tokens for a in self._attachments) + self.count(FULL_INSTRUCTIONS) + 2 * len(self._attachments) + 2

    @property
    def hashes(self) -> tuple[str, ...]:
        return tuple(a.sha256 for a in self._attachments)

    def fit(self, plan: Plan, *, reply_tokens: int = DEFAULT_REPLY_TOKENS) -> FitReport:
        return analyze_fit(plan, self.doc_tokens, reply_tokens=reply_tokens)

    # -- retrieval -----------------------------------------------------------------------------
    @property
    def chunks(self) -> list[Chunk]:
        return list(self._all_chunks)

    def rank(self, question: str, k: int | None = None) -> list[tuple[Chunk, float]]:
        if self._index is None:
            return []
        return [(self._all_chunks[i], s) for i, s in self._index.rank(question, k)]

    def retrieve(self, question: str, budget_tokens: int, *, max_chunks: int = MAX_CHUNKS) -> list[GivenChunk]:
        """The best-ranked chunks that fit `budget_tokens`, numbered in rank order; when nothing matches
        the question at all, each document's opening (where summaries usually are)."""
        ranked = self.rank(question)
        if not ranked:
            ranked = [(a.chunks[0], 0.0) for a in self._attachments if a.chunks]
        given: list[GivenChunk] = []
        used = 0
        seen: set[tuple[str, int]] = set()
        for chunk, score in ranked:
            if len(given) >= max_chunks:
                break
            key = (chunk.doc, chunk.index)
            if key in seen or used + chunk.tokens + 16 > budget_tokens:
                continue
            seen.add(key)
            given.append(GivenChunk(len(given) + 1, chunk, score))
            used += chunk.tokens + 16
        return given

    # -- composition ---------------------------------------------------------------------------
    def full_system(self, base: str) -> str:
        docs = "\n\n".join(document_block(a.document) for a in self._attachments)
        return "\n\n".join(p for p in (base.strip(), FULL_INSTRUCTIONS, docs) if p)

    def retrieval_system(self, base: str) -> str:
        names = ", ".join(a.name for a in self._attachments)
        return "\n\n".join(p for p in (base.strip(), RETRIEVAL_INSTRUCTIONS, f"Attached: {names}.") if p)

    def image_tokens(self, projector: ProjectorSpec | None) -> int:
        """Context tokens one image takes: the projector's (clip.cpp's rule) and the text mtmd wraps
        it in, by this model's tokenizer; 0 without a projector or for a type not counted."""
        if projector is None or projector.image_tokens is None:
            return 0
        return projector.image_tokens + sum(self.count(m) for m in projector.image_markers)

    def compose(
        self,
        system_prompt: str,
        history: Sequence[Message],
        question: str,
        *,
        mode: Mode,
        n_ctx: int,
        reply_tokens: int = DEFAULT_REPLY_TOKENS,
        recorded: Mapping[int, str] | None = None,
        question_images: tuple[str, ...] = (),
        projector: ProjectorSpec | None = None,
    ) -> Composed:
        """Messages for the model: system (with documents or instructions), history, the question.

        `history` excludes the system prompt and the new question; `recorded` maps an index in
        `history` to the content a user turn was sent with before (retrieval excerpts), so the
        prompt repeats earlier turns exactly. Every turn keeps its images, and the question gets
        `question_images`; `projector` (the plan's) says what each image takes of the context, so
        retrieval leaves room for them.
        """
        docs = tuple((a.name, a.tokens, a.document.n_pages) for a in self._attachments)
        recorded = recorded or {}
        turns = [
            Message(m.role, recorded[i], m.images) if m.role == "user" and i in recorded else m
            for i, m in enumerate(history)
        ]
        asked = Message("user", question, question_images)
        if mode == "full":
            system = self.full_system(system_prompt)
            msgs = [Message("system", system), *turns, asked]
            return Composed(msgs, ContextGiven("full", question, question, docs))
        system = self.retrieval_system(system_prompt)
        spent = self.count(system) + sum(self.count(m.content) for m in turns) + self.count(question)
        spent += TEMPLATE_TOKENS + 8 * (len(turns) + 2)
        spent += self.image_tokens(projector) * sum(len(m.images) for m in (*turns, asked))
        budget = min(int(n_ctx * RETRIEVAL_SHARE), n_ctx - reply_tokens - spent)
        given = self.retrieve(question, max(budget, 0))
        content = f"{excerpt_block(given)}\n\nQuestion: {question}" if given else question
        msgs = [Message("system", system), *turns, Message("user", content, question_images)]
        return Composed(msgs, ContextGiven("retrieval", question, content, docs, tuple(given)))


_BRACKET = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
_PAGE = re.compile(r"\b(?:p|pp|page|pages)\.?\s*(\d+)", re.IGNORECASE)


def cited_chunks(reply: str, given: ContextGiven) -> list[GivenChunk]:
    """Excerpts the reply cites by number ([2], [1, 3]), in order of first citation."""
    by_n = {g.n: g for g in given.chunks}
    out: list[GivenChunk] = []
    for m in _BRACKET.finditer(reply):
        for part in re.split(r"[,;]", m.group(1)):
            g = by_n.get(int(part))
            if g is not None and g not in out:
                out.append(g)
    return out


def cited_pages(reply: str) -> list[int]:
    pages: list[int] = []
    for m in _PAGE.finditer(reply):
        p = int(m.group(1))
        if p not in pages:
            pages.append(p)
    return pages


def sources_line(reply: str, given: ContextGiven) -> str:
    """One line under a reply: the passages it cites, or the ones it was given when it cites none."""
    if given.mode == "full":
        pages = cited_pages(reply)
        names = ", ".join(n for n, _, _ in given.documents)
        return f"Read whole: {names}" + (f" · cites p. {', '.join(map(str, pages))}" if pages else "")
    cited = cited_chunks(reply, given)
    if cited:
        return "Cites " + "; ".join(f"[{g.n}] {g.chunk.label}" for g in cited)
    if given.chunks:
        return "Given " + "; ".join(f"[{g.n}] {g.chunk.label}" for g in given.chunks)
    return ""
