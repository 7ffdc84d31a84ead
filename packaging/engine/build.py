#!/usr/bin/env python3
"""The one build recipe for llama.cpp: a llama-cpp-python wheel whose CPU code is chosen at run time.

Used by `make run`, `make test`, `make package` and the Windows workflow alike:

    python packaging/engine/build.py --install [--python .venv/bin/python]
    python packaging/engine/build.py --print-key | --print-cmake-args | --wheel-only
    python packaging/engine/build.py --windows [--check]   # the win_amd64 wheel, cross-compiled with MinGW

Why a recipe of our own:
- llama.cpp's default (`GGML_NATIVE=ON`) compiles for the build machine's CPU; such a build dies
  with SIGILL on an older CPU, and on VMs that advertise AMX or AVX-512 the OS never enabled.
  Here the CPU backend is built once per instruction-set level (`GGML_CPU_ALL_VARIANTS`), each a
  `libggml-cpu-<variant>` module, and `vrampilot.llamacpp.backends` loads the best one this CPU and
  OS can really execute.
- pip caches wheels by source, not by build flags, so a wheel compiled earlier with other flags
  can be installed silently. This script keys its own cache by everything that shapes the build
  (llama-cpp-python version, CMake arguments, platform, RECIPE_REVISION), writes that key into the wheel
  (`llama_cpp/lib/vrampilot-engine.json`) and, with --install, checks the installed engine carries
  it. pip's cache is never used for this package.

The wheel is post-processed: ggml installs the dynamic backends (CPU variants, RPC) and the tools
into the wheel's top-level `bin/` (which pip would put in site-packages/bin). The CPU variants move
to `llama_cpp/lib/cpu/`, everything else the app uses to `llama_cpp/lib/`, next to libggml, where
the app and the PyInstaller bundle find them. The CPU variants sit apart so that a tool started
from `llama_cpp/lib` (whose own folder ggml searches for backends) finds none of them and loads
only the one named in GGML_BACKEND_PATH: the variant this machine really runs. The manifest lists each CPU
variant with the instruction-set features its CMake line enables, read from the vendored
`ggml/src/CMakeLists.txt`, so the run-time choice uses llama.cpp's own definition of each variant.

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_NAME = "vrampilot-engine.json"
# Part of the cache key with the CMake arguments: bump it when the post-processing or the manifest
# changes (the file's own hash is not used, so that editing a comment does not cost a rebuild).
RECIPE_REVISION = 7

# Always passed, ON or OFF, so nothing depends on a default of the vendored CMake files.
BASE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF",  # never -march=native: the build machine is not the user's machine
    "-DGGML_BACKEND_DL=ON",  # backends are modules loaded at run time
    "-DGGML_CPU_ALL_VARIANTS=ON",  # one CPU module per instruction-set level
    "-DGGML_RPC=ON",  # the RPC backend is small, and multi-machine plans need it
    "-DGGML_CUDA=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_BLAS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # llama-server (vrampilot serve), ggml-rpc-server (vrampilot rpc-host) and llama-bench (the
    # benchmarks' reference), from the same sources and flags as the engine; the rest of the tools
    # are built too (llama.cpp has no switch per tool) and dropped from the wheel.
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_TOOLS_INSTALL=ON",
    "-DLLAMA_BUILD_UI=OFF",  # the web page needs npm, or a download from Hugging Face at build time:
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the API is what is served
    "-DLLAMA_OPENSSL=OFF",  # a loopback or LAN server: no HTTPS, no OpenSSL to ship
    "-DLLAVA_BUILD=OFF",  # the tools build libmtmd themselves; llama-cpp-python's copy would clash
    "-DLLAMA_CURL=OFF",
    # The tools find their libraries beside them in llama_cpp/lib (and those find each other).
    "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib",
)
# For a build of ggml alone (the CUDA module, the benchmarks' native build): none of llama.cpp's
# own programs or libraries beyond what ggml needs.
GGML_ONLY_CMAKE_ARGS = (
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_CURL=OFF",
)
# The executables kept, into llama_cpp/lib (names without .exe, as the vendored llama.cpp calls
# them: its RPC server is ggml-rpc-server), with the libraries they link.
TOOLS = ("llama-server", "ggml-rpc-server", "llama-bench")
TOOL_LIBRARIES = tuple(
    prefix + name
    for name in ("mtmd", "llama-common", "llama-server-impl", "llama-bench-impl")
    for prefix in ("lib", "")  # Linux, Windows
)
# llama-cpp-python opens libmtmd by its plain name (llama_cpp.mtmd_cpp); the others are only ever
# found by their soname (libllama-common.so.0), so their plain-named copies are not shipped.
PLAIN_NAMED = ("libmtmd.so",)


def pinned_llama_cpp_python() -> str:
    """The version pyproject.toml pins: one place says which llama.cpp the app is tested with."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python==([0-9][0-9A-Za-z.]*)"', text)
    if not match:
        raise SystemExit("engine: pyproject.toml does not pin llama-cpp-python==X.Y.Z")
    return match.group(1)


# --- GPU backends: built when this machine can build them ---------------------------------------
# VRAMPILOT_ENGINE_GPU=auto (default) builds every GPU backend whose toolchain is here; "none"
# builds none; "cuda", "vulkan" or "cuda,vulkan" require those (and fail saying what is missing).
GPU_ENV = "VRAMPILOT_ENGINE_GPU"
CUDA_ARCH_ENV = "VRAMPILOT_CUDA_ARCHITECTURES"
# Without a GPU to ask (`native`), the architectures of the cards users have: Turing to Hopper.
PORTABLE_CUDA_ARCHITECTURES = "75-virtual;80-virtual;86-real;89-real;90-virtual"
CUDA_HINT = (
    "install the CUDA toolkit (nvcc; https://developer.nvidia.com/cuda-downloads, or the distribution's "
    "nvidia-cuda-toolkit) and run `python packaging/engine/build.py --install` again"
)
VULKAN_HINT = (
    "install the Vulkan headers, glslc and the SPIR-V headers (Debian 13 / Ubuntu 24.10: "
    "`apt install libvulkan-dev glslc spirv-headers`; Windows: the LunarG Vulkan SDK) and run "
    "`python packaging/engine/build.py --install` again"
)


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cand = Path(root) / "bin" / ("nvcc.exe" if sys.platform == "win32" else "nvcc")
            if cand.is_file():
                return str(cand)
    cand = Path("/usr/local/cuda/bin/nvcc")
    return str(cand) if cand.is_file() else None


