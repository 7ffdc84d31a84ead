"""The vision projector in the plan: where it is counted, what the exported line says, and a
projector the model cannot take refused before the search."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from testkit.machines import cpu_machine
from testkit.mmproj import write_projector
from vrampilot.errors import UserError
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.gguf.projector import read_projector
from vrampilot.planner.plan import Pins
from vrampilot.planner.projector import measure_clip
from vrampilot.planner.search import plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import target_cpu_only, target_from_vram
from vrampilot.units import GIB


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    lm = write_model(tmp_path / "lm.gguf", "llama")  # n_embd 128
    return lm, write_projector(tmp_path / "mmproj.gguf", "gemma3", n_embd_text=128, image_size=224, n_merge=4)


def test_cpu_plan_counts_the_projector_on_the_host(files: tuple[Path, Path]) -> None:
    lm, mmproj = files
    without = plan(load_model_spec(lm), target_cpu_only(cpu_machine()), Pins(n_ctx=1024))
    p = plan(load_model_spec(lm), target_cpu_only(cpu_machine()), Pins(n_ctx=1024, mmproj_path=str(mmproj)))
    proj = p.memory.projector
    assert proj is not None and proj.device == -1
    assert proj.weights_bytes == read_projector(mmproj).weight_bytes
    assert proj.compute_bytes == measure_clip(mmproj, None, p.settings.flash_attn).compute_bytes["CPU"] > 0
    assert p.memory.host.total_bytes - without.memory.host.total_bytes == proj.weights_bytes + proj.compute_bytes
    argv = llama_server_argv(lm, p.settings)
    assert argv[argv.index("--mmproj") + 1] == str(mmproj) and "--no-mmproj-offload" in argv


def test_gpu_plan_puts_it_on_the_first_device_unless_kept_on_the_cpu(files: tuple[Path, Path]) -> None:
    lm, mmproj = files
    target = target_from_vram(8 * GIB, cpu_machine())  # a device this machine lacks
    p = plan(load_model_spec(lm), target, Pins(n_ctx=1024, mmproj_path=str(mmproj)))
    proj = p.memory.projector
    assert proj is not None and proj.device == 0 and "as an estimate" in proj.source
    assert p.memory.per_device[0].projector_bytes == proj.weights_bytes + proj.compute_bytes
    assert p.memory.host.projector_bytes == 0
    assert "--no-mmproj-offload" not in llama_server_argv(lm, p.settings)

    kept = plan(load_model_spec(lm), target, Pins(n_ctx=1024, mmproj_path=str(mmproj), mmproj_cpu=True))
    assert kept.memory.projector is not None and kept.memory.projector.device == -1
    assert kept.memory.per_device[0].projector_bytes == 0
    assert kept.memory.host.projector_bytes == proj.weights_bytes + proj.compute_bytes
    assert "--no-mmproj-offload" in llama_server_argv(lm, kept.settings)


def test_flash_attention_off_is_measured_with_it_off(files: tuple[Path, Path]) -> None:
    _, mmproj = files
    on, off = measure_clip(mmproj, None, True), measure_clip(mmproj, None, False)
    # Without flash attention the ViT's attention scores are materialized: a larger buffer.
    assert off.compute_bytes["CPU"] > on.compute_bytes["CPU"]


def test_a_projector_the_model_cannot_take_is_refused_before_the_search(tmp_path: Path) -> None:
    lm = write_model(tmp_path / "lm.gguf", "llama")
    bad = write_projector(tmp_path / "mmproj.gguf", "mlp", n_embd_text=256)
    with pytest.raises(UserError, match="the projector outputs embeddings of 256, the model takes 128"):
        plan(load_model_spec(lm), target_cpu_only(cpu_machine()), Pins(mmproj_path=str(bad)))


def test_settings_json_without_a_projector_is_unchanged() -> None:
    assert "mmproj_path" not in Settings(n_ctx=1024).to_dict()
    d = Settings(n_ctx=1024, mmproj_path="/m/mmproj.gguf", mmproj_cpu=True).to_dict()
    assert d["mmproj_path"] == "/m/mmproj.gguf" and d["mmproj_cpu"] is True


def test_a_projector_llama_cpp_cannot_load_is_refused_in_one_line(tmp_path: Path) -> None:
    lm = write_model(tmp_path / "lm.gguf", "llama")
    mmproj = write_projector(tmp_path / "mmproj.gguf", "mlp", n_embd_text=128)
    # The same tensors under another type's name: its header reads, clip.cpp misses a tensor.
    data = mmproj.read_bytes()
    key = b"clip.projector_type"
    at = data.index(key) + len(key) + 4 + 8  # the value's type (u32) and length (u64)
    assert data[at : at + 3] == b"mlp"
    mmproj.write_bytes(data[:at] + b"ldp" + data[at + 3 :])  # same length: offsets hold
    with pytest.raises(UserError) as err:
        plan(load_model_spec(lm), target_cpu_only(cpu_machine()), Pins(n_ctx=1024, mmproj_path=str(mmproj)))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("mmproj.gguf: llama.cpp cannot load this projector: ")
    assert message.endswith("unable to find tensor mm.model.mlp.1.weight")
