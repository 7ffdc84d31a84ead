"""The local library: HF cache, LM Studio, Ollama blobs, user folders; bad files marked, not hidden."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testkit.gguf_models import write_truncated, write_wrong_magic
from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.hub import LocalStatus, Source, download_model, scan_library


def _ollama(root: Path, name: str, tag: str, blob_src: Path | None, digest: str, namespace: str = "library") -> None:
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
                    {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
                ],
            }
        )
    )
    if blob_src is not None:
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        shutil.copy(blob_src, root / "blobs" / f"sha256-{digest}")


def test_every_source_with_problems_marked(
    hub: FakeHub, tiny_repo: str, models: Models, hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    download_model(tiny_repo, "tiny-llama-F16.gguf")
    home = tmp_path / "home"
    # LM Studio (both of its folders), one file cut short by an interrupted copy.
    lms = home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-GGUF"
    lms.mkdir(parents=True)
    shutil.copy(models.tiny_llama_q8, lms / "tiny-Q8_0.gguf")
    old_lms = home / ".cache" / "lm-studio" / "models" / "TheBloke" / "Old-GGUF"
    old_lms.mkdir(parents=True)
    write_truncated(models.tiny_llama, old_lms / "old.Q4_0.gguf", 600_000)
    # Ollama: a named model, and a manifest whose blob is gone.
    ollama = home / ".ollama" / "models"
    _ollama(ollama, "tinyllama", "latest", models.tiny_qwen2, "ab" * 32)
    _ollama(ollama, "missing", "7b", None, "cd" * 32, namespace="someuser")
    # A user folder: a good split model, a split model missing a part, and a file that is not GGUF.
    mine = tmp_path / "my-models"
    (mine / "split").mkdir(parents=True)
    for p in models.split_parts:
        shutil.copy(p, mine / "split" / p.name)
    (mine / "half").mkdir()
    shutil.copy(models.split_parts[0], mine / "half" / models.split_parts[0].name)
    write_wrong_magic(mine / "notes.gguf")

    found = scan_library([mine], home=home)
    by_name = {m.name: m for m in found}

    hf = by_name["tiny-llama-F16.gguf"]
    assert (hf.source, hf.status, hf.repo_id, hf.verified) == (Source.HF_CACHE, LocalStatus.OK, tiny_repo, True)
    assert hf.architecture == "llama" and hf.quant == "F16"

    lm = by_name["lmstudio-community/Tiny-GGUF/tiny-Q8_0.gguf"]
    assert (lm.source, lm.status, lm.quant) == (Source.LM_STUDIO, LocalStatus.OK, "Q8_0")
    cut = by_name["TheBloke/Old-GGUF/old.Q4_0.gguf"]
    assert cut.status is LocalStatus.PARTIAL and "incomplete" in (cut.problem or "")

    ol = by_name["tinyllama:latest"]
    assert (ol.source, ol.status, ol.architecture) == (Source.OLLAMA, LocalStatus.OK, "qwen2")
    assert ol.path.name == "sha256-" + "ab" * 32
    assert by_name["someuser/missing:7b"].status is LocalStatus.PARTIAL

    split = by_name[f"split/{models.split_parts[0].name}"]
    assert split.status is LocalStatus.OK and len(split.parts) == 2
    half = by_name[f"half/{models.split_parts[0].name}"]
    assert half.status is LocalStatus.PARTIAL and "1 of 2 parts" in (half.problem or "")
    bad = by_name["notes.gguf"]
    assert bad.status is LocalStatus.BROKEN and "not a GGUF file" in (bad.problem or "")

    # Nothing is listed twice when a user folder is inside another source.
    again = scan_library([mine, lms], home=home)
    assert len(again) == len(found)


def test_ollama_models_env(tmp_path: Path, models: Models, monkeypatch: pytest.MonkeyPatch, hf_env: Path) -> None:
    root = tmp_path / "elsewhere"
    _ollama(root, "qwen", "0.5b", models.tiny_qwen2, "ef" * 32)
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    names = [m.name for m in scan_library(home=tmp_path / "nohome")]
    assert names == ["qwen:0.5b"]