def cuda_problem(*, need_gpu: bool) -> str | None:
    """Why ggml-cuda is not built here, or None. It needs nvcc and cuBLAS (the toolkit's, or the
    PyPI nvidia-cublas wheel's). Left to itself (auto) it is built only where an NVIDIA GPU is
    visible: compiling it for every architecture takes an hour on two cores, for nothing on a
    machine without one (VRAMPILOT_ENGINE_GPU=cuda builds it anyway: installers, device checks)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return f"nvcc not found: {CUDA_HINT}"
    roots = [Path(nvcc).resolve().parent.parent, Path("/usr/local/cuda").resolve()]
    roots += [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    root = next((r for r in roots if (r / "include" / "cuda_runtime.h").is_file()), roots[0])
    includes = [d for r in roots for d in (r / "include", r / "targets" / "x86_64-linux" / "include")]
    includes.append(Path("/usr/include"))
    if not any((d / "cublas_v2.h").is_file() for d in includes):
        return (
            f"the CUDA toolkit at {root} has no cuBLAS (cublas_v2.h), which llama.cpp's CUDA backend needs: "
            "install the toolkit's cuBLAS (libcublas-dev) too"
        )
    if need_gpu and not _nvidia_gpu_visible():
        return f"no NVIDIA GPU here (set {GPU_ENV}=cuda to build the CUDA backend anyway)"
    return None


def _nvidia_gpu_visible() -> bool:
    if sys.platform != "win32" and Path("/dev/nvidia0").exists():
        return True
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


@dataclasses.dataclass(frozen=True)
class VulkanInputs:
    """What the Vulkan build is pointed at. Paths left None are found by CMake as usual."""

    include_dir: Path  # holds vulkan/vulkan_core.h
    headers_version: str  # "1.4.309": part of the cache key
    glslc: str
    glslc_version: str  # its first --version line: the shaders it writes are part of the wheel
    library: Path | None = None  # a libvulkan to link against (only its soname is recorded)
    spirv_config_dir: Path | None = None  # the folder of SPIRV-HeadersConfig.cmake
    glslc_library_dir: Path | None = None  # LD_LIBRARY_PATH for a glslc unpacked from its package
    source: str = "system"

    def cmake_args(self) -> list[str]:
        args = [f"-DVulkan_INCLUDE_DIR={self.include_dir}", f"-DVulkan_GLSLC_EXECUTABLE={self.glslc}"]
        if self.library is not None:
            args.append(f"-DVulkan_LIBRARY={self.library}")
        if self.spirv_config_dir is not None:
            args.append(f"-DSPIRV-Headers_DIR={self.spirv_config_dir}")
        return args


def _header_version(header: Path) -> str:
    text = header.read_text(encoding="utf-8", errors="replace")
    patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    complete = re.search(r"VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(\d+, *(\d+), *(\d+)", text)
    if complete and patch:
        return f"{complete.group(1)}.{complete.group(2)}.{patch.group(1)}"
    return f"1.3.{patch.group(1)}" if patch else "unknown"


def _with_library_dir(env: dict[str, str], library_dir: Path | None) -> dict[str, str]:
    """`env` with `library_dir` first on LD_LIBRARY_PATH (a glslc unpacked from its package finds
    its libshaderc there)."""
    if library_dir is None:
        return env
    return {
        **env,
        "LD_LIBRARY_PATH": os.pathsep.join(x for x in (str(library_dir), env.get("LD_LIBRARY_PATH", "")) if x),
    }


def _glslc_version(glslc: str, library_dir: Path | None = None) -> str | None:
    env = _with_library_dir(dict(os.environ), library_dir)
    try:
        out = subprocess.run([glslc, "--version"], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None


def _system_vulkan() -> tuple[VulkanInputs | None, str]:
    """The Vulkan SDK (VULKAN_SDK) or the system's headers, when they serve; else why not."""
    roots = [Path(os.environ["VULKAN_SDK"]) / "Include"] if os.environ.get("VULKAN_SDK") else []
    roots += [Path(os.environ["VULKAN_SDK"]) / "include"] if os.environ.get("VULKAN_SDK") else []
    roots += [Path("/usr/include"), Path("/usr/local/include")]
    header = next((r / "vulkan" / "vulkan_core.h" for r in roots if (r / "vulkan" / "vulkan_core.h").is_file()), None)
    if header is None:
        return None, "no Vulkan headers (vulkan/vulkan_core.h)"
    version = _header_version(header)
    if "VK_EXT_layer_settings" not in header.read_text(encoding="utf-8", errors="replace"):
        return None, (
            f"the Vulkan headers here ({version}) lack VK_EXT_layer_settings, which llama.cpp's Vulkan "
            "backend needs (1.3.261 or later)"
        )
    glslc = shutil.which("glslc")
    if glslc is None:
        return None, "no glslc (the shader compiler)"
    if not any((r / "spirv" / "unified1" / "spirv.hpp").is_file() for r in roots):
        return None, "no SPIR-V headers (spirv/unified1/spirv.hpp)"
    # ggml-vulkan asks CMake for the SPIR-V headers' package (find_package(SPIRV-Headers CONFIG)),
    # which some installs of the headers lack.
    prefixes = [r.parent for r in roots] + [
        Path(p) for p in os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p
    ]
    configs = ("share/cmake", "lib/cmake", "lib/x86_64-linux-gnu/cmake", "lib64/cmake", "cmake")
    if not any(
        list((prefix / c).glob("SPIRV-Headers*/SPIRV-HeadersConfig.cmake")) for prefix in prefixes for c in configs
    ):
        return None, (
            "the SPIR-V headers have no CMake package (SPIRV-HeadersConfig.cmake), which llama.cpp's "
            "Vulkan build asks for"
        )
    return VulkanInputs(header.parent.parent, version, glslc, _glslc_version(glslc) or "unknown"), ""


# Where the system's headers are too old (Debian 12: 1.3.239), the build takes Debian 13's, fetched
# by apt into the engine cache: its own sources list, lists and archive folder, the system's
# keyring to check the signatures, nothing installed. Only headers and a library to link against
# come from there; the module links libvulkan.so.1 by soname and runs on the system's loader
# (ggml-vulkan resolves every Vulkan function through vkGetInstanceProcAddr at run time).
DEBIAN_VULKAN_SUITE = "trixie"
DEBIAN_VULKAN_PACKAGES = ("libvulkan-dev", "libvulkan1", "spirv-headers")
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
DEBIAN_MIRROR_ENV = "VRAMPILOT_DEBIAN_MIRROR"  # another Debian mirror, if the default is not reachable


