"""Loading llama.cpp's backends the way this machine can run them, before llama.cpp loads any itself.

The engine is built with dynamic backends (packaging/engine/build.py): one CPU module per
instruction-set level (`libggml-cpu-haswell.so`, ...), plus RPC and whatever GPU backends the
build had. Nothing is loaded until someone asks; `llama_backend_init` would then call ggml's
`ggml_backend_load_all`, which scores the CPU modules by CPUID alone and loads the AMX or AVX-512
one on a VM whose OS never enabled them (SIGILL on the first prompt). So this module loads the
backends first, with `ggml_backend_load`: every non-CPU backend the build carries, and the CPU
variant with ggml's best score among those whose every instruction-set feature really executed
here (`cpu_probe`). llama.cpp sees backends registered and loads nothing more.

The build's manifest (`llama_cpp/lib/vrampilot-engine.json`) says which features each variant is
compiled for, read from the vendored CMake files when the wheel was built. A llama-cpp-python not
built by the recipe is used as it is, and `EngineBackends.mode` says so.

`VRAMPILOT_CPU_VARIANT=<name>` forces a variant (benchmarks compare them; it is not checked).

The CUDA backend is a module built apart from the wheel (packaging/engine/cuda.py) and dropped
beside it with its own manifest (`vrampilot-cuda.json`); it is loaded when that manifest says it
was built from the engine's llama.cpp. Without an NVIDIA driver it cannot load (libcuda.so.1 is
the driver's); with a driver too old for its CUDA version it loads with no devices. Either way the
engine goes on with Vulkan or the CPU and `EngineBackends.cuda` says why in one line.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from vrampilot.llamacpp.cpu_probe import CpuProbe, probe_cpu
from vrampilot.llamacpp.vulkan_probe import VulkanDevice, VulkanProbe, probe_vulkan, software_allowed, visible_devices

MANIFEST_NAME = "vrampilot-engine.json"
CUDA_MANIFEST_NAME = "vrampilot-cuda.json"  # packaging/engine/cuda.py writes it beside libggml-cuda
CPU_DIR = "cpu"
FORCE_ENV = "VRAMPILOT_CPU_VARIANT"

# ggml's own score per feature (ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp), so that on an honest
# CPU this picks exactly the variant ggml would. AMX_TILE has no weight there but is required.
_SCORE = {
    "FMA": 1,
    "F16C": 1 << 1,
    "SSE42": 1 << 2,
    "BMI2": 1 << 3,
    "AVX": 1 << 4,
    "AVX2": 1 << 5,
    "AVX_VNNI": 1 << 6,
    "AVX512": 1 << 7,
    "AVX512_VBMI": 1 << 8,
    "AVX512_BF16": 1 << 9,
    "AVX512_VNNI": 1 << 10,
    "AMX_INT8": 1 << 11,
    "AMX_TILE": 0,
}
# ggml_backend_load_all_from_path's order: other backends first, the CPU last.
_BACKEND_ORDER = (
    "blas",
    "zendnn",
    "cann",
    "cuda",
    "hip",
    "metal",
    "rpc",
    "sycl",
    "vulkan",
    "virtgpu",
    "opencl",
    "hexagon",
    "musa",
    "openvino",
)


@dataclass(frozen=True)
class SkippedVariant:
    name: str
    reason: str


@dataclass(frozen=True)
class VariantChoice:
    name: str
    features: tuple[str, ...]
    score: int
    skipped: tuple[SkippedVariant, ...]  # better-scored variants this machine cannot run, and why


@dataclass(frozen=True)
class EngineBackends:
    """What was loaded into llama.cpp, and why; `vrampilot doctor` prints it."""

    lib_dir: str
    mode: str  # "dispatched" | "forced" | "ggml-score" (no manifest) | "static" (CPU linked in) | "none"
    recipe_key: str | None
    cpu_variant: str | None
    cpu_features: tuple[str, ...]
    skipped: tuple[SkippedVariant, ...]
    registered: tuple[str, ...]  # ggml backend registry names after loading: CPU, RPC, Vulkan, CUDA, ...
    failed: tuple[tuple[str, str], ...]  # (module file, why it did not load)
    probe_method: str
    note: str
    vulkan: str | None = None  # the Vulkan line (vulkan_probe): what it found, or what is missing
    vulkan_devices: tuple[VulkanDevice, ...] = ()  # the devices the Vulkan module was loaded for
    cuda: str | None = None  # the CUDA line: its devices, or why it runs without (None: no module)

    def describe_cpu(self) -> str:
        """One line for a person: the variant and why."""
        if self.mode == "static":
            return "CPU code linked into libggml (not built by VRAM Pilot's recipe: no run-time choice)"
        if self.mode in ("none", "ggml-score"):
            return self.note
        if self.cpu_variant is None:
            return "no CPU backend loaded"
        text = f"{self.cpu_variant} variant ({describe_features(self.cpu_features)})"
        if self.mode == "forced":
            return text + f", forced by {FORCE_ENV}"
        if self.skipped:
            text += "; " + "; ".join(f"{s.name} skipped: {s.reason}" for s in self.skipped)
        return text


def describe_features(features: tuple[str, ...] | list[str]) -> str:
    names = {
        "AVX512": "AVX-512",
        "AVX512_VBMI": "VBMI",
        "AVX512_VNNI": "VNNI",
        "AVX512_BF16": "BF16",
        "AVX_VNNI": "AVX-VNNI",
        "AMX_TILE": "AMX",
        "AMX_INT8": "AMX-INT8",
        "SSE42": "SSE4.2",
    }
    if not features:
        return "baseline x86-64, SSE2"
    top = [f for f in features if f in ("AMX_TILE", "AVX512", "AVX2", "AVX", "SSE42")][-1:]
    rest = [f for f in features if f.startswith(("AVX512_", "AMX_INT8", "AVX_VNNI"))]
    shown = [names.get(f, f) for f in top] + [names.get(f, f) for f in rest if f not in top]
    return " + ".join(shown) if shown else ", ".join(names.get(f, f) for f in features)


def variant_score(features: list[str] | tuple[str, ...]) -> int:
    return 1 + sum(_SCORE.get(f, 0) for f in features)


def choose_variant(variants: dict[str, list[str]], probe: CpuProbe) -> VariantChoice | None:
    """The best-scored variant whose every feature executed; None when none can run (not x86)."""
    ranked = sorted(variants.items(), key=lambda kv: (-variant_score(kv[1]), kv[0]))
    skipped: list[SkippedVariant] = []
    for name, features in ranked:
        missing = [f for f in features if not probe.runs(f)]
        if not missing:
            # Only the variants ggml would have preferred are worth a line: those are the ones
            # CPUID alone would have picked, or that a newer CPU would run.
            worth = [s for s in skipped if _advertised_all(variants[s.name], probe)]
            return VariantChoice(name, tuple(features), variant_score(features), tuple(worth))
        first = missing[0]
        result = probe.result(first)
        reason = f"{first} {result.note}" if result is not None and result.note else f"{first} not available"
        skipped.append(SkippedVariant(name, reason))
    return None


def _advertised_all(features: list[str], probe: CpuProbe) -> bool:
    return all((r := probe.result(f)) is not None and r.advertised for f in features)


def read_manifest(lib_dir: Path, name: str = MANIFEST_NAME) -> dict[str, object] | None:
    try:
        value = json.loads((lib_dir / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def module_file(lib_dir: Path, backend: str) -> Path:
    """Where the build keeps a backend module: CPU variants in lib/cpu/ (so that a tool started from
    lib/ finds none of them by itself: see vrampilot.server.binaries), the rest in lib/."""
    name = f"ggml-{backend}.dll" if sys.platform == "win32" else f"libggml-{backend}.so"
    if backend.startswith("cpu-") and (lib_dir / CPU_DIR).is_dir():
        return lib_dir / CPU_DIR / name
    return lib_dir / name


class WindowsGgml:
    """ggml's functions from ggml.dll and ggml-base.dll as one library. Windows' GetProcAddress
    looks in the one DLL it is given, and ggml.dll (the backend registry) does not re-export
    ggml-base.dll's functions (`ggml_backend_reg_name`, `ggml_backend_dev_get_props`, every tensor
    operation), which Linux's dlsym finds through libllama's dependencies."""

    def __init__(self, *libraries: ctypes.CDLL) -> None:
        self._libraries = libraries

    def __getattr__(self, name: str) -> Any:
        for lib in self._libraries:
            fn = getattr(lib, name, None)
            if fn is not None:
                setattr(self, name, fn)  # kept, so its restype and argtypes stay set
                return fn
        raise AttributeError(f"function {name!r} not found in {', '.join(lib._name for lib in self._libraries)}")


# The handle ggml's functions are read through: libllama's or libggml's on Linux, both DLLs on Windows.
GgmlLibrary = ctypes.CDLL | WindowsGgml


class _Ggml:
    """The few ggml registry functions needed here, from the very libggml llama.cpp uses.

    The wheel holds libggml.so and libggml.so.0 as two copies of one file; opening the first by
    path would load a second libggml with a registry of its own that libllama never looks at.
    So on Linux the symbols come through libllama's own handle (dlsym searches its dependencies,
    hence the libggml it was linked against); Windows has one ggml.dll and one ggml-base.dll,
    found by name.
    """

    def __init__(self, lib_dir: Path, libllama: ctypes.CDLL | None) -> None:
        lib: GgmlLibrary
        if sys.platform == "win32":
            lib = WindowsGgml(ctypes.CDLL(str(lib_dir / "ggml.dll")), ctypes.CDLL(str(lib_dir / "ggml-base.dll")))
        elif libllama is None:
            lib = ctypes.CDLL(str(lib_dir / "libggml.so.0"))
        else:
            lib = libllama
        lib.ggml_backend_load.restype = ctypes.c_void_p
        lib.ggml_backend_load.argtypes = (ctypes.c_char_p,)
        lib.ggml_backend_load_all_from_path.restype = None
        lib.ggml_backend_load_all_from_path.argtypes = (ctypes.c_char_p,)
        lib.ggml_backend_reg_count.restype = ctypes.c_size_t
        lib.ggml_backend_reg_get.restype = ctypes.c_void_p
        lib.ggml_backend_reg_get.argtypes = (ctypes.c_size_t,)
        lib.ggml_backend_reg_name.restype = ctypes.c_char_p
        lib.ggml_backend_reg_name.argtypes = (ctypes.c_void_p,)
        lib.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_reg_dev_count.argtypes = (ctypes.c_void_p,)
        self.lib = lib

    def device_count(self, reg_name: str) -> int:
        """How many devices the registered backend `reg_name` offers (0 when it is not registered)."""
        for i in range(int(self.lib.ggml_backend_reg_count())):
            reg = self.lib.ggml_backend_reg_get(i)
            raw = self.lib.ggml_backend_reg_name(reg)
            if raw and raw.decode("utf-8", "replace") == reg_name:
                return int(self.lib.ggml_backend_reg_dev_count(reg))
        return 0

    def registered(self) -> tuple[str, ...]:
        names = []
        for i in range(int(self.lib.ggml_backend_reg_count())):
            raw = self.lib.ggml_backend_reg_name(self.lib.ggml_backend_reg_get(i))
            names.append(raw.decode("utf-8", "replace") if raw else "?")
        return tuple(names)

    def load(self, path: Path) -> str | None:
        """Load one backend module; None on success, else why not (the loader's own message)."""
        try:
            ctypes.CDLL(str(path))  # first through ctypes: its OSError names a missing dependency
        except OSError as exc:
            # In the PyInstaller bundle ctypes.CDLL raises its own "was not found when the
            # application was frozen" and keeps the loader's message (the missing library) as the cause.
            return str(exc.__cause__ if isinstance(exc.__cause__, OSError) else exc)
        if not self.lib.ggml_backend_load(os.fsencode(path)):
            return "ggml_backend_load refused it (no ggml backend entry point, or its init failed)"
        return None


def _llama_cpp_python(manifest: dict[str, object]) -> str:
    recipe = manifest.get("recipe")
    return str(recipe.get("llama_cpp_python")) if isinstance(recipe, dict) else "unknown"


def describe_cuda(module: dict[str, object], load_error: str | None, devices: int) -> str:
    """One line on the CUDA module: how many devices it drives, or why none (no driver, a driver
    too old for the module's CUDA version, or no GPU that answers)."""
    needs = f"CUDA {module.get('cuda_version', '?')}"
    driver_floor = f"driver {module.get('min_driver', '?')} or newer"
    if load_error is not None:
        if "libcuda.so" in load_error or "nvcuda" in load_error:
            return f"CUDA backend present, no NVIDIA driver (libcuda.so.1 not found): running without it ({needs} needs {driver_floor})"
        return f"CUDA backend present but not loadable: {load_error}"
    if devices > 0:
        return (
            f"CUDA backend ({needs}, {module.get('architectures', '?')}): {devices} device{'s' if devices != 1 else ''}"
        )
    supported = cuda_driver_version()
    if supported is None:
        return f"CUDA backend present, no CUDA device answered and the NVIDIA driver gave no version ({needs} needs {driver_floor})"
    have = f"{supported // 1000}.{supported % 1000 // 10}"
    if supported < _cuda_version_number(str(module.get("cuda_version", "0"))):
        return (
            f"CUDA backend present, NVIDIA driver too old: it supports CUDA {have}, this build needs {needs} "
            f"({driver_floor}); running without CUDA"
        )
    return f"CUDA backend present, the NVIDIA driver (CUDA {have}) reports no usable GPU"


def _cuda_version_number(text: str) -> int:
    major, _, minor = text.partition(".")
    try:
        return int(major) * 1000 + int(minor or 0) * 10
    except ValueError:
        return 0


def cuda_driver_version() -> int | None:
    """The CUDA version the loaded NVIDIA driver supports (13000 for 13.0), from the driver's own
    cuDriverGetVersion; None without a driver."""
    try:
        driver = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if driver.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
        return None
    return version.value


_lock = threading.Lock()
_loaded: EngineBackends | None = None
_ggml: _Ggml | None = None


def loaded_backends() -> EngineBackends | None:
    """What `load_backends` did in this process, or None before it ran."""
    return _loaded


def ggml_library() -> GgmlLibrary | None:
    """The libggml handle the backends were registered through (vrampilot.llamacpp.devices reads
    the device registry with it), or None before `load_backends` ran."""
    return _ggml.lib if _ggml is not None else None


def lib_dir_of(llama_cpp: ModuleType) -> Path:
    base = getattr(getattr(llama_cpp, "llama_cpp", None), "_base_path", None)
    return Path(base) if base is not None else Path(str(llama_cpp.__file__)).parent / "lib"


def load_backends(llama_cpp: ModuleType, probe_cache: Path | None) -> EngineBackends:
    """Register llama.cpp's backends once per process (idempotent, thread-safe)."""
    global _loaded
    with _lock:
        if _loaded is None:
            libllama = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
            _loaded = _load(lib_dir_of(llama_cpp), libllama, probe_cache)
        return _loaded


def _load(lib_dir: Path, libllama: ctypes.CDLL | None, probe_cache: Path | None) -> EngineBackends:
    global _ggml
    ggml = _ggml = _Ggml(lib_dir, libllama)
    manifest = read_manifest(lib_dir)
    loading = _Loading(lib_dir, ggml, str(manifest["recipe_key"]) if manifest and "recipe_key" in manifest else None)
    if ggml.registered():  # a static build (CPU linked in), or someone loaded backends before us
        return loading.done("static")
    pattern = "ggml-cpu-*.dll" if sys.platform == "win32" else "libggml-cpu-*.so"
    cpu_modules = sorted([*lib_dir.glob(pattern), *(lib_dir / CPU_DIR).glob(pattern)])
    if not cpu_modules and not module_file(lib_dir, "cpu").exists():
        return loading.done("none", note=f"no CPU backend module in {lib_dir}")
    if manifest is None:
        return loading.ggml_choice("this build has no VRAM Pilot manifest")

    files = {Path(str(f)).name for f in manifest.get("backend_files", [])}  # type: ignore[attr-defined]  # the manifest's JSON list
    for backend in _BACKEND_ORDER:
        path = module_file(lib_dir, backend)
        if backend == "cuda" and path.name not in files:
            loading.cuda_module(path, manifest)
        elif path.name in files and path.exists() and (backend != "vulkan" or loading.vulkan_usable()):
            loading.load(path)

    table = manifest.get("cpu_variants", {})
    variants = {
        str(name): [str(f) for f in feats]
        for name, feats in (table.items() if isinstance(table, dict) else ())
        if module_file(lib_dir, f"cpu-{name}").exists()
    }
    forced = os.environ.get(FORCE_ENV, "").strip()
    if forced:
        if forced not in variants:
            raise RuntimeError(
                f"{FORCE_ENV}={forced}: no such CPU variant (this build has {', '.join(sorted(variants))})"
            )
        return loading.cpu(
            "forced", VariantChoice(forced, tuple(variants[forced]), variant_score(variants[forced]), ())
        )
    probe = probe_cpu(probe_cache)
    loading.probe_method = probe.method
    if probe.method != "executed":
        # Nothing could be executed to check (not x86, or no executable memory). On x86 only the
        # baseline is certain; elsewhere ggml's own choice (OS-aware on ARM) is as good as any.
        if "x64" in variants:
            return loading.cpu("dispatched", VariantChoice("x64", tuple(variants["x64"]), 1, ()))
        return loading.ggml_choice(probe.method)
    choice = choose_variant(variants, probe)
    if choice is None:
        return loading.done("none", note="no CPU variant of this build runs on this CPU")
    return loading.cpu("dispatched", choice)


class _Loading:
    """The record of one `_load`, filled in as backends are loaded."""

    def __init__(self, lib_dir: Path, ggml: _Ggml, recipe_key: str | None) -> None:
        self.lib_dir, self.ggml, self.recipe_key = lib_dir, ggml, recipe_key
        self.failed: list[tuple[str, str]] = []
        self.probe_method = "not used"
        self.vulkan: str | None = None
        self.vulkan_devices: tuple[VulkanDevice, ...] = ()
        self.cuda: str | None = None

    def vulkan_usable(self) -> bool:
        """Whether to load the Vulkan module: only where a loader, a driver and a device that is
        a GPU (or a software one, with VRAMPILOT_SOFTWARE_GPU=1) exist; asked in a child first."""
        probe: VulkanProbe = probe_vulkan()
        allowed = software_allowed()
        self.vulkan = probe.describe(allowed)
        visible = visible_devices(probe)
        if visible is not None:
            # llama.cpp skips CPU-type devices unless named; the user's own choice stands.
            os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", visible)
        self.vulkan_devices = probe.usable(allowed)
        return bool(self.vulkan_devices)

    def load(self, path: Path) -> bool:
        why = self.ggml.load(path)
        if why:
            self.failed.append((path.name, why))
        return why is None

    def cuda_module(self, path: Path, engine_manifest: dict[str, object]) -> None:
        """The CUDA module built apart (packaging/engine/cuda.py), when it is there and was built
        from this engine's llama.cpp; `self.cuda` says what came of it."""
        if not path.exists():
            return
        module = read_manifest(self.lib_dir, CUDA_MANIFEST_NAME)
        if module is None:
            self.cuda = f"{path.name} has no {CUDA_MANIFEST_NAME} beside it: not loaded (reinstall the CUDA variant)"
            return
        built_for = _llama_cpp_python(module)
        engine_version = _llama_cpp_python(engine_manifest)
        if built_for != engine_version:
            self.cuda = (
                f"the CUDA module was built for llama-cpp-python {built_for}, this engine is {engine_version}: "
                "not loaded (rebuild it: make cuda)"
            )
            return
        # Not added to `failed` when it does not load: the CUDA line says why, in a person's words.
        self.cuda = describe_cuda(module, self.ggml.load(path), self.ggml.device_count("CUDA"))

    def cpu(self, mode: str, choice: VariantChoice) -> EngineBackends:
        if not self.load(module_file(self.lib_dir, f"cpu-{choice.name}")):
            return self.done("none", note=f"the {choice.name} CPU module did not load: {self.failed[-1][1]}")
        return self.done(mode, choice)

    def ggml_choice(self, why: str) -> EngineBackends:
        self.ggml.lib.ggml_backend_load_all_from_path(os.fsencode(self.lib_dir))
        return self.done("ggml-score", note=f"llama.cpp chose the CPU module by CPUID alone ({why})")

    def done(self, mode: str, choice: VariantChoice | None = None, note: str = "") -> EngineBackends:
        return EngineBackends(
            lib_dir=str(self.lib_dir),
            mode=mode,
            recipe_key=self.recipe_key,
            cpu_variant=choice.name if choice else None,
            cpu_features=choice.features if choice else (),
            skipped=choice.skipped if choice else (),
            registered=self.ggml.registered(),
            failed=tuple(self.failed),
            probe_method=self.probe_method,
            note=note,
            vulkan=self.vulkan,
            vulkan_devices=self.vulkan_devices,
            cuda=self.cuda,
        )
