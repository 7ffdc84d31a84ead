"""The Windows engine (`packaging/engine/build.py --windows`, `make engine-windows`): what its wheel
holds, and its programs running under Wine on the embedded model.

The wheel is the cached one: building it takes half an hour on two cores, so the tests never start
a build (CI builds it in a step of .ci/run before the tests; here `make engine-windows`). Wine runs
the 64-bit programs with no GPU driver: ggml's own loader picks the CPU variant from the wheel's
`cpu/` folder, and the Vulkan module finds no device. Wine's timings are not Windows': only
correctness is checked, the speed is printed as a curiosity.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests import system_packages, waits
from tests.packaging.conftest import PACKAGING
from vrampilot.server import free_port
from vrampilot.server.process import health

sys.path.insert(0, str(PACKAGING / "engine"))
import build as recipe

GROUP = system_packages.group(system_packages.WINDOWS_ENGINE_TESTS)
pytestmark = pytest.mark.skipif(
    not GROUP.present(), reason=f"MinGW-w64 or Wine missing (apt-get install {' '.join(GROUP.debian_packages)})"
)
BUILD = PACKAGING / "engine" / "build.py"
OBJDUMP = f"{recipe.MINGW_TRIPLET}-objdump"
# What a Windows 10 machine has, besides the wheel's own files; vulkan-1.dll comes with its GPU
# drivers (ggml-vulkan.dll alone imports it, and the app loads the CPU variants without it).
WINDOWS_DLLS = {"kernel32.dll", "msvcrt.dll", "advapi32.dll", "ws2_32.dll", "user32.dll", "shell32.dll"}
VULKAN_LOADER = "vulkan-1.dll"
# The Vulkan loader exports the core API and the window-system (WSI) extensions; anything else is
# reached through vkGetInstanceProcAddr, or the module would not load on Windows.
WSI_EXTENSIONS = (
    "VK_KHR_surface",
    "VK_KHR_swapchain",
    "VK_KHR_display",
    "VK_KHR_display_swapchain",
    "VK_KHR_win32_surface",
)


def _interface(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BUILD), "--windows", *args], capture_output=True, text=True, timeout=600)


def test_the_windows_engine_has_its_own_key_and_check_builds_nothing(tmp_path: Path) -> None:
    linux_key = subprocess.run([sys.executable, str(BUILD), "--print-key"], capture_output=True, text=True, check=True)
    windows_key = _interface("--print-key")
    assert windows_key.returncode == 0, windows_key.stderr
    assert len(windows_key.stdout.strip()) == 16 and windows_key.stdout.strip() != linux_key.stdout.strip()
    args = _interface("--print-cmake-args").stdout
    assert "-DBUILD_SHARED_LIBS=ON" in args and "-DGGML_VULKAN=ON" in args and "libvulkan-1.dll.a" in args
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in args and "-DGGML_NATIVE=OFF" in args
    # An empty cache (but for the Vulkan headers the key names): nothing cached, and nothing built.
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "vulkan-build").symlink_to(recipe.cache_root() / "vulkan-build")
    env = {**os.environ, "VRAMPILOT_ENGINE_CACHE": str(cache)}
    check = subprocess.run(
        [sys.executable, str(BUILD), "--windows", "--check"], capture_output=True, text=True, env=env, timeout=120
    )
    assert check.returncode == 1 and windows_key.stdout.strip() in check.stdout, check.stdout + check.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["vulkan-build"]
    refused = _interface("--install")
    assert refused.returncode == 2 and "installs nothing here" in refused.stderr


def pe_file(*, stamp: int, checksum: int, code: bytes = b"code") -> bytes:
    """The smallest bytes recipe.same_module reads as a PE file: a DOS header pointing at a PE
    header whose COFF time stamp and optional-header checksum are given."""
    pe = 0x40
    head = bytearray(pe + 24 + 96)
    head[:2], head[0x3C:0x40], head[pe : pe + 4] = b"MZ", pe.to_bytes(4, "little"), b"PE\0\0"
    head[pe + 8 : pe + 12] = stamp.to_bytes(4, "little")
    head[pe + 24 + 64 : pe + 24 + 68] = checksum.to_bytes(4, "little")
    return bytes(head) + code


def test_two_copies_of_a_dll_are_the_same_module_when_only_their_stamp_differs() -> None:
    assert recipe.same_module(pe_file(stamp=1, checksum=2), pe_file(stamp=3, checksum=4))
    assert not recipe.same_module(pe_file(stamp=1, checksum=2), pe_file(stamp=1, checksum=2, code=b"edoc"))
    assert not recipe.same_module(b"\x7fELF one", b"\x7fELF two")


def test_post_processing_lays_a_mingw_build_out_as_the_app_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layout scikit-build-core gives a MinGW build (ggml's DLLs and programs in bin/, import
    libraries in lib/, llama-cpp-python's copies in llama_cpp/lib) becomes the Windows wheel."""
    monkeypatch.setattr(recipe, "building_for_windows", lambda: True)
    info = "llama_cpp_python-0.3.36.dist-info/"
    ours = {f"llama_cpp/lib/{n}": n.encode() for n in ("libllama.dll", "ggml.dll", "ggml-base.dll")}
    ggml = {f"bin/{n}": n.encode() for n in ("ggml.dll", "ggml-base.dll", "ggml-vulkan.dll")}
    # ggml-rpc.dll is installed twice, as two PE files that differ only in their link time stamp
    # and checksum (what the first MinGW build gave): the same module, kept once.
    ours["llama_cpp/lib/ggml-rpc.dll"] = pe_file(stamp=1, checksum=2)
    ggml["bin/ggml-rpc.dll"] = pe_file(stamp=3, checksum=4)
    ggml |= {f"bin/{n}": n.encode() for n in ("ggml-cpu-x64.dll", "ggml-cpu-haswell.dll", "libllama.dll")}
    ggml |= {f"bin/{n}": n.encode() for n in ("libmtmd.dll", "libllama-common.dll", "libllama-server-impl.dll")}
    ggml |= {f"bin/{n}": n.encode() for n in ("llama-server.exe", "ggml-rpc-server.exe", "llama-bench.exe")}
    ggml |= {"bin/llama-quantize.exe": b"q", "lib/libggml.dll.a": b"a", "include/ggml.h": b"h"}
    raw = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(raw, "w") as z:
        for name, data in {**ours, "llama_cpp/lib/libllama.dll.a": b"a", **ggml}.items():
            z.writestr(name, data)
        z.writestr(info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
        z.writestr(info + "RECORD", "")
    out = tmp_path / recipe.windows_wheel_name(raw.name)
    manifest = recipe.postprocess(raw, {"cpu_variants": {"x64": [], "haswell": ["AVX2"], "zen4": ["AVX512F"]}}, out)
    assert out.name == "llama_cpp_python-0.3.36-py3-none-win_amd64.whl"
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        wheel_file = z.read(info + "WHEEL").decode()
        record = z.read(info + "RECORD").decode()
    lib = {n.removeprefix("llama_cpp/lib/") for n in names if n.startswith("llama_cpp/lib/")}
    assert lib == {
        *("libllama.dll", "ggml.dll", "ggml-base.dll", "ggml-rpc.dll", "ggml-vulkan.dll", "cpu/ggml-cpu-x64.dll"),
        *("cpu/ggml-cpu-haswell.dll", "libmtmd.dll", "libllama-common.dll", "libllama-server-impl.dll"),
        *("llama-server.exe", "ggml-rpc-server.exe", "llama-bench.exe", recipe.MANIFEST_NAME),
        *recipe.MINGW_RUNTIME_DLLS,
    }
    assert names - {f"llama_cpp/lib/{n}" for n in lib} == {info + "WHEEL", info + "RECORD"}
    assert "Tag: py3-none-win_amd64\n" in wheel_file and "linux" not in wheel_file
    assert {line.split(",")[0] for line in record.splitlines()} == names
    assert manifest["backend_files"] == [
        "cpu/ggml-cpu-haswell.dll",
        "cpu/ggml-cpu-x64.dll",
        "ggml-rpc.dll",
        "ggml-vulkan.dll",
    ]
    assert set(cast(dict[str, list[str]], manifest["cpu_variants"])) == {"x64", "haswell"}


REQUIRE_ENV = "VRAMPILOT_REQUIRE_WINDOWS_ENGINE"  # .ci/run: the wheel is cached there (build.py --windows --check)
# The tests that need the compiled wheel: their skip is allowed where it was not built (tests/conftest.py).
needs_wheel = pytest.mark.windows_engine


@pytest.fixture(scope="session")
def windows_wheel() -> Path:
    if _interface("--check").returncode != 0:
        why = "the Windows engine is not built here: `make engine-windows` (about 15 minutes on two cores)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1: {why}")
        pytest.skip(why)
    built = _interface()  # found in the cache: the path is its last line
    assert built.returncode == 0, built.stdout + built.stderr
    return Path(built.stdout.splitlines()[-1])