def _apt_options(state: Path, sources: Path) -> list[str]:
    return [
        "-o",
        f"Dir::Etc::SourceList={sources}",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        "Dir::Etc::Preferences=/nonexistent",
        "-o",
        "Dir::Etc::PreferencesParts=/nonexistent",
        "-o",
        f"Dir::State={state}",
        "-o",
        "Dir::State::status=/dev/null",
        "-o",
        f"Dir::Cache={state / 'cache'}",
        "-o",
        "Acquire::Languages=none",
        "-o",
        "quiet=1",
        # As root apt drops to the _apt user to download, who cannot write into root's cache.
        *(["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []),
    ]


def _apt_download(packages: tuple[str, ...], into: Path, options: list[str]) -> None:
    into.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["apt-get", *options, "download", *packages], cwd=into, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RuntimeError(f"apt-get download {' '.join(packages)}: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")


def _unpack_debs(debs: Path, root: Path) -> dict[str, str]:
    versions = {}
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=300)
        name, version = deb.name.split("_")[:2]
        versions[name] = version.replace("%3a", ":")
    return versions


def fetch_debian_vulkan(dest: Path) -> dict[str, str]:
    """Debian 13's Vulkan and SPIR-V headers unpacked under dest/root; their versions."""
    if (dest / "packages.json").is_file():
        return dict(json.loads((dest / "packages.json").read_text(encoding="utf-8")))
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError("apt-get and dpkg-deb are needed to fetch Debian 13's Vulkan headers")
    if not DEBIAN_KEYRING.is_file():
        raise RuntimeError(f"no Debian archive keyring ({DEBIAN_KEYRING}) to check Debian 13's packages with")
    work = dest.with_name(dest.name + ".part")
    shutil.rmtree(work, ignore_errors=True)
    (work / "state" / "lists" / "partial").mkdir(parents=True)
    (work / "state" / "cache" / "archives" / "partial").mkdir(parents=True)
    mirror = os.environ.get(DEBIAN_MIRROR_ENV, "http://deb.debian.org/debian").rstrip("/")
    sources = work / "sources.list"
    sources.write_text(f"deb [signed-by={DEBIAN_KEYRING}] {mirror} {DEBIAN_VULKAN_SUITE} main\n", encoding="utf-8")
    options = _apt_options(work / "state", sources)
    log(f"fetching Debian 13's Vulkan headers ({', '.join(DEBIAN_VULKAN_PACKAGES)}) into {dest}")
    r = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or "W: GPG error" in r.stderr or "NO_PUBKEY" in r.stderr:
        raise RuntimeError(f"apt-get update for {DEBIAN_VULKAN_SUITE}: {(r.stderr or r.stdout).strip()[-400:]}")
    _apt_download(DEBIAN_VULKAN_PACKAGES, work / "debs", options)  # apt checks each file against the signed lists
    versions = _unpack_debs(work / "debs", work / "root")
    shutil.rmtree(work / "state")  # the lists (20 MB): not needed once the packages are unpacked
    shutil.rmtree(work / "debs")
    (work / "packages.json").write_text(json.dumps(versions, indent=1, sort_keys=True), encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(work, dest)
    return versions


def fetch_system_glslc(dest: Path) -> Path:
    """glslc and its library from this system's own package sources (no root needed), unpacked
    under dest/root: for a machine whose user cannot `apt install glslc`."""
    glslc = dest / "root" / "usr" / "bin" / "glslc"
    if glslc.is_file():
        return glslc
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError("no glslc, and no apt-get to fetch it")
    work = dest.with_name(dest.name + ".part")
    shutil.rmtree(work, ignore_errors=True)
    log("fetching glslc from this system's package sources")
    _apt_download(("glslc", "libshaderc1"), work / "debs", ["-o", "quiet=1"])
    _unpack_debs(work / "debs", work / "root")
    shutil.rmtree(work / "debs")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(work, dest)
    return glslc


def _debian_vulkan() -> tuple[VulkanInputs | None, str]:
    if not sys.platform.startswith("linux") or not sysconfig.get_platform().endswith("x86_64"):
        return None, "Debian 13's Vulkan headers are fetched for x86-64 Linux only"
    dest = cache_root() / "vulkan-build" / f"debian-{DEBIAN_VULKAN_SUITE}"
    try:
        versions = fetch_debian_vulkan(dest)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return None, f"could not fetch Debian 13's Vulkan headers: {exc}"
    root = dest / "root" / "usr"
    glslc, library_dir = shutil.which("glslc"), None
    if glslc is None:
        try:
            path = fetch_system_glslc(cache_root() / "vulkan-build" / "glslc")
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            return None, f"no glslc (the shader compiler), and it could not be fetched: {exc}"
        glslc, library_dir = str(path), path.parents[1] / "lib" / "x86_64-linux-gnu"
    glslc_version = _glslc_version(glslc, library_dir)
    if glslc_version is None:
        return None, f"{glslc} does not run here"
    inputs = VulkanInputs(
        include_dir=root / "include",
        headers_version=_header_version(root / "include" / "vulkan" / "vulkan_core.h"),
        glslc=glslc,
        glslc_version=glslc_version,
        library=root / "lib" / "x86_64-linux-gnu" / "libvulkan.so.1",
        spirv_config_dir=root / "share" / "cmake" / "SPIRV-Headers",
        glslc_library_dir=library_dir,
        source=f"Debian 13 packages ({', '.join(f'{k} {v}' for k, v in sorted(versions.items()))})",
    )
    missing = [
        p
        for p in (inputs.include_dir / "vulkan" / "vulkan_core.h", inputs.library, inputs.spirv_config_dir)
        if p and not p.exists()
    ]
    if missing:
        return (
            None,
            f"Debian 13's packages in {dest} lack {', '.join(map(str, missing))}: delete that folder to fetch them again",
        )
    return inputs, ""


_VULKAN: dict[tuple[str, ...], tuple[VulkanInputs | None, str | None]] = {}


def vulkan_inputs() -> tuple[VulkanInputs | None, str | None]:
    """The headers, glslc and SPIR-V package the Vulkan build uses, or why it cannot be built:
    a VULKAN_SDK or the system's headers where they are new enough, else (no VULKAN_SDK set)
    Debian 13's, fetched once into the engine cache. Asked once per run."""
    asked = (*(os.environ.get(v, "") for v in ("VULKAN_SDK", "PATH", "CMAKE_PREFIX_PATH")), str(cache_root()))
    if asked not in _VULKAN:
        inputs, why = _system_vulkan()
        if inputs is None and not os.environ.get("VULKAN_SDK"):
            fetched, why_not = _debian_vulkan()
            if fetched is not None:
                inputs = fetched
            elif shutil.which("apt-get"):
                why = f"{why}; {why_not}"
        _VULKAN[asked] = (inputs, None if inputs else why)
    return _VULKAN[asked]


def vulkan_problem() -> str | None:
    """Why the vendored ggml-vulkan cannot be built here, or None when it can. It needs headers
    with VK_EXT_layer_settings (Vulkan-Headers 1.3.261 and later: Debian 12's 1.3.239 lack it),
    glslc to compile its shaders, and the SPIR-V headers with their CMake package."""
    return vulkan_inputs()[1]


# --- Windows (x86-64), cross-compiled here with MinGW-w64 --------------------------------------
# `--windows` builds the same engine for 64-bit Windows on this Linux machine, with Debian's
# MinGW-w64 (posix threads): the same CMake arguments and post-processing, plus what a MinGW
# build needs (below). Its wheel (tagged win_amd64) is cached by its own key, whose platform is
# "win-amd64" whatever the build machine; the Windows bundle installs it into the Windows Python.
WINDOWS_PLATFORM = "win-amd64"
WINDOWS_WHEEL_TAG = "win_amd64"
MINGW_TRIPLET = "x86_64-w64-mingw32"
WINDOWS_NO_CUDA = "the Windows engine is cross-compiled with MinGW, which cannot build CUDA"
MINGW_HINT = (
    "install Debian's MinGW-w64 (`apt install g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix "
    "mingw-w64-tools`) and run `python packaging/engine/build.py --windows` again"
)
# On top of BASE_CMAKE_ARGS: shared libraries (llama.cpp defaults them OFF under MinGW, and
# dynamic backends need them).
WINDOWS_CMAKE_ARGS = ("-DBUILD_SHARED_LIBS=ON",)
# The C++ runtime, winpthreads and OpenMP (ggml-cpu uses it) as DLLs, shipped beside the
# libraries: a Windows machine has none of them.
MINGW_RUNTIME_DLLS = ("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll", "libgomp-1.dll")
# Both engines' CPU variants are compiled with a header of fixes to GCC 12's AMX intrinsics (Debian
# 12's compiler; later GCCs have the same fixes), included before every C++ file (`-include`):
# - `_tile_loadconfig` tells the compiler that `ldtilecfg` reads 8 bytes of its 64-byte config, so
#   GCC drops the stores of the tile rows and columns that ggml-cpu/amx/mmq.cpp makes on the stack
#   (`ggml_tile_config_init`), and the first `tileloadd` of the sapphirerapids variant faults:
#   SIGILL on every batched prompt on a CPU with AMX (Xeon 4th generation and later). Found on an
#   AMX build machine, 2026-12-07; llama.cpp PR #26954 moves the config out of the stack instead.
# - The tile loads and stores pass a row stride to the assembler as `long`, 32 bits on Win64, so
#   under MinGW they come out as `tileloadd (%rax,%edi,1)`, an address the assembler refuses. The
#   same three macros with a 64-bit stride (what later GCCs pass); no other file uses them.
AMX_COMPAT_HEADER = """\
#pragma once
#if defined(__AMX_TILE__) && defined(__x86_64__)
#include <immintrin.h>
typedef struct { unsigned char bytes[64]; } vrampilot_tile_config_bytes;
static __inline__ void vrampilot_tile_loadconfig(const void *config) {
    __asm__ volatile("ldtilecfg\\t%X0" ::"m"(*(const vrampilot_tile_config_bytes *) config));
}
#define _tile_loadconfig vrampilot_tile_loadconfig
#undef _tile_loadd_internal
#undef _tile_stream_loadd_internal
#undef _tile_stored_internal
#define _tile_loadd_internal(dst, base, stride) \\
    __asm__ volatile("{tileloadd\\t(%0,%1,1), %%tmm" #dst "|tileloadd\\t%%tmm" #dst ", [%0+%1*1]}" \\
                     ::"r"((const void *) (base)), "r"((long long) (stride)))
#define _tile_stream_loadd_internal(dst, base, stride) \\
    __asm__ volatile("{tileloaddt1\\t(%0,%1,1), %%tmm" #dst "|tileloaddt1\\t%%tmm" #dst ", [%0+%1*1]}" \\
                     ::"r"((const void *) (base)), "r"((long long) (stride)))
#define _tile_stored_internal(src, base, stride) \\
    __asm__ volatile("{tilestored\\t%%tmm" #src ", (%0,%1,1)|tilestored\\t[%0+%1*1], %%tmm" #src "}" \\
                     ::"r"((void *) (base)), "r"((long long) (stride)) : "memory")
#endif
"""
# Debian 12's mingw-w64 (10.0) lacks the thread power-throttling declarations of the Windows
# SDK 10.0.16299 (mingw-w64 11 has them), which ggml-cpu uses to keep Windows 11 from parking its
# threads on a few cores: declared here, as the SDK does, and included before every source file.
MINGW_COMPAT_HEADER = """\
#pragma once
#include <_mingw.h>
#if __MINGW64_VERSION_MAJOR < 11
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#define THREAD_POWER_THROTTLING_VALID_FLAGS (THREAD_POWER_THROTTLING_EXECUTION_SPEED)
typedef struct _THREAD_POWER_THROTTLING_STATE {
    unsigned long Version;
    unsigned long ControlMask;
    unsigned long StateMask;
} THREAD_POWER_THROTTLING_STATE;
#endif
""" + AMX_COMPAT_HEADER.removeprefix("#pragma once\n")
# The C and C++ flags also carry -muse-unaligned-vector-move: GCC aligns 32-byte stack slots for
# AVX only to 16 bytes on Win64 (GCC bug 54412), and the aligned moves it emits on them fault at
# random; the assembler turns every aligned move into an unaligned one (llama.cpp's old Makefile
# did this too, PR #2945).
_MINGW_FLAGS = "-Wa,-muse-unaligned-vector-move -include ${CMAKE_CURRENT_LIST_DIR}/mingw-compat.h"
WINDOWS_TOOLCHAIN = f"""\
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)
set(CMAKE_C_COMPILER {MINGW_TRIPLET}-gcc-posix)
set(CMAKE_CXX_COMPILER {MINGW_TRIPLET}-g++-posix)
set(CMAKE_RC_COMPILER {MINGW_TRIPLET}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/{MINGW_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_C_FLAGS_INIT "{_MINGW_FLAGS}")
set(CMAKE_CXX_FLAGS_INIT "{_MINGW_FLAGS}")
"""
_TARGET = {"windows": False}


def use_windows_target() -> None:
    """From now on this run builds, keys and checks the Windows engine (`--windows`)."""
    _TARGET["windows"] = True


def building_for_windows() -> bool:
    return _TARGET["windows"]


def mingw_problem() -> str | None:
    """Why the Windows engine cannot be built here, or None."""
    missing = [t for t in (f"{MINGW_TRIPLET}-g++-posix", f"{MINGW_TRIPLET}-dlltool") if shutil.which(t) is None]
    return f"{', '.join(missing)} not found: {MINGW_HINT}" if missing else None


def _mingw_version() -> str:
    """The cross compiler's version line: it shapes every file of the wheel, so it is in the key."""
    out = subprocess.run(
        [f"{MINGW_TRIPLET}-g++-posix", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.splitlines()[0].strip()


def _compiler_inputs() -> dict[str, str]:
    """What the compiler is given besides CMake arguments: the AMX header, and the Windows toolchain."""
    if not building_for_windows():
        return {"cpu_compat_header": AMX_COMPAT_HEADER}
    why = mingw_problem()
    if why is not None:
        raise SystemExit(f"engine: {why}")
    return {"toolchain": WINDOWS_TOOLCHAIN, "mingw_compat_header": MINGW_COMPAT_HEADER, "mingw": _mingw_version()}


def windows_build_root() -> Path:
    return cache_root() / "windows-build"


def windows_toolchain_path() -> Path:
    return windows_build_root() / "mingw-toolchain.cmake"


def windows_vulkan_import_library(inputs: VulkanInputs) -> Path:
    """Where the import library of Windows' Vulkan loader (vulkan-1.dll) made from these headers lies."""
    return windows_build_root() / f"vulkan-1-{inputs.headers_version}" / "libvulkan-1.dll.a"


_VK_PROTOTYPE = re.compile(r"VKAPI_ATTR\s+\w+\s+VKAPI_CALL\s+(vk\w+)\s*\(")


def make_windows_build_inputs() -> None:
    """The toolchain file and the Vulkan loader's import library, written before a Windows build.

    Debian has no MinGW Vulkan SDK; the loader's import library only names its exports, so it is
    generated from the headers' prototypes (core and Win32 WSI) with dlltool. ggml-vulkan then
    links vulkan-1.dll by name, which Windows' GPU drivers install."""
    for path, text in (
        (windows_toolchain_path(), WINDOWS_TOOLCHAIN),
        (windows_toolchain_path().with_name("mingw-compat.h"), MINGW_COMPAT_HEADER),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    inputs = vulkan_inputs()[0]
    assert inputs is not None  # gpu_backends() required it
    library = windows_vulkan_import_library(inputs)
    if library.is_file():
        return
    headers = inputs.include_dir / "vulkan"
    names = sorted(
        {n for h in ("vulkan_core.h", "vulkan_win32.h") for n in _VK_PROTOTYPE.findall((headers / h).read_text())}
    )
    library.parent.mkdir(parents=True, exist_ok=True)
    definition = library.with_name("vulkan-1.def")
    definition.write_text("LIBRARY vulkan-1.dll\nEXPORTS\n" + "".join(f"    {n}\n" for n in names), encoding="utf-8")
    subprocess.run(
        [
            f"{MINGW_TRIPLET}-dlltool",
            "-d",
            str(definition),
            "-l",
            str(library.with_suffix(".part")),
            "-D",
            "vulkan-1.dll",
        ],
        check=True,
        timeout=120,
    )
    os.replace(library.with_suffix(".part"), library)
    log(f"generated {library} ({len(names)} functions of vulkan-1.dll)")


def mingw_runtime_dlls() -> dict[str, Path]:
    """The MinGW runtime DLLs the engine's files import, from the cross compiler's own folders."""
    found = {}
    for name in MINGW_RUNTIME_DLLS:
        out = subprocess.run(
            [f"{MINGW_TRIPLET}-g++-posix", f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if not Path(out).is_file():
            raise SystemExit(
                f"engine: the MinGW runtime {name} is not where {MINGW_TRIPLET}-g++-posix says: {MINGW_HINT}"
            )
        found[name] = Path(out).resolve()
    return found


def windows_wheel_name(name: str) -> str:
    """The compiled wheel's name (tagged for the build machine by scikit-build-core) for Windows."""
    return re.sub(r"-py3-none-[^-]+\.whl$", f"-py3-none-{WINDOWS_WHEEL_TAG}.whl", name)


def cached_windows_wheel() -> Path | None:
    found = sorted((cache_root() / recipe_key()).glob(f"llama_cpp_python-*-{WINDOWS_WHEEL_TAG}.whl"))
    return found[0] if found else None


def gpu_backends() -> tuple[list[str], dict[str, str]]:
    """The GPU backends to build, and why each other one is not built."""
    if building_for_windows():
        why = vulkan_problem()
        if why is not None:
            raise SystemExit(f"engine: the Windows engine is built with Vulkan: {why}: {VULKAN_HINT}")
        return ["vulkan"], {"cuda": WINDOWS_NO_CUDA}
    wanted = os.environ.get(GPU_ENV, "auto").strip().lower() or "auto"
    if wanted == "none":
        return [], {"cuda": f"{GPU_ENV}=none", "vulkan": f"{GPU_ENV}=none"}
    required = set() if wanted == "auto" else {x.strip() for x in wanted.split(",") if x.strip()}
    unknown = required - {"cuda", "vulkan"}
    if unknown:
        raise SystemExit(f"engine: {GPU_ENV}={wanted}: unknown backend {', '.join(sorted(unknown))} (cuda, vulkan)")
    built: list[str] = []
    skipped: dict[str, str] = {}
    why_not_cuda = cuda_problem(need_gpu="cuda" not in required)
    if why_not_cuda is None:
        built.append("cuda")
    else:
        skipped["cuda"] = why_not_cuda
    why = vulkan_problem()
    if why is None:
        built.append("vulkan")
    else:
        skipped["vulkan"] = f"{why}: {VULKAN_HINT}"
    if built and not required:
        # Left to itself the recipe never fails a `make run` for a GPU backend: a build with one that
        # failed on this machine before is not tried again (the CPU engine is built instead), until
        # the record is removed or the backend is asked for by name.
        failed = _failed_gpu_builds().get(_compile_key_for(_cmake_args_for(built)))
        if failed:
            skipped.update({b: f"{failed}; delete {_failures_path()} to try again" for b in built})
            built = []
    missing = required - set(built)
    if missing:
        raise SystemExit("engine: " + "; ".join(f"{name}: {skipped[name]}" for name in sorted(missing)))
    if required:
        built = [b for b in built if b in required]
        skipped.update({b: f"{GPU_ENV}={wanted}" for b in ("cuda", "vulkan") if b not in required})
    return built, skipped


def _cuda_architectures() -> str:
    chosen = os.environ.get(CUDA_ARCH_ENV, "").strip()
    if chosen:
        return chosen
    if _nvidia_gpu_visible():
        return "native"  # the cards in this machine only: the build is for it
    return PORTABLE_CUDA_ARCHITECTURES


def cmake_args() -> list[str]:
    return _cmake_args_for(gpu_backends()[0])


def _cmake_args_for(built: list[str]) -> list[str]:
    args = list(BASE_CMAKE_ARGS)
    if building_for_windows():
        args += [f"-DCMAKE_TOOLCHAIN_FILE={windows_toolchain_path()}", *WINDOWS_CMAKE_ARGS]
    if "cuda" in built:
        nvcc = find_nvcc()
        args[args.index("-DGGML_CUDA=OFF")] = "-DGGML_CUDA=ON"
        args += [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={_cuda_architectures()}"]
    if "vulkan" in built:
        args[args.index("-DGGML_VULKAN=OFF")] = "-DGGML_VULKAN=ON"
        inputs = vulkan_inputs()[0]
        assert inputs is not None
        if building_for_windows():  # the headers and glslc serve; the library is Windows' loader
            inputs = dataclasses.replace(inputs, library=windows_vulkan_import_library(inputs))
        args += inputs.cmake_args()
    return args


def _keyed_args(args: list[str]) -> list[str]:
    """The CMake arguments as the cache key sees them: a path inside the engine cache is named
    relative to it, so moving the cache (VRAMPILOT_ENGINE_CACHE) does not make a new key."""
    root = str(cache_root())
    return [a.replace(root, "<engine-cache>") for a in args]


def _vulkan_versions(args: list[str]) -> dict[str, str]:
    """The Vulkan headers' and glslc's versions when the build has Vulkan: they shape the
    module (the headers' API, the shaders glslc writes) and so the key."""
    if "-DGGML_VULKAN=ON" not in args:
        return {}
    inputs = vulkan_inputs()[0]
    assert inputs is not None
    return {"vulkan_headers": inputs.headers_version, "glslc": inputs.glslc_version}


def platform_tag() -> str:
    """The platform the engine is built for (the key's, not the wheel's tag)."""
    return WINDOWS_PLATFORM if building_for_windows() else sysconfig.get_platform()


def recipe() -> dict[str, object]:
    """Everything that shapes the built wheel; its hash is the cache key."""
    args = cmake_args()
    return {
        "llama_cpp_python": pinned_llama_cpp_python(),
        "cmake_args": _keyed_args(args),
        "platform": platform_tag(),
        "recipe_revision": RECIPE_REVISION,
        **_vulkan_versions(args),
        **_compiler_inputs(),
    }


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def compile_key() -> str:
    """What the compiler sees; the compiled wheel is cached under it, before post-processing."""
    return _compile_key_for(cmake_args())


def _compile_key_for(args: list[str]) -> str:
    return _hash(
        {
            "llama_cpp_python": pinned_llama_cpp_python(),
            "cmake_args": _keyed_args(args),
            "platform": platform_tag(),
            **_vulkan_versions(args),
            **_compiler_inputs(),
        }
    )


def _failures_path() -> Path:
    return cache_root() / "gpu-build-failures.json"


def _failed_gpu_builds() -> dict[str, str]:
    """Compile keys whose build with GPU backends failed here, with what to tell the user."""
    try:
        data = json.loads(_failures_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def record_gpu_build_failure(key: str, reason: str) -> None:
    failures = _failed_gpu_builds() | {key: reason}
    path = _failures_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".part").write_text(json.dumps(failures, indent=1), encoding="utf-8")
    os.replace(path.with_suffix(".part"), path)


def recipe_key() -> str:
    return _hash(recipe())


def cache_root() -> Path:
    env = os.environ.get("VRAMPILOT_ENGINE_CACHE")
    if env:
        return Path(env)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "vrampilot" / "engine"


def log(message: str) -> None:
    print(f"engine: {message}", flush=True)


# --- the build ---------------------------------------------------------------------------------


def fetch_sdist(python: str, version: str, into: Path) -> Path:
    """The sdist from PyPI (kept in the cache: 76 MB, and the variant table is read from it)."""
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob(f"llama_cpp_python-{version}.tar.gz"))
    if found:
        return found[0]
    log(f"downloading the llama-cpp-python {version} source release")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-cache-dir",
            "-d",
            str(into),
            f"llama-cpp-python=={version}",
        ],
        check=True,
    )
    found = sorted(into.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"engine: pip did not leave llama_cpp_python-{version}.tar.gz in {into}")
    return found[0]


_VARIANT_RE = re.compile(r"ggml_add_cpu_backend_variant\(\s*([A-Za-z0-9_.]+)((?:\s+[A-Z0-9_]+)*)\s*\)")


def x86_variants(cmake_text: str) -> dict[str, list[str]]:
    """CPU variant -> the instruction-set features its CMake line turns on (x86 block only)."""
    start = cmake_text.find("if (GGML_CPU_ALL_VARIANTS)")
    x86 = cmake_text.find('GGML_SYSTEM_ARCH STREQUAL "x86"', start)
    end = cmake_text.find("elseif", x86)
    if start < 0 or x86 < 0 or end < 0:
        raise SystemExit("engine: could not find the x86 CPU variant list in ggml/src/CMakeLists.txt")
    return {m.group(1): m.group(2).split() for m in _VARIANT_RE.finditer(cmake_text[x86:end])}


def read_variant_table(sdist: Path) -> dict[str, list[str]]:
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("vendor/llama.cpp/ggml/src/CMakeLists.txt"))
        handle = tar.extractfile(member)
        assert handle is not None
        return x86_variants(handle.read().decode("utf-8"))


def _unpacked_source(sdist: Path, into: Path) -> Path:
    """The sdist unpacked once into `into` (kept, so CMake's build folder beside it stays valid),
    without what an earlier build installed into it."""
    root = into / sdist.name.removesuffix(".tar.gz")
    if not (root / "pyproject.toml").is_file():
        shutil.rmtree(into, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(into.with_name(into.name + ".part"), filter="data")
        os.replace(into.with_name(into.name + ".part"), into)
    # llama-cpp-python's CMake file installs the libraries into its source tree too, and the wheel
    # takes the package from there: an earlier build's files must not ride along.
    shutil.rmtree(root / "llama_cpp" / "lib", ignore_errors=True)
    return root


def build_wheel(python: str, sdist: Path, out_dir: Path, *, build_dir: Path | None = None) -> Path:
    """Compile the wheel. With `build_dir`, the sources and CMake's build folder are kept there,
    so that a build run again after a failure compiles only what is left (the Windows engine's:
    a MinGW build is new ground, and starting it over costs half an hour)."""
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(cmake_args())
    env["FORCE_CMAKE"] = "1"
    if not building_for_windows():  # the Windows toolchain file includes its own (mingw-compat.h)
        header = cache_root() / "amx-compat.h"
        header.parent.mkdir(parents=True, exist_ok=True)
        if not header.is_file() or header.read_text(encoding="utf-8") != AMX_COMPAT_HEADER:
            header.write_text(AMX_COMPAT_HEADER, encoding="utf-8")
        # CMake takes CXXFLAGS into CMAKE_CXX_FLAGS when it first configures the build.
        env["CXXFLAGS"] = f"{env.get('CXXFLAGS', '')} -include {shlex.quote(str(header))}".strip()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    vulkan = vulkan_inputs()[0] if "-DGGML_VULKAN=ON" in cmake_args() else None
    if vulkan is not None:
        env = _with_library_dir(env, vulkan.glslc_library_dir)
    source, settings = str(sdist), []
    if build_dir is not None:
        source = str(_unpacked_source(sdist, build_dir / "src"))
        # -k0: the build goes on past a failing file, so that one run names every file that fails.
        settings = [f"--config-settings=build-dir={build_dir / 'cmake'}", "--config-settings=build.tool-args=-k0"]
    log(f"compiling llama-cpp-python with {env['CMAKE_ARGS']}")
    # pip says nothing while CMake runs: a line a minute, so a first `make run` does not look hung.
    cores = int(env["CMAKE_BUILD_PARALLEL_LEVEL"])
    two_core_min = 11 if vulkan is not None else 9  # measured: 661 s and 545 s (docs/gpus.md)
    log(f"first build: about {two_core_min * 2 // max(cores, 1)} minutes on {cores} cores; it is cached afterwards")
    started = time.monotonic()
    proc = subprocess.Popen(
        [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", *settings, "-w", str(out_dir), source], env=env
    )
    while True:
        try:
            rc = proc.wait(timeout=60)
            break
        except subprocess.TimeoutExpired:
            log(f"still compiling, {(time.monotonic() - started) / 60:.0f} min so far")
    if rc != 0:
        raise subprocess.CalledProcessError(rc, proc.args)
    wheels = sorted(out_dir.glob("llama_cpp_python-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"engine: expected one wheel in {out_dir}, found {[w.name for w in wheels]}")
    log(f"compiled in {time.monotonic() - started:.0f} s")
    return wheels[0]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


# ggml's install rules also put its libraries, headers and CMake files at the wheel's top level
# (site-packages/lib, site-packages/include): nothing loads them from there.
_DROPPED_TOP_LEVEL = ("lib/cmake/", "lib/pkgconfig/", "include/")


def _is_backend_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if base.startswith(("libggml-base.", "ggml-base.")):  # the library every backend links, not one
        return False
    return base.startswith(("libggml-", "ggml-")) and (base.endswith((".so", ".dll")) or ".so." in base)


def same_module(a: bytes, b: bytes) -> bool:
    """The same library, installed twice. A Windows DLL's two copies differ in their PE header's
    TimeDateStamp and CheckSum (MinGW's two install steps link or strip each copy at its own
    moment): those eight bytes are left out of the comparison, nothing else."""
    if a == b:
        return True
    if len(a) != len(b) or not a.startswith(b"MZ") or len(a) < 0x40:
        return False
    pe = int.from_bytes(a[0x3C:0x40], "little")
    if a[pe : pe + 4] != b"PE\0\0" or len(a) < pe + 24 + 68:
        return False
    stamp, checksum = pe + 8, pe + 24 + 64  # COFF header's TimeDateStamp; optional header's CheckSum

    def masked(x: bytes) -> bytes:
        return x[:stamp] + bytes(4) + x[stamp + 4 : checksum] + bytes(4) + x[checksum + 4 :]

    return masked(a) == masked(b)


def postprocess(wheel: Path, manifest: dict[str, object], out: Path) -> dict[str, object]:
    """Move the dynamic backends next to libggml and add the manifest; RECORD is rewritten."""
    moved: list[str] = []
    tools: list[str] = []
    with zipfile.ZipFile(wheel) as src:
        entries = [(info, src.read(info)) for info in src.infolist()]
    record_name = next(info.filename for info, _ in entries if info.filename.endswith(".dist-info/RECORD"))
    files: list[tuple[zipfile.ZipInfo, bytes]] = []
    packaged = {info.filename: data for info, data in entries}
    for info, data in entries:
        name = info.filename
        if name == record_name or name.startswith(_DROPPED_TOP_LEVEL) or name.endswith(".a"):
            continue  # .a: MinGW's import libraries (x.dll.a), for linking against the DLLs only
        if name.endswith(".dist-info/WHEEL") and building_for_windows():
            data = re.sub(rb"(?m)^Tag: py3-none-\S+$", f"Tag: py3-none-{WINDOWS_WHEEL_TAG}".encode(), data)
        if name.startswith("bin/") and _is_backend_module(name):
            base = name.rsplit("/", 1)[-1]
            target = ("llama_cpp/lib/cpu/" if _variant_of(base) else "llama_cpp/lib/") + base
            if "llama_cpp/lib/" + base in packaged:  # llama-cpp-python installs some (ggml-rpc) itself
                if not same_module(packaged["llama_cpp/lib/" + base], data):
                    raise SystemExit(f"engine: {name} differs from llama_cpp/lib/{base}; update the recipe")
                moved.append(target.removeprefix("llama_cpp/lib/"))
                continue
            info = _renamed(info, target)
            moved.append(target.removeprefix("llama_cpp/lib/"))
        elif name.startswith("bin/"):
            base = name.rsplit("/", 1)[-1]
            if base.endswith(".dll") and base.startswith(TOOL_LIBRARIES):  # Windows puts DLLs in bin/
                if "llama_cpp/lib/" + base not in packaged:
                    files.append((_renamed(info, "llama_cpp/lib/" + base), data))
                continue
            if base.removesuffix(".exe") not in TOOLS:
                continue  # the other tools (quantize, perplexity, ...): not shipped
            info = _renamed(info, "llama_cpp/lib/" + base)
            tools.append(base)
        elif name.startswith("lib/"):
            base = name.rsplit("/", 1)[-1]
            if not base.startswith(TOOL_LIBRARIES) or f"llama_cpp/lib/{base}" in packaged:
                continue  # ggml's and llama's own copies: llama-cpp-python ships them in llama_cpp/lib
            if not _loaded_name(base, {n.rsplit("/", 1)[-1] for n in packaged if n.startswith("lib/")}):
                continue
            info = _renamed(info, "llama_cpp/lib/" + base)
        files.append((info, strip_cache_runpath(data, name)))
    if building_for_windows():
        for base, path in mingw_runtime_dlls().items():
            files.append((_new_entry("llama_cpp/lib/" + base), path.read_bytes()))
    variants = manifest["cpu_variants"]
    assert isinstance(variants, dict)
    built = {_variant_of(name.rsplit("/", 1)[-1]) for name in moved} - {None}
    manifest = dict(manifest)
    manifest["cpu_variants"] = {name: feats for name, feats in variants.items() if name in built}
    manifest["backend_files"] = sorted(moved)
    manifest["tools"] = sorted(tools)
    missing = [t for t in TOOLS if not any(x.removesuffix(".exe") == t for x in tools)]
    if missing:
        raise SystemExit(f"engine: the wheel lacks {', '.join(missing)}; the recipe did not apply")
    if not manifest["cpu_variants"] and platform_tag().endswith(("x86_64", "amd64")):
        raise SystemExit("engine: the wheel carries no CPU variant modules; the recipe did not apply")
    blob = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    files.append((_new_entry("llama_cpp/lib/" + MANIFEST_NAME), blob))
    record = [_record_line(i.filename, d) for i, d in files] + [f"{record_name},,"]
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for i, d in files:
            dst.writestr(i, d)
        dst.writestr(record_name, "\n".join(record) + "\n")
    os.replace(tmp, out)
    return manifest


def strip_cache_runpath(data: bytes, name: str) -> bytes:
    """An ELF file whose RUNPATH names a folder of the engine cache, with that entry cut off.

    llama-cpp-python's CMake file adds every link folder outside the build tree to the installed
    RUNPATH (CMAKE_INSTALL_RPATH_USE_LINK_PATH), so linking against the Debian 13 libvulkan in the
    cache leaves `$ORIGIN:<cache>/...` in libggml-vulkan: the module would load that libvulkan,
    built for a newer glibc, instead of the system's loader. The entry is the string's tail, so it
    is overwritten with NULs in place (the string table keeps its size); any other place the cache
    is named is an error."""
    root = str(cache_root()).encode()
    if root not in data or not data.startswith(b"\x7fELF"):
        return data
    out = bytearray(data)
    start = 0
    while (i := out.find(root, start)) >= 0:
        end = out.find(b"\0", i)
        if i == 0 or out[i - 1 : i] != b":" or end < 0 or b":" in out[i:end]:
            raise SystemExit(f"engine: {name} names the engine cache ({root.decode()}) outside its RUNPATH's tail")
        out[i - 1 : end] = b"\0" * (end - i + 1)
        start = end
    return bytes(out)


def _loaded_name(base: str, siblings: set[str]) -> bool:
    """Whether a shared library file is loaded by this name: its soname (x.so.0), an unversioned
    library (x.so, with no x.so.N beside it), or a plain name llama-cpp-python opens. A wheel
    holds copies, not links, so each extra name would cost the whole library again."""
    if not base.endswith(".so") and ".so." not in base:
        return True  # Windows: one x.dll
    if re.fullmatch(r".+\.so\.\d+", base):
        return True
    if base.endswith(".so"):
        return base in PLAIN_NAMED or not any(re.fullmatch(re.escape(base) + r"\.\d+", s) for s in siblings)
    return False  # x.so.0.5.0


def _new_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _renamed(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(name, date_time=info.date_time)
    new.external_attr = info.external_attr  # keeps the executable bit
    new.compress_type = zipfile.ZIP_DEFLATED
    return new


def _variant_of(filename: str) -> str | None:
    match = re.match(r"(?:lib)?ggml-cpu-([A-Za-z0-9_.]+?)\.(?:so|dll)", filename)
    return match.group(1) if match else None


def ensure_wheel(python: str) -> Path:
    """The wheel for this recipe, from the cache or built now."""
    key = recipe_key()
    version = pinned_llama_cpp_python()
    target_dir = cache_root() / key
    windows = building_for_windows()
    existing = sorted(target_dir.glob("llama_cpp_python-*.whl"))
    if existing:
        log(f"using cached wheel {existing[0]} (recipe {key})")
        return existing[0]
    sdist = fetch_sdist(python, version, cache_root() / "sdist")
    raw_dir = cache_root() / f"compiled-{compile_key()}"
    raws = sorted(raw_dir.glob("llama_cpp_python-*.whl"))
    if raws:
        raw = raws[0]
        log(f"using the compiled wheel {raw} (post-processing it anew)")
    else:
        if windows:
            make_windows_build_inputs()
        with tempfile.TemporaryDirectory(prefix="vrampilot-engine-") as tmp:
            try:
                build_dir = windows_build_root() / f"build-{compile_key()}" if windows else None
                built = build_wheel(python, sdist, Path(tmp), build_dir=build_dir)
            except subprocess.CalledProcessError as exc:
                backends, _ = gpu_backends()
                if windows or not backends or os.environ.get(GPU_ENV, "auto").strip().lower() not in ("", "auto"):
                    raise
                # A toolkit that looked complete and still did not compile (a too-old compiler, a
                # broken SDK): the user gets the CPU engine now and doctor says why.
                why = (
                    f"the build with {', '.join(backends)} failed here on {time.strftime('%Y-%m-%d')} "
                    f"(pip exit {exc.returncode}; its output is above)"
                )
                record_gpu_build_failure(compile_key(), why)
                log(f"{why}: building the CPU engine instead")
                return ensure_wheel(python)
            raw_dir.mkdir(parents=True, exist_ok=True)
            raw = raw_dir / built.name
            shutil.copyfile(built, raw.with_suffix(".part"))
            os.replace(raw.with_suffix(".part"), raw)
    backends, skipped = gpu_backends()
    manifest: dict[str, object] = {
        "recipe_key": key,
        "recipe": recipe(),
        "cpu_variants": read_variant_table(sdist),
        "gpu_backends": backends,
        "gpu_skipped": skipped,  # why the build machine built without them (vrampilot doctor says it)
        "vulkan_source": vulkan_inputs()[0].source if "vulkan" in backends else None,  # type: ignore[union-attr]  # vulkan was built, so its inputs were found
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    target_dir.mkdir(parents=True, exist_ok=True)
    final = target_dir / (windows_wheel_name(raw.name) if windows else raw.name)
    postprocess(raw, manifest, final)
    log(f"cached {final}")
    return final


# --- install and check -------------------------------------------------------------------------


def installed_manifest(python: str) -> dict[str, object] | None:
    """The manifest of the llama_cpp that `python` would import, found without importing it."""
    code = (
        "import importlib.util, json, pathlib, sys\n"
        "spec = importlib.util.find_spec('llama_cpp')\n"
        "p = spec and spec.origin and pathlib.Path(spec.origin).parent / 'lib' / sys.argv[1]\n"
        "print(p.read_text() if p and p.is_file() else 'null')\n"
    )
    out = subprocess.run([python, "-c", code, MANIFEST_NAME], capture_output=True, text=True, check=True).stdout
    value = json.loads(out)
    return value if isinstance(value, dict) else None


def install(python: str) -> None:
    key = recipe_key()
    manifest = installed_manifest(python)
    if manifest and manifest.get("recipe_key") == key:
        log(f"installed engine matches the recipe ({key})")
        return
    if manifest:
        log(f"installed engine was built by recipe {manifest.get('recipe_key')}; replacing it with {key}")
    else:
        log("the installed llama-cpp-python (if any) was not built by this recipe; replacing it")
    wheel = ensure_wheel(python)
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel)],
        check=True,
    )
    # llama-cpp-python's own requirements, from the registry as usual (they are pure Python/numpy).
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "typing-extensions>=4.5.0",
            "numpy>=1.20.0",
            "diskcache>=5.6.1",
            "jinja2>=2.11.3",
        ],
        check=True,
    )
    manifest = installed_manifest(python)
    if not manifest or manifest.get("recipe_key") != key:
        raise SystemExit("engine: after installing, the llama_cpp on the path is not the one just built")
    log(f"installed engine {key}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter (venv) to build and install for")
    parser.add_argument(
        "--windows",
        action="store_true",
        help="the engine for 64-bit Windows, cross-compiled with MinGW-w64: build it (or find it cached) and "
        "print its wheel's path last; with --check, exit 1 unless it is cached",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--install", action="store_true", help="install the engine into --python's environment")
    group.add_argument("--wheel-only", action="store_true", help="build (or find) the wheel and print its path")
    group.add_argument("--print-key", action="store_true", help="print the recipe key")
    group.add_argument("--print-cmake-args", action="store_true", help="print the CMake arguments")
    group.add_argument("--check", action="store_true", help="exit 1 unless the installed engine matches the recipe")
    group.add_argument("--explain-gpu", action="store_true", help="say which GPU backends this machine can build")
    args = parser.parse_args(argv)
    if args.windows:
        if args.install or args.explain_gpu:
            parser.error("--windows builds a wheel for the Windows bundle; it installs nothing here")
        use_windows_target()
        if args.check:
            wheel = cached_windows_wheel()
            log(f"Windows engine cached: {wheel}" if wheel else f"no Windows engine cached for recipe {recipe_key()}")
            return 0 if wheel else 1
        if not (args.print_key or args.print_cmake_args):
            args.wheel_only = True
    elif not (
        args.install or args.wheel_only or args.print_key or args.print_cmake_args or args.check or args.explain_gpu
    ):
        parser.error(
            "one of --install, --wheel-only, --print-key, --print-cmake-args, --check, --explain-gpu, --windows"
        )
    if args.explain_gpu:
        built, skipped = gpu_backends()
        print(f"GPU backends built here: {', '.join(built) or 'none'}")
        if "vulkan" in built:
            inputs = vulkan_inputs()[0]
            assert inputs is not None
            print(f"  vulkan: headers {inputs.headers_version} from {inputs.source}, {inputs.glslc_version}")
        for name, why in skipped.items():
            print(f"  {name}: {why}")
    elif args.print_key:
        print(recipe_key())
    elif args.print_cmake_args:
        print(" ".join(cmake_args()))
    elif args.wheel_only:
        print(ensure_wheel(args.python))
    elif args.check:
        manifest = installed_manifest(args.python)
        ok = manifest is not None and manifest.get("recipe_key") == recipe_key()
        log("installed engine matches the recipe" if ok else "installed engine does not match the recipe")
        return 0 if ok else 1
    else:
        install(args.python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
