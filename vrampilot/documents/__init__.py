"""Documents in a chat: PDF/TXT/Markdown/DOCX/HTML/code to text, token counts in the model's own
tokenizer, the fit against the plan (with the planner's re-plan), BM25 retrieval with cited
sources, and saved KV states. Qt-free: the CLI, the GUI and the benchmarks share it.

Its API is `__all__`, each name imported on first use (vrampilot/lazy_api.py): opening the
documents database (store.py) loads neither the tokenizer nor the planner.
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
    from vrampilot.documents.blocks import Block, Document
    from vrampilot.documents.chunking import Chunk, chunk_document
    from vrampilot.documents.context import (
        Attachment,
        Composed,
        ContextGiven,
        DocumentSet,
        GivenChunk,
        cited_chunks,
        cited_pages,
        sources_line,
    )
    from vrampilot.documents.errors import (
        BinaryFile,
        DocumentError,
        EmptyDocument,
        EncryptedPdf,
        ExtractionCancelled,
        ScannedPdf,
        UnknownEncoding,
        UnsupportedFormat,
    )
    from vrampilot.documents.extract import SUPPORTED_PATTERNS, extract, is_supported
    from vrampilot.documents.fit import FitReport, analyze_fit, needed_context, nice_ctx, tokens_text
    from vrampilot.documents.kvstate import KvStateStore, state_key
    from vrampilot.documents.store import DocumentStore
    from vrampilot.documents.tokens import TokenCounter, Tokenizer, tokenizer_for

__all__ = [
    "SUPPORTED_PATTERNS",
    "Attachment",
    "BinaryFile",
    "Block",
    "Chunk",
    "Composed",
    "ContextGiven",
    "Document",
    "DocumentError",
    "DocumentSet",
    "DocumentStore",
    "EmptyDocument",
    "EncryptedPdf",
    "ExtractionCancelled",
    "FitReport",
    "GivenChunk",
    "KvStateStore",
    "ScannedPdf",
    "TokenCounter",
    "Tokenizer",
    "UnknownEncoding",
    "UnsupportedFormat",
    "analyze_fit",
    "chunk_document",
    "cited_chunks",
    "cited_pages",
    "extract",
    "is_supported",
    "needed_context",
    "nice_ctx",
    "sources_line",
    "state_key",
    "tokenizer_for",
    "tokens_text",
]

# Each module and the names of the API it holds.
_HOLDERS = {
    "blocks": ("Block", "Document"),
    "chunking": ("Chunk", "chunk_document"),
    "context": (
        "Attachment",
        "Composed",
        "ContextGiven",
        "DocumentSet",
        "GivenChunk",
        "cited_chunks",
        "cited_pages",
        "sources_line",
    ),
    "errors": (
        "BinaryFile",
        "DocumentError",
        "EmptyDocument",
        "EncryptedPdf",
        "ExtractionCancelled",
        "ScannedPdf",
        "UnknownEncoding",
        "UnsupportedFormat",
    ),
    "extract": ("SUPPORTED_PATTERNS", "extract", "is_supported"),
    "fit": ("FitReport", "analyze_fit", "needed_context", "nice_ctx", "tokens_text"),
    "kvstate": ("KvStateStore", "state_key"),
    "store": ("DocumentStore",),
    "tokens": ("TokenCounter", "Tokenizer", "tokenizer_for"),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
