"""Every architecture of the vendored llama.cpp: its cache planned by the verified formula, or
routed to llama.cpp's own count (issue #45, item 2)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from testkit.gguf_models import ARCHITECTURES, shape_of
from vrampilot.planner.families import LLAMA_CPP_ARCHITECTURES, VERIFIED, is_routed, is_verified, loadable

SDIST = Path.home() / ".cache/vrampilot/engine/sdist/llama_cpp_python-0.3.36.tar.gz"


def test_every_llama_cpp_architecture_is_exact_or_routed() -> None:
    exact = [a for a in LLAMA_CPP_ARCHITECTURES if is_verified(a)]
    routed = [a for a in LLAMA_CPP_ARCHITECTURES if is_routed(a)]
    for a in LLAMA_CPP_ARCHITECTURES:
        assert is_verified(a) != is_routed(a), a
        assert loadable(a)
    assert sorted(exact) == sorted(VERIFIED)  # every verified architecture is one llama.cpp loads
    assert len(exact) + len(routed) == len(LLAMA_CPP_ARCHITECTURES) == len(set(LLAMA_CPP_ARCHITECTURES))
    assert len(exact) == 12 and len(routed) == 141
    print(f"exact ({len(exact)}): {' '.join(exact)}")
    print(f"counted by llama.cpp ({len(routed)}): {' '.join(routed)}")
    assert not loadable("foo-arch") and not is_routed("foo-arch") and not is_verified("foo-arch")


def test_verified_architectures_are_the_fixtures_held_against_llama_cpp() -> None:
    fixtures = {shape_of(a).arch for a in ARCHITECTURES}
    assert fixtures | {"deepseek4", "deepseek32"} == VERIFIED


def test_the_list_is_the_vendored_llama_cpps() -> None:
    if not SDIST.is_file():
        pytest.skip("the engine's source is not cached here")
    with tarfile.open(SDIST) as tar:
        member = tar.getmember("llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-arch.cpp")
        f = tar.extractfile(member)
        assert f is not None
        source = f.read().decode()
    table = source.split("LLM_ARCH_NAMES = {", 1)[1].split("};", 1)[0]
    names = [n for n in re.findall(r'"([^"]*)"', table) if n != "(unknown)"]
    assert tuple(names) == LLAMA_CPP_ARCHITECTURES
