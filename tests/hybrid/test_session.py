"""HybridSession: the small engine-facing API the chat will use."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from vrampilot.hybrid.evaluate import passkey_prompt  # noqa: E402
from vrampilot.hybrid.session import HybridSession  # noqa: E402

from .conftest import TinyLlama  # noqa: E402


def test_generate_greedy_is_deterministic_and_reuses_the_prefix(tiny_llama: TinyLlama) -> None:
    s = HybridSession(tiny_llama.path, "default")
    prompt = list(range(3, 40))
    first = list(s.generate(prompt, 6, stop_tokens=[]))
    assert len(first) == 6
    assert s.n_tokens == len(prompt) + 6  # every yielded token is fed once the caller asks for more
    assert 0 < s.kv_bytes_held() < s.full_cache_bytes() or s.n_tokens < 200
    # A follow-up that extends the history continues the same cache.
    follow = [*prompt, *first, 7, 8]
    list(s.generate(follow, 2, stop_tokens=[]))
    assert s.n_tokens == len(follow) + 2
    # Anything else starts over, and greedy repeats itself.
    again = HybridSession(tiny_llama.path, "default")
    assert list(again.generate(prompt, 6, stop_tokens=[])) == first


def test_full_config_holds_the_f16_full_cache(tiny_llama: TinyLlama) -> None:
    s = HybridSession(tiny_llama.path, "full")
    list(s.generate(list(range(3, 30)), 3, stop_tokens=[]))
    per_token = 2 * 2 * tiny_llama.n_head_kv * tiny_llama.head_dim * tiny_llama.n_layer
    assert s.kv_bytes_held() == s.full_cache_bytes() == s.n_tokens * per_token


def test_passkey_prompt_places_the_key(embedded_model: Path) -> None:
    from vrampilot.hybrid.evaluate import Tokenizer

    tok = Tokenizer(embedded_model)
    early = passkey_prompt(tok, 1024, 0.0, "12345")
    late = passkey_prompt(tok, 1024, 1.0, "12345")
    assert 900 <= len(early) <= 1024 and len(early) == len(late)
    text_early, text_late = tok.decode(early), tok.decode(late)
    assert text_early.index("12345") < 300 < len(text_late) - 300 < text_late.index("12345")
    assert text_late.rstrip().endswith("The pass key is")
