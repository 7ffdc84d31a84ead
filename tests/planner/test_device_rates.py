"""A device measured by the device probe: the speed model prices its layers at its own measured
rates, the plan says so, and what replies taught before the measurement goes with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from testkit.machines import cpu_machine
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import LlamaBackendInfo, LlamaDevice, Machine
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.speed_model.predict import (
    DEVICE_KERNELS_PER_LAYER,
    GPU_TOKEN_OVERHEAD_S,
    SpeedModel,
    backend_key,
)
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import (
    DeviceRates,
    MachineSpeed,
    SpeedFactors,
    load_machine_speed,
    save_device_rates,
    update_machine_speed,
)
from vrampilot.units import GIB

LAVAPIPE = "llvmpipe (LLVM 15.0.6, 256 bits)"
RATES = DeviceRates(
    "Vulkan0",
    LAVAPIPE,
    "2026-12-04T22:00:00+00:00",
    "q8_0",
    decode_gbps=0.75,
    prefill_gflops=5.0,
    product_overhead_us=300.0,
)


def vulkan_machine() -> Machine:
    devices = (
        LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB),
        LlamaDevice("Vulkan0", LAVAPIPE, "gpu", "Vulkan", 2 * GIB, 2 * GIB),
    )
    return replace(cpu_machine(), llama=LlamaBackendInfo("0.3.36", True, None, None, devices=devices))


def test_a_measured_device_is_priced_at_its_own_rates() -> None:
    path = embedded_model_path()
    assert path is not None
    spec = load_model_spec(path)
    pins = Pins(n_gpu_layers=99, n_ctx=2048)
    assumed = plan(spec, resolve_target(TargetRequest(), vulkan_machine(), MachineSpeed("m")), pins)
    target = resolve_target(TargetRequest(), vulkan_machine(), MachineSpeed("m", devices=(RATES,)))
    assert target.gpus[0].measured == RATES
    measured = plan(spec, target, pins)
    assert measured.settings.n_gpu_layers == assumed.settings.n_gpu_layers > spec.n_layer
    # Every layer and the output on the device: a token reads its bytes at the measured rate, and
    # each layer runs its kernels at the measured cost of one.
    model = SpeedModel(spec, measured.settings, target, measured.memory)
    dev_bytes, _ = model.bytes_per_token(1)
    n_on = spec.n_layer + 1
    expected = dev_bytes / (RATES.decode_gbps * 1e9) + GPU_TOKEN_OVERHEAD_S + n_on * 300e-6 * DEVICE_KERNELS_PER_LAYER
    # (the rest: the token's embedding row, read on the host)
    assert expected <= model.decode_seconds(1) <= 1.01 * expected
    assert measured.speed.decode_tps < assumed.speed.decode_tps / 50  # lavapipe is no 288 GB/s card
    reasons = "\n".join(measured.reasons)
    assert "llama.cpp's kernels measured on this device 2026-12-04" in reasons and "0.8 GB/s" in reasons
    assert "not measured on this device" in "\n".join(assumed.reasons)


def test_measuring_a_device_drops_what_its_replies_taught_and_keeps_the_others(tmp_path: Path) -> None:
    target = resolve_target(TargetRequest(), vulkan_machine(), MachineSpeed("m"))
    key = backend_key(target, plan(load_model_spec(embedded_model_path()), target, Pins(n_gpu_layers=99)).settings)  # type: ignore[arg-type]  # the embedded model is installed here
    assert "(Vulkan0)" in key

    def taught(m: MachineSpeed) -> MachineSpeed:
        return m.with_factors(SpeedFactors(key, (0.5,), (0.5,))).with_factors(
            SpeedFactors("cpu:zen4, 2 threads", (1.1,))
        )

    update_machine_speed("m", taught, tmp_path)
    saved = save_device_rates("m", (RATES,), tmp_path)
    assert [f.backend for f in saved.factors] == ["cpu:zen4, 2 threads"]
    again = load_machine_speed("m", tmp_path)
    assert again.devices == (RATES,) and again.device("Vulkan0", LAVAPIPE) == RATES
    assert again.device("Vulkan0", "another card") is None
