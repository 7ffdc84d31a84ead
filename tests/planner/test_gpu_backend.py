"""A plan on an NVIDIA card that an engine with CUDA and Vulkan lists twice: one device per card,
CUDA by default with the reason in the plan, the pin to Vulkan, the devices named to llama-server
(--device) and to the engine (Settings.devices), and a pin no card can take refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.dual_backend import RTX_4090, nvidia_machine
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import GpuBackendError
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import DeviceRates, MachineSpeed

PINS = Pins(n_ctx=4096)


def _device_arg(argv: list[str]) -> str | None:
    return argv[argv.index("--device") + 1] if "--device" in argv else None


def test_the_card_runs_under_cuda_once_and_the_plan_says_why(embedded_model: Path) -> None:
    target = resolve_target(TargetRequest(), nvidia_machine())
    assert [g.llama_name for g in target.gpus] == ["CUDA0"]  # not CUDA0 and Vulkan0: one card
    assert target.gpus[0].bandwidth_gbps == pytest.approx(1008, abs=1)  # NVML's figure for the card
    p = plan(load_model_spec(embedded_model), target, PINS)
    assert p.settings.devices == ("CUDA0",)
    assert _device_arg(llama_server_argv(p.spec.path, p.settings)) == "CUDA0"
    why = [r for r in p.reasons if "Vulkan0" in r]
    assert len(why) == 1 and "runs as CUDA0 (CUDA)" in why[0] and "prompts" in why[0]


def test_the_pin_to_vulkan_runs_the_card_under_vulkan(embedded_model: Path) -> None:
    target = resolve_target(TargetRequest(gpu_backend="Vulkan"), nvidia_machine((RTX_4090, RTX_4090)))
    assert [g.llama_name for g in target.gpus] == ["Vulkan0", "Vulkan1"]
    p = plan(load_model_spec(embedded_model), target, PINS)
    assert p.settings.devices == ("Vulkan0", "Vulkan1")
    assert _device_arg(llama_server_argv(p.spec.path, p.settings)) == "Vulkan0,Vulkan1"
    assert sum("pinned by you (--gpu-backend)" in r for r in p.reasons) == 2


def test_one_backend_per_card_leaves_the_device_to_llama_cpps_default(embedded_model: Path) -> None:
    target = resolve_target(TargetRequest(), nvidia_machine(vulkan=False))
    p = plan(load_model_spec(embedded_model), target, PINS)
    assert [g.llama_name for g in target.gpus] == ["CUDA0"]
    assert p.settings.devices == () and "--device" not in llama_server_argv(p.spec.path, p.settings)
    assert not target.device_reasons


def test_a_pin_the_card_cannot_take_is_refused() -> None:
    """(A pin with CPU only is refused when the request is made: tests/planner/test_target_choice.py.)"""
    m = nvidia_machine(cuda=False)
    with pytest.raises(GpuBackendError, match=r"^--gpu-backend cuda: no GPU here runs under CUDA"):
        resolve_target(TargetRequest(gpu_backend="CUDA"), m)


def _measured(prefill: dict[str, float]) -> MachineSpeed:
    """The device probe's figures for this card under each backend (speed/device_probe.py)."""
    return MachineSpeed(
        "test-machine",
        devices=tuple(
            DeviceRates(name, RTX_4090.name, "2026-12-06T08:00:00+00:00", "q8_0", 800.0, gflops, 5.0)
            for name, gflops in prefill.items()
        ),
    )


@pytest.mark.parametrize(
    ("prefill", "runs", "ratio"),
    [
        ({"CUDA0": 42000.0, "Vulkan0": 20000.0}, "CUDA0", "2.10x"),
        ({"CUDA0": 20000.0, "Vulkan0": 25000.0}, "Vulkan0", "1.25x"),
    ],
)
def test_measured_on_this_card_the_faster_backend_runs_it(prefill: dict[str, float], runs: str, ratio: str) -> None:
    machine, speed = nvidia_machine(), _measured(prefill)
    target = resolve_target(TargetRequest(), machine, speed)
    assert [g.llama_name for g in target.gpus] == [runs]
    (why,) = target.device_reasons
    assert f"runs as {runs}" in why and "measured on this card" in why and f"({ratio};" in why
    # The pin still wins over the measurement.
    other = "Vulkan" if runs == "CUDA0" else "CUDA"
    assert [g.llama_name for g in resolve_target(TargetRequest(gpu_backend=other), machine, speed).gpus] == [
        f"{other}0"
    ]


def test_only_one_backend_measured_keeps_the_vendors_default() -> None:
    target = resolve_target(TargetRequest(), nvidia_machine(), _measured({"Vulkan0": 90000.0}))
    assert [g.llama_name for g in target.gpus] == ["CUDA0"]