@pytest.fixture(scope="session")
def windows_lib(windows_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("windows-engine")
    with zipfile.ZipFile(windows_wheel) as wheel:
        wheel.extractall(root)
    return root / "llama_cpp" / "lib"


def _manifest(wheel: Path) -> dict[str, Any]:  # JSON, as the recipe writes it
    with zipfile.ZipFile(wheel) as z:
        value = json.loads(z.read(f"llama_cpp/lib/{recipe.MANIFEST_NAME}"))
    assert isinstance(value, dict)
    return value


@needs_wheel
def test_the_wheel_holds_the_libraries_every_cpu_variant_the_tools_and_the_mingw_runtime(windows_wheel: Path) -> None:
    assert windows_wheel.name.endswith("-py3-none-win_amd64.whl")
    with zipfile.ZipFile(windows_wheel) as z:
        names = set(z.namelist())
        tag = next(z.read(n).decode() for n in names if n.endswith(".dist-info/WHEEL"))
    assert "Tag: py3-none-win_amd64" in tag
    lib = {n.removeprefix("llama_cpp/lib/") for n in names if n.startswith("llama_cpp/lib/")}
    libraries = {"ggml.dll", "ggml-base.dll", "libllama.dll", "libmtmd.dll", "ggml-rpc.dll", "ggml-vulkan.dll"}
    tool_libraries = {"libllama-common.dll", "libllama-server-impl.dll", "libllama-bench-impl.dll"}
    tools = {"llama-server.exe", "ggml-rpc-server.exe", "llama-bench.exe"}
    assert libraries | tool_libraries | tools | set(recipe.MINGW_RUNTIME_DLLS) <= lib
    sdist = recipe.cache_root() / "sdist" / f"llama_cpp_python-{recipe.pinned_llama_cpp_python()}.tar.gz"
    variants = recipe.read_variant_table(sdist)  # llama.cpp's own list: x64, sse42, ... sapphirerapids
    assert len(variants) >= 14 and {f"cpu/ggml-cpu-{v}.dll" for v in variants} <= lib
    assert not [n for n in lib if n.startswith("cpu/") and not n.startswith("cpu/ggml-cpu-")]
    # Nothing pip would put outside the package, no import libraries (x.dll.a), no other tools.
    assert not [n for n in names if n.startswith(("bin/", "lib/", "include/")) or n.endswith(".a")]
    assert {n for n in lib if n.endswith(".exe")} == tools
    manifest = _manifest(windows_wheel)
    assert manifest["recipe_key"] == _interface("--print-key").stdout.strip()
    assert manifest["recipe"]["platform"] == recipe.WINDOWS_PLATFORM
    assert manifest["gpu_backends"] == ["vulkan"]
    assert set(manifest["cpu_variants"]) == set(variants)
    assert "ggml-base.dll" not in manifest["backend_files"]


def _imports(path: Path) -> dict[str, set[str]]:
    """DLL name (lower case) -> the functions `path` imports from it, as objdump reads the PE file."""
    out = subprocess.run([OBJDUMP, "-p", str(path)], capture_output=True, text=True, check=True, timeout=120).stdout
    imports: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in out.splitlines():
        if m := re.match(r"\s*DLL Name: (\S+)", line):
            current = imports.setdefault(m.group(1).lower(), set())
        elif current is not None and (m := re.match(r"\s+[0-9a-f]+\s+\d+\s+(\w+)\s*$", line)):
            current.add(m.group(1))
        elif not line.strip():
            current = None
    return imports


@needs_wheel
def test_every_file_finds_its_dlls_in_the_wheel_or_in_windows(windows_lib: Path) -> None:
    shipped = {p.name.lower() for p in windows_lib.rglob("*.dll")}
    for path in sorted([*windows_lib.rglob("*.dll"), *windows_lib.glob("*.exe")]):
        needed = set(_imports(path))
        assert needed, f"{path.name}: objdump read no imports"
        if path.name != "ggml-vulkan.dll":
            assert VULKAN_LOADER not in needed, path.name
        missing = needed - shipped - WINDOWS_DLLS - {VULKAN_LOADER}
        assert not missing, f"{path.name} imports {sorted(missing)}, neither shipped nor part of Windows"


def _loader_exports(vulkan_include: Path) -> set[str]:
    """The functions of the core API (every VK_VERSION_x_y block) and the WSI extensions."""
    exported: set[str] = set()
    for header in ("vulkan_core.h", "vulkan_win32.h"):
        block = ""
        for line in (vulkan_include / header).read_text(encoding="utf-8").splitlines():
            if m := re.match(r"#define (VK_\w+) 1\s*$", line):
                block = m.group(1)
            elif (m := re.search(r"VKAPI_CALL (vk\w+)\(", line)) and (
                block.startswith("VK_VERSION_") or block in WSI_EXTENSIONS
            ):
                exported.add(m.group(1))
    return exported


@needs_wheel
def test_the_vulkan_module_imports_only_what_the_windows_loader_exports(windows_lib: Path) -> None:
    inputs = recipe.vulkan_inputs()[0]  # the headers the Windows build used (only its library differs)
    assert inputs is not None
    exported = _loader_exports(inputs.include_dir / "vulkan")
    assert {"vkCreateInstance", "vkGetInstanceProcAddr", "vkCreateWin32SurfaceKHR"} <= exported
    assert "vkCmdDrawMeshTasksEXT" not in exported
    imported = _imports(windows_lib / "ggml-vulkan.dll")[VULKAN_LOADER]
    assert imported and imported <= exported, sorted(imported - exported)


# -- under Wine ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def wine_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A fresh 64-bit Wine prefix for the session (wineboot takes a while), and the environment
    that runs programs in it: no Wine debug chatter, no Mono or Gecko installers, no display, and
    no Vulkan driver (the host's Vulkan loader, which Wine's vulkan-1.dll calls, finds none)."""
    prefix = tmp_path_factory.mktemp("wine") / "prefix"
    no_driver = tmp_path_factory.getbasetemp() / "no-vulkan-driver.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env |= {
        "WINEPREFIX": str(prefix),
        "WINEARCH": "win64",
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "VK_DRIVER_FILES": str(no_driver),
        "VK_ICD_FILENAMES": str(no_driver),
    }
    # Wine's programs fail to set up their std streams when one is a regular file: pipes and
    # /dev/null only, everywhere below.
    boot = waits.run(["wine", "wineboot", "-i"], cpu_s=900, env=env, stdin=subprocess.DEVNULL)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    yield env
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["wineserver", "-k"], env=env, timeout=60, check=False)


def _windows_path(path: Path) -> str:
    """The path as a Windows program sees it under Wine (drive Z: is the Unix root)."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


# ggml's loader loads every CPU variant to score it and unloads the losers; this llama.cpp no longer
# logs which it kept, so the test reads Wine's own trace of DLL loads (WINEDEBUG=+loaddll).
LOADDLL = "+loaddll"


def _chosen_variant(log: str) -> str:
    """The CPU variant still loaded once the loader is done: loaded once more than unloaded."""
    count: dict[str, int] = {}
    for what, name in re.findall(r"(Loaded|Unloaded module) L\"[^\"]*ggml-cpu-(\w+)\.dll\"", log):
        count[name] = count.get(name, 0) + (1 if what == "Loaded" else -1)
    kept = [name for name, n in count.items() if n > 0]
    assert len(kept) == 1, (count, log[-4000:])
    return kept[0]


def _chat(port: int) -> dict[str, object]:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data[:2000]
        answer = json.loads(data)
        assert isinstance(answer, dict)
        return answer
    finally:
        conn.close()


@needs_wheel
def test_llama_server_answers_under_wine_on_the_cpu_variant_ggml_picks(
    windows_lib: Path, wine_env: dict[str, str], embedded_model: Path, tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "llama-server.log"
    argv = ["wine", str(windows_lib / "llama-server.exe"), "-m", _windows_path(embedded_model)]
    # -lv 4: this llama.cpp logs its buffers' sizes at debug level only (as tests/gpu asks too).
    argv += ["--host", "127.0.0.1", "--port", str(port), "-c", "512", "-t", "2", "-lv", "4"]
    # From lib\cpu: ggml's loader searches the program's folder (the libraries, the Vulkan module)
    # and the current one (the CPU variants), and keeps the variant that scores best on this CPU.
    with log_path.open("wb") as log:
        # Its output goes to a pipe that `cat` copies into the log file (a file as a std stream fails).
        server = subprocess.Popen(
            argv,
            cwd=windows_lib / "cpu",
            env={**wine_env, "WINEDEBUG": LOADDLL},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        copier = subprocess.Popen(["cat"], stdin=server.stdout, stdout=log)
        assert server.stdout is not None
        server.stdout.close()
        try:
            waits.until_true(lambda: server.poll() is not None or health(f"http://127.0.0.1:{port}") == 200, cpu_s=600)
            assert server.poll() is None, log_path.read_text(errors="replace")[-4000:]
            answer = _chat(port)
            choices = answer["choices"]
            assert isinstance(choices, list) and choices[0]["message"]["role"] == "assistant"
            usage = answer["usage"]
            assert isinstance(usage, dict) and usage["completion_tokens"] >= 1
        finally:
            # Wine turns SIGINT into the console's Ctrl+C, on which llama-server shuts down.
            server.send_signal(2)
            waits.until_true(lambda: server.poll() is not None, cpu_s=120)
            copier.wait(timeout=60)
    text = log_path.read_text(errors="replace")
    assert server.returncode == 0, text[-4000:]
    variant = _chosen_variant(text)
    print(f"\nllama-server under Wine: ggml's loader chose ggml-cpu-{variant}.dll")
    assert variant in _manifest_variants(windows_lib)
    # No Vulkan driver here: the model's weights stay in the CPU's buffers.
    buffers = re.findall(r"(\S+) model buffer size", text)
    assert buffers and all(b.startswith("CPU") for b in buffers), buffers


@needs_wheel
def test_without_a_vulkan_driver_the_engine_lists_no_gpu(windows_lib: Path, wine_env: dict[str, str]) -> None:
    # Wine has a vulkan-1.dll, so ggml-vulkan.dll loads; with no driver behind it (and Wine 8's
    # loader even with one: "ggml_vulkan: Error: Vulkan 1.2 required."), the backend is left out.
    # Asked of llama-bench, whose devices are the same registry's: under Wine 8 llama-server never
    # exits from its argument parser (`--list-devices`, `--version`, `--help` print, then hang),
    # while its shutdown on Ctrl+C exits 0 (the test above) and llama-bench exits.
    argv = ["wine", str(windows_lib / "llama-bench.exe"), "--list-devices"]
    done = waits.run(argv, cpu_s=300, cwd=windows_lib / "cpu", env=wine_env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    listed = done.stdout[done.stdout.index("Available devices:") :]
    assert "(none)" in listed and "Vulkan" not in listed, listed
    print("\n" + "\n".join(line for line in done.stderr.splitlines() if "ggml_vulkan" in line))


def _manifest_variants(lib: Path) -> set[str]:
    manifest = json.loads((lib / recipe.MANIFEST_NAME).read_text(encoding="utf-8"))
    return set(manifest["cpu_variants"])


@needs_wheel
def test_llama_bench_runs_under_wine(windows_lib: Path, wine_env: dict[str, str], embedded_model: Path) -> None:
    argv = ["wine", str(windows_lib / "llama-bench.exe"), "-m", _windows_path(embedded_model)]
    argv += ["-p", "16", "-n", "4", "-r", "1", "-t", "2", "-o", "json"]
    env = {**wine_env, "WINEDEBUG": LOADDLL}
    done = waits.run(argv, cpu_s=600, cwd=windows_lib / "cpu", env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    results = json.loads(done.stdout[done.stdout.index("[") :])
    assert {r["n_prompt"] for r in results} == {16, 0} and all(r["avg_ts"] > 0 for r in results)
    print(
        f"\nllama-bench under Wine ({_chosen_variant(done.stderr)}): "
        + ", ".join(f"{'pp' if r['n_prompt'] else 'tg'} {r['avg_ts']:.1f} t/s" for r in results)
    )
