"""`vrampilot doctor` on a Windows machine without a Vulkan driver (no vulkan-1.dll): one line that
says so and what to install there (no apt), the CPU after it, and that Windows has no CUDA engine.

The loader is looked up for real: this machine has no vulkan-1.dll, as such a Windows machine has
none, so ctypes fails the way it does there (a FileNotFoundError on Windows, dlopen's "No such
file" here) and the product's own code turns that into the line."""

from __future__ import annotations

from dataclasses import replace

from testkit.machines import cpu_machine
from vrampilot.hardware import WINDOWS_NO_CUDA, LlamaBackendInfo, format_machine
from vrampilot.llamacpp.vulkan_probe import WINDOWS_INSTALL_HINT, ask_vulkan


def test_no_vulkan_dll_is_one_line_then_the_cpu() -> None:
    probe = ask_vulkan(platform="win32")
    assert (probe.status, probe.detail) == ("no-loader", "vulkan-1.dll not found")
    line = probe.describe(software_allowed=False, platform="win32")
    assert line == f"Vulkan: no Vulkan loader (vulkan-1.dll not found): {WINDOWS_INSTALL_HINT}; the CPU runs the model"
    assert "apt" not in line
    llama = LlamaBackendInfo(
        "0.3.36",
        False,
        "CPU : SSE3 = 1 | AVX2 = 1",
        None,
        cpu_variant="haswell",
        cpu_dispatch="haswell (AVX2, FMA, F16C)",
        backend_mode="dispatched",
        recipe_key="win-amd64-test",
        backends=("CPU", "RPC"),
        vulkan_status=line,
    )
    text = format_machine(replace(cpu_machine(), llama=llama), platform="win32")
    lines = text.splitlines()
    assert [x for x in lines if "Vulkan" in x and "CUDA" not in x] == [f"  {line}"]
    assert "llama.cpp: llama-cpp-python 0.3.36, GPU offload: no (no GPU backend of this build runs here)" in lines
    assert "  CPU code: haswell (AVX2, FMA, F16C)" in lines
    assert f"  {WINDOWS_NO_CUDA}" in lines
    assert "Traceback" not in text
