"""Speculative decoding from the command line: `plan --draft`, `export`, `chat --draft` teaching
the acceptance in a data folder of the test's own, and a draft of another vocabulary refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from tests.cli.test_cli import vrampilot

PINS = ("--cpu-only", "--ctx", "1024", "--threads", "1", "--threads-batch", "1")


def test_plan_with_ngram_drafting_and_options_that_need_draft(tmp_path: Path) -> None:
    env = {"VRAMPILOT_HOME": str(tmp_path)}
    d = json.loads(vrampilot("plan", *PINS, "--draft", "ngram", "--draft-tokens", "6", "--json", env=env).stdout)
    assert d["draft"]["kind"] == "ngram" and d["draft"]["n_draft"] == 6 and d["draft"]["bytes_by_device"] == {}
    assert d["draft"]["acceptance_measured"] is False
    assert "--spec-type ngram-simple" in d["llama_server"] and "--spec-ngram-simple-size-m 6" in d["llama_server"]
    r = vrampilot("plan", *PINS, "--draft-tokens", "6", env=env)
    assert r.returncode == 2 and "--draft-tokens needs --draft PATH or --draft ngram" in r.stderr
    r = vrampilot("plan", *PINS, "--draft", "ngram", "--draft-on", "gpu", env=env)
    assert r.returncode == 2 and "n-gram drafting has none" in r.stderr


def test_a_draft_of_another_vocabulary_is_refused_in_one_line(tmp_path: Path) -> None:
    other = write_model(tmp_path / "no-vocab.gguf", "llama")
    r = vrampilot("plan", *PINS, "--draft", str(other), env={"VRAMPILOT_HOME": str(tmp_path)})
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no-vocab.gguf cannot draft for" in r.stderr


@pytest.mark.slow
def test_chat_with_a_draft_reports_and_learns_its_acceptance(tmp_path: Path, embedded_model: Path) -> None:
    env = {"VRAMPILOT_HOME": str(tmp_path)}
    d = json.loads(vrampilot("plan", *PINS, "--draft", str(embedded_model), "--json", env=env).stdout)
    assert d["draft"]["bytes_by_device"]["CPU"] > d["draft"]["memory"]["weights"]["host"] > 0
    line = vrampilot("export", *PINS, "--draft", str(embedded_model), "--draft-tokens", "3", env=env).stdout
    assert f"-md {embedded_model}" in line and "--spec-draft-n-max 3" in line and "--spec-type draft-simple" in line
    r = vrampilot(
        "chat", *PINS, "--draft", str(embedded_model), "--draft-tokens", "4", "--temperature", "0",
        "--max-tokens", "24", "--prompt", "Count from one to ten in words.", "--json", env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    stats = out["stats"]
    assert stats["draft_tokens"] > 0 and 0 <= stats["draft_accepted"] <= stats["draft_tokens"]
    assert out["speed"]["acceptance_replies"] == 1
    # The next plan predicts from what the reply measured, and says so.
    again = json.loads(vrampilot("plan", *PINS, "--draft", str(embedded_model), "--json", env=env).stdout)
    assert again["draft"]["acceptance_measured"] is True and again["draft"]["acceptance_replies"] == 1
    assert any("measured over 1 replies here" in x for x in again["reasons"])


def test_mtp_drafting_needs_a_file_with_an_mtp_block(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "plain.gguf", "deepseek2", n_layer=3)
    r = vrampilot("plan", str(plain), *PINS, "--draft", "mtp", env={"VRAMPILOT_HOME": str(tmp_path)})
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "plain.gguf has no multi-token-prediction (MTP) block" in r.stderr
    mtp = write_model(tmp_path / "mtp.gguf", "deepseek2", n_layer=4, n_nextn=1)
    r = vrampilot("plan", str(mtp), *PINS, "--draft", "mtp", "--draft-on", "gpu", env={"VRAMPILOT_HOME": str(tmp_path)})
    assert r.returncode == 2 and "the MTP block goes with the model's last layer" in r.stderr


@pytest.mark.slow
def test_chat_drafting_with_mtp_runs_in_llama_server_and_learns_its_acceptance(tmp_path: Path) -> None:
    """llama-cpp-python cannot draft with an MTP block: the chat goes through a private llama-server."""
    env = {"VRAMPILOT_HOME": str(tmp_path)}
    model = str(write_model(tmp_path / "mtp.gguf", "deepseek2", n_layer=4, n_nextn=1, tokenizer="smollm2"))
    d = json.loads(vrampilot("plan", model, *PINS, "--draft", "mtp", "--json", env=env).stdout)
    assert d["draft"]["kind"] == "mtp" and d["draft"]["bytes_by_device"]["CPU"] > 0
    assert d["settings"]["spec_type"] == "mtp" and "--spec-type draft-mtp" in d["llama_server"]
    line = vrampilot("export", model, *PINS, "--draft", "mtp", "--draft-tokens", "2", env=env).stdout
    assert "--spec-type draft-mtp --spec-draft-n-max 2" in line and "-md " not in line
    r = vrampilot(
        "chat", model, *PINS, "--draft", "mtp", "--draft-tokens", "2", "--temperature", "0",
        "--max-tokens", "16", "--prompt", "1, 2, 3, 4,", "--json", env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["served_by"] == "llama-server" and out["stats"]["draft_tokens"] > 0
    assert out["speed"]["acceptance_replies"] == 1
    again = json.loads(vrampilot("plan", model, *PINS, "--draft", "mtp", "--json", env=env).stdout)
    assert again["draft"]["acceptance_measured"] is True
    # documents are the in-app engine's: refused in one line
    r = vrampilot("chat", model, *PINS, "--draft", "mtp", "--document", model, "--prompt", "x", env=env)
    assert r.returncode == 2 and "runs in llama-server" in r.stderr and r.stderr.strip().count("\n") == 0
