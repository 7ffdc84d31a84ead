"""Whether a draft model can draft for a target: llama.cpp's own rule, asked before either loads.

llama-server refuses a draft whose vocabulary differs from the target's only after both models
and their contexts are loaded (common/speculative.cpp, common_speculative_are_compatible), and
then it exits. The rule depends on llama.cpp's reading of the vocabulary (its type, whether BOS
and EOS are added by default for that tokenizer and pre-tokenizer, which token each one is), so
it is applied here to llama.cpp's own reading: each file is opened with `vocab_only` (header and
vocabulary, no weights: tens of milliseconds), compared by the same checks in the same order, and
closed. The reason comes back as one line for the user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.llamacpp import binding
from vrampilot.llamacpp.lock import LOG_LOCK

# common/speculative.cpp
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
_VOCAB_TYPES = {0: "none", 1: "SentencePiece", 2: "BPE", 3: "WordPiece", 4: "Unigram", 5: "RWKV", 6: "PLaMo-2"}


@dataclass(frozen=True)
class VocabFacts:
    """What the compatibility rule reads of one vocabulary."""

    vocab_type: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    texts: tuple[bytes, ...]  # every token's text, in id order (none for a file without a vocabulary)

    @property
    def n_tokens(self) -> int:
        return len(self.texts)


def read_vocab(path: str | Path) -> VocabFacts:
    """llama.cpp's reading of the file's vocabulary. Raises ValueError when llama.cpp cannot read it."""
    llama_cpp = binding.load()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with LOG_LOCK:
        model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise ValueError(f"llama.cpp cannot read the vocabulary of {Path(path).name}")
    try:
        return _facts(llama_cpp, llama_cpp.llama_model_get_vocab(model))
    finally:
        llama_cpp.llama_model_free(model)


def _facts(llama_cpp: Any, vocab: Any) -> VocabFacts:
    get_text = llama_cpp.llama_vocab_get_text
    vocab_type = int(llama_cpp.llama_vocab_type(vocab))
    # llama.cpp asserts (and ends the process) when asked a token's text without a vocabulary.
    n = int(llama_cpp.llama_vocab_n_tokens(vocab)) if vocab_type != 0 else 0
    texts = tuple(get_text(vocab, i) or b"" for i in range(n))  # c_char_p: bytes, None for NULL
    return VocabFacts(
        vocab_type=vocab_type,
        add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        bos=int(llama_cpp.llama_vocab_bos(vocab)),
        add_eos=bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        eos=int(llama_cpp.llama_vocab_eos(vocab)),
        texts=texts,
    )


def vocab_mismatch(target: VocabFacts, draft: VocabFacts) -> str | None:
    """Why llama.cpp would refuse `draft` for `target` (common_speculative_are_compatible, its
    checks in its order); None when it accepts it."""
    if target.vocab_type != draft.vocab_type:
        return (
            f"its tokenizer is {_VOCAB_TYPES.get(draft.vocab_type, draft.vocab_type)}, "
            f"the model's is {_VOCAB_TYPES.get(target.vocab_type, target.vocab_type)}"
        )
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return f"its start token differs (adds BOS: {draft.add_bos}, id {draft.bos}; the model: {target.add_bos}, id {target.bos})"
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        return f"its end token differs (adds EOS: {draft.add_eos}, id {draft.eos}; the model: {target.add_eos}, id {target.eos})"
    diff = abs(target.n_tokens - draft.n_tokens)
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return (
            f"its vocabulary has {draft.n_tokens:,} tokens, the model's {target.n_tokens:,} "
            f"(llama.cpp allows a difference of {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})"
        )
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(target.n_tokens, draft.n_tokens)):
        if target.texts[i] != draft.texts[i]:
            return (
                f"token {i} differs ({draft.texts[i].decode('utf-8', 'replace')!r}, "
                f"the model's {target.texts[i].decode('utf-8', 'replace')!r})"
            )
    return None


def draft_refusal(target_path: str | Path, draft_path: str | Path) -> str | None:
    """One line saying why `draft_path` cannot draft for `target_path`, or None when it can."""
    try:
        target, draft = read_vocab(target_path), read_vocab(draft_path)
    except ValueError as exc:
        return str(exc)
    why = vocab_mismatch(target, draft)
    if why is None:
        return None
    return f"{Path(draft_path).name} cannot draft for {Path(target_path).name}: {why}"
