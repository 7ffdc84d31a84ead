"""Documents tests count tokens with the embedded SmolLM2's own tokenizer (vocab-only, ~0.3 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vrampilot.documents import Tokenizer, tokenizer_for


@pytest.fixture(scope="session")
def tokenizer(embedded_model: Path) -> Tokenizer:
    return tokenizer_for(embedded_model)
