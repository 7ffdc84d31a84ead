"""One GPU per physical card: CUDA's and Vulkan's devices matched by PCI id, or through NVML where a
backend gives none; the backend each card runs under by default, the pin, and its refusal."""

from __future__ import annotations

import pytest

from testkit.dual_backend import RTX_4090, nvidia_machine, vulkan_device
from testkit.fake_nvml import FakeGpu
from vrampilot.hardware import format_machine, machine_to_dict
from vrampilot.hardware.cards import GpuBackendError, choose_devices, group_cards, normalize_pci_id
from vrampilot.units import GIB

RX_7900 = vulkan_device(0, FakeGpu(name="AMD Radeon RX 7900 XTX (RADV NAVI31)"), 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:01:00.0", "0000:01:00.0"),  # ggml-cuda (lower-cased) and ggml-vulkan
        ("00000000:01:00.0", "0000:01:00.0"),  # NVML's busId: an 8-digit domain
        ("0000:C1:00.0", "0000:c1:00.0"),  # CUDA's own spelling before ggml lower-cases it
        ("01:00.0", "0000:01:00.0"),  # no domain
        ("0000:01:00.0-v1", "0000:01:00.0-v1"),  # a CUDA virtual device: one device only
        ("", None),
        (None, None),
    ],
)
def test_pci_ids_have_one_spelling(text: str | None, expected: str | None) -> None:
    assert normalize_pci_id(text) == expected


def test_nvml_reports_each_cards_pci_bus_id() -> None:
    m = nvidia_machine((RTX_4090, FakeGpu(pci_bus_id="00000000:41:00.0")))
    assert [g.pci_bus_id for g in m.gpus] == ["00000000:01:00.0", "00000000:41:00.0"]


def test_a_card_under_cuda_and_vulkan_is_one_card() -> None:
    m = nvidia_machine()
    (card,) = group_cards(m.llama, m.gpus)
    assert card.backends == ("CUDA", "Vulkan")
    assert card.pci_bus_id == "0000:01:00.0"
    assert card.nvml is m.gpus[0]
    assert card.label() == "NVIDIA GeForce RTX 4090 (CUDA0, also Vulkan0)"


def test_a_vulkan_device_without_an_id_joins_its_card_through_nvml() -> None:
    m = nvidia_machine((RTX_4090, RTX_4090), vulkan_ids=False)
    cards = group_cards(m.llama, m.gpus)
    # Two identical cards: each once, each with both backends, each with its own NVML record.
    assert [c.backends for c in cards] == [("CUDA", "Vulkan"), ("CUDA", "Vulkan")]
    assert [[d.name for d in c.devices] for c in cards] == [["CUDA0", "Vulkan0"], ["CUDA1", "Vulkan1"]]
    assert [c.nvml.index if c.nvml else None for c in cards] == [0, 1]


def test_without_ids_or_nvml_the_same_name_and_size_is_the_same_card() -> None:
    m = nvidia_machine((RTX_4090, RTX_4090), vulkan_ids=False)
    cards = group_cards(m.llama, ())  # NVML not readable: names and sizes are all there is
    assert [[d.name for d in c.devices] for c in cards] == [["CUDA0", "Vulkan0"], ["CUDA1", "Vulkan1"]]
    assert [c.pci_bus_id for c in cards] == ["0000:01:00.0", "0000:02:00.0"]


def test_another_vendors_card_stays_its_own() -> None:
    m = nvidia_machine(extra=(RX_7900,))
    cards = group_cards(m.llama, m.gpus)
    assert [c.label() for c in cards] == [
        "NVIDIA GeForce RTX 4090 (CUDA0, also Vulkan0)",
        "AMD Radeon RX 7900 XTX (RADV NAVI31) (Vulkan1)",
    ]
    assert cards[1].nvml is None and cards[1].pci_bus_id == "0000:03:00.0"


def test_cuda_runs_an_nvidia_card_by_default_and_says_why() -> None:
    m = nvidia_machine()
    choice = choose_devices(m.llama, m.gpus)
    assert [d.name for d in choice.devices] == ["CUDA0"]
    assert choice.explicit  # llama-server is told: --device CUDA0
    (reason,) = choice.reasons
    assert reason.startswith("NVIDIA GeForce RTX 4090 runs as CUDA0 (CUDA), not Vulkan0 (Vulkan)")
    assert "prompts are expected faster under CUDA" in reason and "--gpu-backend vulkan" in reason


def test_a_pin_picks_the_other_backend_and_leaves_cards_without_it_alone() -> None:
    m = nvidia_machine((RTX_4090, RTX_4090), extra=(RX_7900,))
    choice = choose_devices(m.llama, m.gpus, "Vulkan")
    assert [d.name for d in choice.devices] == ["Vulkan0", "Vulkan1", "Vulkan2"]
    choice = choose_devices(m.llama, m.gpus, "CUDA")
    assert [d.name for d in choice.devices] == ["CUDA0", "CUDA1", "Vulkan2"]
    assert any("Vulkan2" in r and "its only backend" in r for r in choice.reasons)


def test_a_pin_to_a_backend_no_card_has_is_refused_in_one_line() -> None:
    m = nvidia_machine(cuda=False)
    with pytest.raises(GpuBackendError) as err:
        choose_devices(m.llama, m.gpus, "CUDA")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("--gpu-backend cuda: no GPU here runs under CUDA")
    assert "NVIDIA GeForce RTX 4090 (Vulkan0)" in text


def test_reports_list_each_card_once_with_its_backends() -> None:
    m = nvidia_machine()
    text = format_machine(m)
    assert "GPU card: NVIDIA GeForce RTX 4090 (CUDA0, also Vulkan0) at 0000:01:00.0" in text
    (card,) = machine_to_dict(m)["cards"]
    assert card["devices"] == ["CUDA0", "Vulkan0"] and card["nvml_index"] == 0
    assert card["memory_total_bytes"] == 24 * GIB
