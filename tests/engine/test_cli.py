"""`vrampilot chat`: one headless turn on the same engine."""

from __future__ import annotations

import json

import pytest

from vrampilot.cli import main

pytestmark = pytest.mark.slow

FAST = ["--ctx", "1024", "--threads", "1", "--threads-batch", "1", "--cpu-only"]


def test_chat_json_has_reply_stats_and_settings(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["chat", "--prompt", "Say hello.", "--max-tokens", "12", "--seed", "3", "--temperature", "0", "--json", *FAST]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"reply", "stats", "settings"} <= set(out)
    assert isinstance(out["reply"], str) and out["reply"]
    assert {"prompt_tokens", "completion_tokens", "ttft_s", "decode_tps", "prefill_tps"} <= set(out["stats"])
    assert 1 <= out["stats"]["completion_tokens"] <= 12
    assert out["settings"]["n_ctx"] == 1024 and out["settings"]["n_threads"] == 1
    # Same keys as `vrampilot plan --json` settings.
    assert set(out["settings"]) == {
        "n_ctx",
        "type_k",
        "type_v",
        "n_gpu_layers",
        "n_batch",
        "n_ubatch",
        "n_threads",
        "n_threads_batch",
        "flash_attn",
        "swa_full",
    }


def test_chat_streams_text_and_prints_stats(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["chat", "--prompt", "Count to three.", "--system", "Be brief.", "--max-tokens", "8", *FAST])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.strip()
    assert "tokens/s" in captured.err and "prompt tokens" in captured.err


def test_chat_refuses_a_plan_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["chat", "--prompt", "hi", "--ctx", str(1 << 26), "--cpu-only"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and "Does not fit" in err
