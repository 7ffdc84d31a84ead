"""`vrampilot plan` on a mixture of experts (#39): Qwen3-30B-A3B at its real dimensions (a sparse
Q4_K_M file) on an 8 GB card. The placement is printed and carried in --json; --n-cpu-moe,
--no-cpu-experts, --cpu-moe, --min-ctx and --keep-free pin it, and a pin that cannot fit is
refused in one line that says what fits without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.real_shapes import write_real
from tests.cli.test_cli import vrampilot


@pytest.fixture(scope="module")
def qwen_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_real("qwen3-30b-a3b", tmp_path_factory.mktemp("moe_cli"))


def test_plan_prints_and_carries_the_placement(qwen_moe: Path) -> None:
    r = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    n = d["placement"]["n_cpu_moe"]
    assert 0 < n < 48 and d["settings"]["n_cpu_moe"] == n and d["settings"]["n_gpu_layers"] == 49
    assert d["placement"]["experts_in_ram_layers"] == n and d["placement"]["moe_layers"] == 48
    assert d["placement"]["text"] == f"every layer's attention on the GPU, experts of {n} of 48 layers in RAM"
    assert f"--n-cpu-moe {n}" in d["llama_server"]
    labels = [a["label"] for a in d["alternatives"]]
    assert any(label.startswith("whole layers instead") for label in labels)
    text = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate").stdout
    assert f"placement                every layer's attention on the GPU, experts of {n} of 48 layers in RAM" in text


def test_the_placement_options_pin_it(qwen_moe: Path) -> None:
    r = vrampilot(
        "plan",
        str(qwen_moe),
        "--vram",
        "8GiB",
        "--estimate",
        "--n-cpu-moe",
        "44",
        "--min-ctx",
        "65536",
        "--keep-free",
        "1.5",
    )
    assert r.returncode == 0, r.stderr
    assert "experts of 44 of 48 layers in RAM (--n-cpu-moe 44) (pinned)" in r.stdout
    assert "context                  65536" in r.stdout
    assert "1.50 GiB" in r.stdout  # the margin kept free
    all_in_ram = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "--cpu-moe", "--json")
    # Every layer's experts in RAM is 16.5 GiB of host memory: the plan is this machine's free RAM
    # against it, so on a 24 GB machine busy with other tests it may be refused, and must say why.
    if all_in_ram.returncode == 0:
        assert json.loads(all_in_ram.stdout)["settings"]["n_cpu_moe"] == 48
    else:
        assert all_in_ram.returncode == 2 and all_in_ram.stdout == ""
        err = all_in_ram.stderr.strip()
        assert err.startswith("vrampilot: no plan fits with every layer's experts in RAM"), err
        assert "Without it: every layer's attention on the GPU, experts of" in err


def test_a_placement_pin_that_cannot_fit_is_refused_in_one_line(qwen_moe: Path) -> None:
    r = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "--no-cpu-experts")
    assert r.returncode != 0
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "no plan fits with no experts in RAM" in err and "Without it: every layer's attention on the GPU" in err
    both = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--no-cpu-experts", "--n-cpu-moe", "3")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_plan_help_lists_the_options() -> None:
    out = vrampilot("plan", "--help").stdout
    for option in ("--n-cpu-moe N", "--no-cpu-experts", "--cpu-moe", "--min-ctx N", "--keep-free SIZE"):
        assert option in out


def test_override_tensor_patterns_are_planned_exported_and_checked(qwen_moe: Path) -> None:
    # Layers 40-47's up-projection experts kept in RAM by the user's own -ot: the planner sizes
    # the rest around them (fewer --n-cpu-moe layers than without) and the line carries both.
    base = json.loads(vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "--json").stdout)
    r = vrampilot(
        "plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "--json", "-ot", r"blk\.4[0-7]\.ffn_up_exps=CPU"
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["settings"]["cpu_tensor_patterns"] == [r"blk\.4[0-7]\.ffn_up_exps"]
    assert d["settings"]["n_cpu_moe"] < base["settings"]["n_cpu_moe"]
    assert r"-ot 'blk\.4[0-7]\.ffn_up_exps=CPU'" in d["llama_server"]
    typo = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "-ot", "ffn_dwn=CPU")
    assert typo.returncode != 0
    assert "tensor pattern 'ffn_dwn' matches no tensor" in typo.stderr and len(typo.stderr.strip().splitlines()) == 1
    other = vrampilot("plan", str(qwen_moe), "--vram", "8GiB", "--estimate", "-ot", "ffn_up_exps=Vulkan0")
    assert other.returncode != 0 and "only =CPU is planned" in other.stderr
