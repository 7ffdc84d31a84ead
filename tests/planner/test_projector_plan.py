"""The vision projector in the plan: where it is counted, what the exported line says, and a
projector the model cannot take refused before the search."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from testkit.machines import cpu_machine
from testkit.mmproj import write_projector
from vrampilot.errors import UserError
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec, read_projector
from vrampilot.planner.memory.projector import measure_clip
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    lm = write_model(tmp_path / "lm.gguf", "llama")  # n_embd 128
    return lm, write_projector(tmp_path / "mmproj.gguf", "gemma3", n_embd_text=128, image_size=224, n_merge=4)


def test_cpu_plan_counts_the_projector_on_the_host(files: tuple[Path, Path]) -> None:
    lm, mmproj = files
    without = plan(load_model_spec(lm), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024))
    p = plan(
        load_model_spec(lm),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=1024, mmproj_path=str(mmproj)),
    )
    proj = p.memory.projector
    assert proj is not None and proj.device == -1
    assert proj.weights_bytes == read_projector(mmproj).weight_bytes
    assert proj.compute_bytes == measure_clip(mmproj, None, p.settings.flash_attn).compute_bytes["CPU"] > 0
    assert p.memory.host.total_bytes - without.memory.host.total_bytes == proj.weights_bytes + proj.compute_bytes
    argv = llama_server_argv(lm, p.settings)
    assert argv[argv.index("--mmproj") + 1] == str(mmproj) and "--no-mmproj-offload" in argv


def test_gpu_plan_puts_it_on_the_first_device_unless_kept_on_the_cpu(files: tuple[Path, Path]) -> None:
    lm, mmproj = files
    target = resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())  # a device this machine lacks
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
        plan(
            load_model_spec(lm), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(mmproj_path=str(bad))
        )


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
        plan(
            load_model_spec(lm),
            resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
            Pins(n_ctx=1024, mmproj_path=str(mmproj)),
        )
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("mmproj.gguf: llama.cpp cannot load this projector: ")
    assert message.endswith("unable to find tensor mm.model.mlp.1.weight")


def test_the_reasons_say_where_the_projector_went_and_what_it_cost(files: tuple[Path, Path]) -> None:
    """One line of "why these settings" for the projector: its device, bytes and tokens per image,
    and its cost: RAM only on the CPU; on a GPU, the layers its VRAM would otherwise have held,
    which a plan without it at the same budget confirms."""
    lm, mmproj = files
    spec = load_model_spec(lm)
    pins = Pins(n_ctx=1024, n_ubatch=512, type_k="f16", type_v="f16")
    cpu = plan(
        spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024, mmproj_path=str(mmproj))
    )
    (line,) = [r for r in cpu.reasons if r.startswith("Vision projector")]
    assert line.startswith("Vision projector mmproj.gguf (gemma3) on the CPU, no GPU in this plan: weights ")
    assert "16 tokens per image (224x224)" in line and "no VRAM" in line

    roomy = resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())
    kept = plan(spec, roomy, Pins(n_ctx=1024, mmproj_path=str(mmproj), mmproj_cpu=True))
    assert any(
        r.startswith("Vision projector mmproj.gguf (gemma3) on the CPU, kept there by you") for r in kept.reasons
    )
    on_gpu = plan(spec, roomy, Pins(n_ctx=1024, mmproj_path=str(mmproj)))
    (line,) = [r for r in on_gpu.reasons if r.startswith("Vision projector")]
    assert "the first offload device" in line and "every layer still fits on the GPU beside its" in line

    # A budget where the projector takes a layer's room: the plan without it holds that layer.
    without = plan(spec, resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine()), pins)
    projector = on_gpu.memory.projector
    assert projector is not None
    tight = resolve_target(
        TargetRequest(vram_bytes=without.memory.device.total_bytes + projector.device_bytes // 2), cpu_machine()
    )
    with_it = plan(spec, tight, replace(pins, mmproj_path=str(mmproj)))
    without_it = plan(spec, tight, pins)
    lost = without_it.settings.n_gpu_layers - with_it.settings.n_gpu_layers
    assert lost >= 1
    (line,) = [r for r in with_it.reasons if r.startswith("Vision projector")]
    assert f"would hold about {lost} more layer" in line
