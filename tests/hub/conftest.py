"""Fixtures for hub tests: a fake Hub on 127.0.0.1, an isolated HF cache and token, model files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from testkit.gguf_models import write_header_only, write_model
from testkit.machines import cpu_machine as machine
from testkit.mmproj import write_projector
from tests.hub.fake_hub import FakeHub
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.units import GIB

# Never touch a developer's real keyring from tests (our code ignores the null backend), and keep
# huggingface_hub from phoning its telemetry registry (read when it is first imported).
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def gpu_target(vram_gib: float = 8, ram_gib: float = 24) -> Target:
    return resolve_target(TargetRequest(vram_bytes=int(vram_gib * GIB)), machine(ram_gib))


def split_gguf(src: Path, dst_base: Path, tensors_per_part: int) -> list[Path]:
    """Write `src` as split parts `<dst_base stem>-0000i-of-0000n.gguf` (gguf's own split writer)."""
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst_base, arch, split_max_tensors=tensors_per_part)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = GGUFValueType(f.types[0])
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vtype, sub_type=GGUFValueType(f.types[1]))
        else:
            w.add_key_value(key, f.contents(), vtype)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(dst_base.parent.glob(f"{dst_base.stem}-*-of-*.gguf"))


@dataclass(frozen=True)
class Models:
    tiny_llama: Path  # ~2 MiB, real weights
    tiny_qwen2: Path
    tiny_llama_q8: Path
    split_parts: tuple[Path, ...]  # tiny llama in 2 parts
    mmproj: Path
    qwen7b: Path  # header-only, sparse: Qwen2.5-7B Q4_K_M
    llama8b_same_size: Path  # header-only Llama-3.1-8B Q4_K_M padded to qwen7b's size
    gemma27b: Path  # header-only, 16 GB sparse


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    d = tmp_path_factory.mktemp("hub-models")
    tiny = write_model(d / "tiny-llama-F16.gguf", "llama")
    qwen_tiny = write_model(d / "tiny-qwen2-F16.gguf", "qwen2")
    q8 = write_model(d / "tiny-llama-Q8_0.gguf", "llama", weight_type="q8_0")
    (d / "split").mkdir()
    parts = split_gguf(tiny, d / "split" / "tiny-llama-Q4_0.gguf", 20)
    mmproj = write_model(d / "mmproj-tiny-f16.gguf", "llama", n_layer=1)
    qwen7b = write_header_only(d / "qwen7b-Q4_K_M.gguf", "qwen2.5-7b", recipe="Q4_K_M")
    llama8b = d / "llama8b-Q4_K_M.gguf"
    write_header_only(llama8b, "llama-3.1-8b", recipe="Q4_K_M")
    # Pad both to the same file size: only the headers (architecture, tensor table) tell them apart.
    size = max(qwen7b.stat().st_size, llama8b.stat().st_size)
    for p in (qwen7b, llama8b):
        with open(p, "r+b") as fh:
            fh.truncate(size)
    gemma = write_header_only(d / "gemma27b-Q4_K_M.gguf", "gemma-3-27b", recipe="Q4_K_M")
    return Models(tiny, qwen_tiny, q8, tuple(parts), mmproj, qwen7b, llama8b, gemma)


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HF_HOME and app home per test; no token anywhere unless a test writes one."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "vrampilot-home"))
    for var in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "OLLAMA_MODELS",
    ):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def hub(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    fake = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def tiny_repo(hub: FakeHub, models: Models) -> str:
    """A repository like the ones people publish: several quantizations, a split one, an mmproj."""
    files = {
        "tiny-llama-F16.gguf": models.tiny_llama,
        "tiny-llama-Q8_0.gguf": models.tiny_llama_q8,
        "mmproj-tiny-f16.gguf": models.mmproj,
    }
    for p in models.split_parts:
        files[f"Q4_0/{p.name}"] = p
    hub.add_repo(
        "test/tiny-llama-GGUF", files, downloads=500, likes=7, gguf={"architecture": "llama", "total": 4_000_000}
    )
    return "test/tiny-llama-GGUF"


VISION_REPO = "test/tiny-vision-GGUF"


@pytest.fixture
def vision_repo(hub: FakeHub, models: Models, tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("vision")
    hub.add_repo(
        VISION_REPO,
        {
            "tiny-llama-F16.gguf": models.tiny_llama,  # n_embd 128
            # Named to come first: a projector for another model size, and a file named mmproj
            # that is no projector at all.
            "mmproj-a-large-F16.gguf": write_projector(d / "large.gguf", "mlp", n_embd_text=256),
            "mmproj-b-notclip.gguf": write_model(d / "notclip.gguf", "llama", n_layer=1),
            "mmproj-F16.gguf": write_projector(
                d / "fits.gguf", "gemma3", n_embd_text=128, image_size=224, n_embd=256, n_ff=1024, n_layer=4
            ),
        },
        gguf={"architecture": "llama", "total": 4_000_000},
    )
    return VISION_REPO
