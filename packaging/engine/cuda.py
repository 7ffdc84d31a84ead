#!/usr/bin/env python3
"""llama.cpp's CUDA backend as a module of its own, built from PyPI's CUDA wheels.

    python packaging/engine/cuda.py --build            # compile (about an hour on two cores), cache
    python packaging/engine/cuda.py --install          # build if needed, put it into --python's engine
    python packaging/engine/cuda.py --check            # exit 1 unless the cached module matches the sources
    python packaging/engine/cuda.py --print-key | --print-cmake-args

Why a module apart from the engine wheel (packaging/engine/build.py):
- No machine here, and few users' machines, have a CUDA toolkit with cuBLAS. NVIDIA publishes the
  whole CUDA 13.0 toolchain and its libraries on PyPI as wheels (nvcc, the runtime, CCCL, cuBLAS),
  so a private toolkit is assembled from them in the engine cache: pinned versions, nothing
  installed system-wide, the same on every machine.
- Compiling ggml-cuda for the cards people own takes about an hour on two cores; the Vulkan/CPU
  engine takes ten minutes. The engine is built with GGML_BACKEND_DL, so backends are modules
  loaded at run time: the CUDA one is compiled once from the same vendored llama.cpp, cached by
  its own key, and dropped beside the engine's libggml-base. `make run` and `make test` never wait
  for it; the CUDA installers and the device check use it.

The key covers everything that shapes the module: llama-cpp-python's version (hence the vendored
llama.cpp), the CUDA wheels' versions, the architectures and CMake arguments, the platform and
MODULE_REVISION. `--check` says whether the cached module carries the current key, so a module
built from older sources is never shipped silently.

Standard library only, like build.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build as engine  # the engine recipe beside this file (run as a script, not a package)

MANIFEST_NAME = "vrampilot-cuda.json"
MODULE_FILE = "libggml-cuda.so"
# Bump when the post-processing or the manifest changes.
MODULE_REVISION = 1

# CUDA 13.0, the nvcc on the machines here; every wheel of one release, so headers, compiler and
# libraries agree. A module built with 13.0 runs on any driver that supports CUDA 13.0 or later.
CUDA_VERSION = "13.0"
MIN_DRIVER = "580.65"  # CUDA 13.0's minimum Linux driver (NVIDIA's CUDA Toolkit release notes)
CUDA_WHEELS = {
    "nvidia-cuda-nvcc": "13.0.88",
    "nvidia-cuda-crt": "13.0.88",  # host_config.h and the other headers nvcc includes
    "nvidia-nvvm": "13.0.88",  # cicc and libdevice, nvcc's device compiler
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cuda-cccl": "13.0.85",  # CUB/Thrust, which ggml-cuda includes
    "nvidia-cublas": "13.0.2.14",
}
# The libraries the module needs at run time beside it (the driver's libcuda.so.1 comes with the
# driver). They and their licence are what the CUDA variant of the installers adds.
RUNTIME_LIBRARIES = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")

# Compiled code for the cards people own, PTX for the rest (each entry is one compile pass over
# ggml-cuda, about 20 minutes on two cores, so the list is as short as covers them):
#   75-real    Turing (RTX 20, GTX 16, T4): int8 tensor cores; the oldest CUDA 13 supports
#   80-virtual Ampere features as PTX: A100, and Hopper, Blackwell DC and anything newer by JIT
#   86-real    RTX 30 and A10/A40; RTX 40 (8.9) runs it too: no device code here needs Ada
#   120a-real  RTX 50 (Blackwell): FP4 tensor cores, which need the arch-specific "a" target
# llama.cpp's own default adds 89-real, 90-virtual and 121a-real (an ARM board): two more hours.
CUDA_ARCHITECTURES = "75-real;80-virtual;86-real;120a-real"
ARCH_ENV = "VRAMPILOT_CUDA_ARCHITECTURES"  # another list, e.g. one card's for a quick build

CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_BACKEND_DL=ON",  # a module, like the engine's own backends
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_CPU=OFF",  # the engine carries the CPU variants; only ggml-base and ggml-cuda are built
    "-DGGML_CUDA=ON",
    "-DGGML_CUDA_FA=ON",
    "-DGGML_CUDA_FA_ALL_QUANTS=OFF",  # llama.cpp's default: f16/q8_0/q4_0 caches, not every pair
    "-DGGML_CUDA_NO_VMM=OFF",  # the VMM pool: links libcuda (a stub here), as llama.cpp's builds do
    "-DGGML_RPC=OFF",
    *engine.GGML_ONLY_CMAKE_ARGS,
    "-DLLAMA_OPENSSL=OFF",
    # The module finds the CUDA libraries and libggml-base beside it, in llama_cpp/lib.
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
)


def architectures() -> str:
    return os.environ.get(ARCH_ENV, "").strip() or CUDA_ARCHITECTURES


def toolkit_dir() -> Path:
    """The private toolkit: the wheels unpacked as nvidia/cu13/{bin,include,lib,nvvm}."""
    pins = "-".join(f"{k}={v}" for k, v in sorted(CUDA_WHEELS.items()))
    return engine.cache_root() / "cuda-toolkit" / hashlib.sha256(pins.encode()).hexdigest()[:12]


def toolkit_root() -> Path:
    return toolkit_dir() / "nvidia" / "cu13"


def ensure_toolkit(python: str) -> Path:
    """The toolkit's root (what nvcc calls TOP), unpacked from the pinned wheels once."""
    dest = toolkit_dir()
    root = dest / "nvidia" / "cu13"
    if (dest / "toolkit.json").is_file():
        return root
    work = dest.with_name(dest.name + ".part")
    shutil.rmtree(work, ignore_errors=True)
    engine.log(
        f"assembling a CUDA {CUDA_VERSION} toolkit from PyPI wheels into {dest} (525 MB to download, 875 MB unpacked)"
    )
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--only-binary", ":all:", "--no-cache-dir"]
        + ["--target", str(work)]
        + [f"{name}=={version}" for name, version in sorted(CUDA_WHEELS.items())],
        check=True,
    )
    top = work / "nvidia" / "cu13"
    lib = top / "lib"
    # The wheels carry run-time names only (libcublas.so.13); the linker and CMake's FindCUDAToolkit
    # look for the development names, and nvcc.profile for lib64/.
    for path in lib.glob("lib*.so.*"):
        link = lib / path.name.split(".so.")[0]
        (link.with_name(link.name + ".so")).symlink_to(path.name)
    (top / "lib64").symlink_to("lib")
    write_driver_stub(top / "include" / "cuda.h", lib / "stubs")
    missing = [
        p
        for p in (top / "bin" / "nvcc", top / "nvvm" / "bin" / "cicc", top / "include" / "cublas_v2.h")
        if not p.exists()
    ]
    if missing:
        raise SystemExit(f"cuda: the wheels lack {', '.join(map(str, missing))}")
    (work / "toolkit.json").write_text(json.dumps(CUDA_WHEELS, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(work, dest)
    return root


def driver_api_symbols(cuda_h: Path) -> list[str]:
    """Every driver API function cuda.h declares, by the name a program links (cuMemMap, and
    cuCtxCreate_v4 where cuda.h maps cuCtxCreate to it): the header run through the preprocessor."""
    out = subprocess.run(
        ["cc", "-E", "-P", "-I", str(cuda_h.parent), "-x", "c", str(cuda_h)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(set(re.findall(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(", " ".join(out.split()))))


def write_driver_stub(cuda_h: Path, into: Path, *, driver_version: int | None = None) -> Path:
    """A libcuda.so (soname libcuda.so.1) that defines the driver API and does nothing: what the
    module is linked against, as NVIDIA's toolkit ships in lib64/stubs. At run time the driver's
    own libcuda.so.1 is loaded instead. With driver_version, cuDriverGetVersion reports it and
    cuInit fails as an old driver does (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH is not it: an old
    driver simply lacks the newer API): for tests of the old-driver path."""
    into.mkdir(parents=True, exist_ok=True)
    symbols = driver_api_symbols(cuda_h)
    lines = ["typedef int CUresult;"]
    for name in symbols:
        if driver_version is not None and name == "cuDriverGetVersion":
            lines.append(f"CUresult cuDriverGetVersion(int *v) {{ if (v) *v = {driver_version}; return 0; }}")
        else:
            lines.append(f"CUresult {name}(void) {{ return 3; }}")  # CUDA_ERROR_NOT_INITIALIZED
    source = into / "libcuda_stub.c"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = into / "libcuda.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O0", "-o", str(out), str(source), "-Wl,-soname,libcuda.so.1"], check=True
    )
    return out


def cmake_args(root: Path) -> list[str]:
    return [
        *CMAKE_ARGS,
        f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}",
        f"-DCUDAToolkit_ROOT={root}",
        f"-DCUDA_cuda_driver_LIBRARY={root / 'lib' / 'stubs' / 'libcuda.so'}",
        f"-DCMAKE_CUDA_ARCHITECTURES={architectures()}",
    ]


def recipe() -> dict[str, object]:
    """Everything that shapes the module; its hash is the key."""
    return {
        "llama_cpp_python": engine.pinned_llama_cpp_python(),
        "cuda_wheels": dict(sorted(CUDA_WHEELS.items())),
        "architectures": architectures(),
        "cmake_args": [a.replace(str(toolkit_root()), "<toolkit>") for a in cmake_args(toolkit_root())],
        "platform": engine.platform_tag(),
        "module_revision": MODULE_REVISION,
    }


def module_key() -> str:
    blob = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def module_dir() -> Path:
    return engine.cache_root() / f"cuda-{module_key()}"


def cached_module() -> Path | None:
    path = module_dir() / MODULE_FILE
    return path if path.is_file() and (module_dir() / MANIFEST_NAME).is_file() else None


def build(python: str) -> Path:
    """The module for the current key, from the cache or compiled now; its folder holds the
    module and its manifest."""
    found = cached_module()
    if found is not None:
        engine.log(f"using the cached CUDA module {found} (key {module_key()})")
        return found.parent
    if not sys.platform.startswith("linux"):
        raise SystemExit("cuda: the module is built from the Linux wheels; Windows builds are not done here")
    root = ensure_toolkit(python)
    sdist = engine.fetch_sdist(python, engine.pinned_llama_cpp_python(), engine.cache_root() / "sdist")
    key = module_key()
    # The build tree stays until the module is cached, so an interrupted build resumes where it
    # stopped (ninja/make rebuild only what is missing).
    work = engine.cache_root() / f"cuda-build-{key}"
    source = work / "src"
    if not (source / "CMakeLists.txt").is_file():
        _unpack_vendored(sdist, source)
    args = cmake_args(root)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    env = {**os.environ, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["cmake", "-S", str(source), "-B", str(work / "build"), *generator, *args], check=True, env=env)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    passes = len(architectures().split(";"))
    engine.log(
        f"compiling ggml-cuda for {architectures()} on {jobs} cores: about {passes * 45 // max(int(jobs), 1)} "
        "minutes the first time (measured: 91 for four architectures on 2 shared cores; each is a pass over 144 files)"
    )
    started = time.monotonic()
    proc = subprocess.Popen(["cmake", "--build", str(work / "build"), "--target", "ggml-cuda", "-j", jobs], env=env)
    while True:
        try:
            rc = proc.wait(timeout=300)
            break
        except subprocess.TimeoutExpired:
            engine.log(f"still compiling ggml-cuda, {(time.monotonic() - started) / 60:.0f} min so far")
    if rc != 0:
        raise SystemExit(f"cuda: the build failed (exit {rc}); its output is above. The build tree {work} is kept")
    seconds = time.monotonic() - started
    built = next((work / "build").rglob(MODULE_FILE), None)
    if built is None:
        raise SystemExit(f"cuda: no {MODULE_FILE} under {work / 'build'}")
    out = module_dir()
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copyfile(built, tmp / MODULE_FILE)
    manifest = {
        "module_key": key,
        "recipe": recipe(),
        "cuda_version": CUDA_VERSION,
        "min_driver": MIN_DRIVER,
        "architectures": architectures(),
        "runtime_libraries": list(RUNTIME_LIBRARIES),
        "build_seconds": round(seconds),
        "build_cores": int(jobs),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    shutil.rmtree(work, ignore_errors=True)
    engine.log(f"compiled ggml-cuda in {seconds / 60:.0f} min; cached {out / MODULE_FILE}")
    return out


def _unpack_vendored(sdist: Path, dest: Path) -> None:
    """The sdist's vendor/llama.cpp, unpacked as dest."""
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        members = []
        for member in tar.getmembers():
            parts = member.name.split("/", 3)  # llama_cpp_python-X/vendor/llama.cpp/<path>
            if len(parts) == 4 and parts[1:3] == ["vendor", "llama.cpp"]:
                member.name = parts[3]
                members.append(member)
        if not members:
            raise SystemExit(f"cuda: {sdist} has no vendor/llama.cpp")
        tar.extractall(tmp, members=members, filter="data")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def licence_files() -> dict[str, Path]:
    """NVIDIA's licence texts of the wheels whose libraries are shipped, by the name each is shipped as."""
    found = {}
    for dist in sorted(toolkit_dir().glob("nvidia_*.dist-info")):
        if dist.name.startswith(("nvidia_cuda_runtime", "nvidia_cublas")):
            for path in sorted(p for p in dist.rglob("*") if p.is_file() and "licen" in p.name.lower()):
                found[f"{dist.name.split('-')[0]}-{path.name}"] = path
    return found


def install(python: str) -> Path:
    """The module, the CUDA libraries and their licences into the engine's llama_cpp/lib."""
    folder = build(python)
    manifest = engine.installed_manifest(python)
    if manifest is None:
        raise SystemExit("cuda: no engine installed by the recipe: run packaging/engine/build.py --install first")
    version = str(dict(manifest.get("recipe", {})).get("llama_cpp_python"))  # type: ignore[call-overload]  # the manifest's JSON object
    if version != engine.pinned_llama_cpp_python():
        raise SystemExit(
            f"cuda: the installed engine is llama-cpp-python {version}; the module is for {engine.pinned_llama_cpp_python()}"
        )
    code = "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llama_cpp').origin).parent / 'lib')"
    lib = Path(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    copy_into(folder, lib)
    engine.log(f"installed the CUDA module ({module_key()}) into {lib}")
    return lib


def copy_into(folder: Path, lib: Path) -> None:
    """The module, its manifest, the run-time libraries and the licences into an engine's lib folder
    (the venv's llama_cpp/lib, or a bundle's)."""
    runtime = toolkit_root() / "lib"
    for name in RUNTIME_LIBRARIES:
        shutil.copyfile(runtime / name, lib / name)
    licences = lib / "cuda-licences"
    licences.mkdir(exist_ok=True)
    for name, path in licence_files().items():
        shutil.copyfile(path, licences / name)
    shutil.copyfile(folder / MODULE_FILE, lib / MODULE_FILE)
    shutil.copyfile(folder / MANIFEST_NAME, lib / MANIFEST_NAME)  # last: its presence says the set is whole


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter (venv) whose pip fetches the wheels")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--build", action="store_true", help="compile (or find) the module and print its folder")
    group.add_argument("--install", action="store_true", help="put the module into --python's engine")
    group.add_argument("--check", action="store_true", help="exit 1 unless a module for the current sources is cached")
    group.add_argument("--print-key", action="store_true")
    group.add_argument("--print-cmake-args", action="store_true")
    args = parser.parse_args(argv)
    if args.print_key:
        print(module_key())
    elif args.print_cmake_args:
        print(" ".join(cmake_args(toolkit_root())))
    elif args.check:
        found = cached_module()
        stale = sorted(
            p.name
            for p in engine.cache_root().glob("cuda-*")
            if p.is_dir() and p.name[5:] != module_key() and (p / MANIFEST_NAME).is_file()
        )
        if found is None:
            engine.log(
                f"no CUDA module for the current sources (key {module_key()})"
                + (f"; stale: {', '.join(stale)}" if stale else "")
            )
            return 1
        engine.log(f"the cached CUDA module matches the sources (key {module_key()})")
    elif args.build:
        print(build(args.python))
    else:
        install(args.python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
