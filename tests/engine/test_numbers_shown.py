"""Numbers a user reads carry thousands separators, from one helper (issue 58, low): a tiny model
reads prompts at thousands of tokens a second, and "7313 tokens/s" read as a typo."""

from __future__ import annotations

from vrampilot.engine import format_summary
from vrampilot.engine.errors import ContextOverflow
from vrampilot.engine.progress import PromptProgress
from vrampilot.units import format_count, format_tokens


def test_counts_and_rates_are_separated() -> None:
    assert format_count(7313) == "7,313" and format_count(1234.56, 1) == "1,234.6" and format_count(42) == "42"
    assert format_tokens(12000) == "12,000" and format_tokens(16384) == "16K"


def test_the_reply_line_the_overflow_and_the_prompt_progress_use_them() -> None:
    line = format_summary(
        {"prompt_tokens": 12345, "decode_tps": 1234.5, "completion_tokens": 2048, "context_used": 14393, "n_ctx": 16384}
    )
    assert "12,345 prompt tokens" in line and "1,234.5 tokens/s" in line and "context 14,393 / 16,384" in line
    assert "is 20,000 tokens but the context holds 16,384" in str(ContextOverflow(20000, 512, 16384))
    progress = PromptProgress(done=2048, total=6120, reused=0, elapsed_s=1.0)
    assert progress.text().startswith("Reading the prompt: 2,048 of 6,120 tokens · 2,048 tokens/s")
