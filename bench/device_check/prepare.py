"""Prepare the GPU device check (bench/device_check.sh) on this machine, which reaches the registry.

A GPU machine lent for the check reaches no registry and receives at most 64 MiB, so everything it
needs is made here, into bench/out/device/ (carried with `run --carry bench/out/device`):

- llama.cpp.tgz: the vendored llama.cpp of the pinned llama-cpp-python, trimmed to what the CUDA
  build needs (about 9 MB; the sdist is 76 MB);
- models/: small real GGUF files of several architectures (testkit), and the embedded
  SmolLM2 when the budget allows;
- expected.json: the planner's per-device prediction (weights, KV, compute on the device and the
  host) for each configuration the check runs: -ngl, context, ubatch, cache types. Computed for one
  device whose budget is not the question: the check holds the bytes, not the fit. `cases` for
  CUDA0, `vulkan_cases` for Vulkan0 (the same GPU through the Vulkan backend); `backoff_cases`:
  the planner's own choice for a device with room for the upper half of the layers (the layers or
  experts it moves off, the ubatch it takes), which the check holds against the real buffers;
- vulkan.tar.xz: the Vulkan build as users get it, taken from this machine's engine (llama-server,
  llama-bench, libllama, libggml with its Vulkan and RPC modules, the haswell CPU variant) and
  Debian's Vulkan loader: the device machine runs it with the NVIDIA driver's Vulkan ICD, and
  nothing is compiled there for it;
- cuda.tar.xz: the CUDA module built here from PyPI's wheels (packaging/engine/cuda.py) for the
  lent GPU's architecture only (--cuda-arch, default 90: H100/H200), with NVIDIA's cudart: run with
  the same tools as the Vulkan build and the device machine's own cuBLAS 13 (NVIDIA's cuBLAS is 595
  MB, over what can be carried). The installers' module (four architectures, 98 MiB, 71 MiB in xz)
  does not fit the 64 MiB either; one architecture's is built once here with
  `VRAMPILOT_CUDA_ARCHITECTURES=90-real python packaging/engine/cuda.py --build`. Where the device
  has no cuBLAS 13, another architecture, or no module was carried, the check compiles CUDA there
  from llama.cpp.tgz as before.

    python bench/device_check/prepare.py [--with-embedded]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from testkit.gguf_models import write_model  # noqa: E402
from vrampilot.export import llama_server_argv  # noqa: E402
from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.hardware import Machine  # noqa: E402
from vrampilot.paths import embedded_model_path  # noqa: E402
from vrampilot.planner.memory.breakdown import memory_breakdown  # noqa: E402
from vrampilot.planner.settings import Settings  # noqa: E402
from vrampilot.planner.target import GpuTarget, Target, TargetRequest, resolve_target  # noqa: E402
from vrampilot.units import GIB  # noqa: E402

OUT = ROOT / "bench" / "out" / "device"
# Not needed to build ggml-cuda, llama-server and llama-bench (nor by CMake with tests, examples
# and the other backends off).
DROP = (
    "docs/",
    "media/",
    "models/",
    "examples/",
    "tests/",
    "gguf-py/",
    "scripts/",
    "ci/",
    "benches/",
    "pocs/",
    "ggml/src/ggml-sycl/",
    "ggml/src/ggml-opencl/",
    "ggml/src/ggml-hexagon/",
    "ggml/src/ggml-metal/",
    "ggml/src/ggml-et/",
    "ggml/src/ggml-vulkan/",
    "ggml/src/ggml-cann/",
    "ggml/src/ggml-musa/",
    "tools/ui/node_modules/",
    "tools/ui/tests/",
    "tools/mtmd/test-",
)
GRID = [
    dict(n_gpu_layers=ngl, n_ctx=ctx, n_ubatch=ub, type_k=kv, type_v=kv, flash_attn=True)
    for ngl, ctx, ub, kv in itertools.product(("all", "half"), (4096, 16384), (512, 2048), ("f16", "q8_0"))
]


def trimmed_source(sdist: Path, into: Path) -> int:
    with tarfile.open(sdist) as src, tarfile.open(into, "w:gz") as dst:
        for m in src.getmembers():
            _, _, rest = m.name.partition("/")
            if not rest.startswith("vendor/llama.cpp/"):
                continue  # the sdist's own files, and its .git (a 38 MB pack)
            rel = rest.removeprefix("vendor/llama.cpp/")
            if not rel or any(rel.startswith(d) for d in DROP):
                continue
            data = src.extractfile(m) if m.isfile() else None
            m.name = "llama.cpp/" + rel
            dst.addfile(m, io.BytesIO(data.read()) if data else None)
    return into.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-embedded", action="store_true", help="also carry the 94 MB embedded model (over 64 MiB)")
    ap.add_argument("--cuda-arch", default="90", help="the lent GPU's CUDA architecture (90: H100, H200)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "packaging" / "engine"))
    import build as recipe

    (OUT / "models").mkdir(parents=True, exist_ok=True)
    sdist = recipe.fetch_sdist(sys.executable, recipe.pinned_llama_cpp_python(), recipe.cache_root() / "sdist")
    size = trimmed_source(sdist, OUT / "llama.cpp.tgz")
    models = {
        "llama-q8": write_model(
            OUT / "models" / "llama-q8.gguf",
            "llama",
            weight_type="q8_0",
            n_layer=4,
            n_embd=256,  # the tokenizer's 49,152-row embedding dominates: 14 MB here, 38 at 512 wide
            n_head=4,
            n_head_kv=2,
            n_ff=512,
            tokenizer="smollm2",
        ),  # serves: the speed check
        "qwen2": write_model(OUT / "models" / "qwen2.gguf", "qwen2", n_layer=6),
        "gemma3": write_model(OUT / "models" / "gemma3.gguf", "gemma3", n_layer=6),
        "qwen3moe": write_model(OUT / "models" / "qwen3moe.gguf", "qwen3moe"),
    }
    emb = embedded_model_path()
    if args.with_embedded and emb is not None:
        models["smollm2"] = emb
    cases, vulkan_cases = _cases(models, "CUDA0"), _cases(models, "Vulkan0")
    backoff = _backoff_cases(models, "CUDA0")
    vulkan = vulkan_payload(OUT / "vulkan.tar.xz")
    cuda = cuda_payload(OUT / "cuda.tar.xz", args.cuda_arch)
    full = Settings(n_ctx=4096, n_gpu_layers=99, n_threads=8, n_threads_batch=16)
    speed_args = llama_server_argv("MODEL", full)[3:]
    (OUT / "expected.json").write_text(
        json.dumps(
            {"cases": cases, "vulkan_cases": vulkan_cases, "backoff_cases": backoff, "speed_args": speed_args}, indent=1
        )
    )
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(
        f"prepared {OUT}: source {size / 2**20:.1f} MiB, Vulkan build {vulkan / 2**20:.1f} MiB, "
        f"CUDA module {cuda / 2**20:.1f} MiB, {len(models)} models, "
        f"{len(cases)} cases per backend, {total / 2**20:.1f} MiB in all (limit 64 MiB)"
    )
    return 0 if total < 64 * 2**20 else 1


# What the Vulkan check runs, from the engine's lib folder (vrampilot/server/binaries.py): the tools,
# the libraries they link, the backend modules, and one CPU variant every x86-64 GPU host runs.
VULKAN_FILES = (
    "llama-server",
    "llama-bench",
    "libllama*.so*",
    "libggml.so*",
    "libggml-base.so*",
    "libggml-vulkan.so",
    "libggml-rpc.so",
    "libmtmd.so*",
    "cpu/libggml-cpu-haswell.so",
)
# Debian's Vulkan loader (libvulkan1), which the bundle never ships: the GPU machine may have none.
SYSTEM_LOADER = Path("/usr/lib/x86_64-linux-gnu/libvulkan.so.1")


def vulkan_payload(into: Path) -> int:
    """The engine's Vulkan build, as vulkan/ in a tar.xz; its size. Fails where this engine has no
    Vulkan module (VRAMPILOT_ENGINE_GPU=none) or no loader is installed here."""
    import tarfile as tf

    from vrampilot.server.binaries import lib_dir

    lib = lib_dir()
    files = sorted({f for pattern in VULKAN_FILES for f in lib.glob(pattern)})
    if not (lib / "libggml-vulkan.so").is_file() or not SYSTEM_LOADER.exists():
        raise SystemExit(f"prepare: no Vulkan build in {lib} or no {SYSTEM_LOADER} (apt-get install libvulkan1)")
    with tf.open(into, "w:xz") as dst:
        for f in files:
            dst.add(f, arcname=f"vulkan/{f.relative_to(lib)}")
        dst.add(SYSTEM_LOADER.resolve(), arcname="vulkan/libvulkan.so.1")
    return into.stat().st_size


def cuda_payload(into: Path, arch: str) -> int:
    """The CUDA module for `arch` alone (cached by packaging/engine/cuda.py) and cudart as cuda/ in
    a tar.xz; its size (0, and no file, when none is cached: the device machine then compiles CUDA)."""
    import os
    import tarfile as tf

    sys.path.insert(0, str(ROOT / "packaging" / "engine"))
    import cuda as cuda_recipe

    into.unlink(missing_ok=True)
    asked = os.environ.get(cuda_recipe.ARCH_ENV)
    os.environ[cuda_recipe.ARCH_ENV] = f"{arch}-real"
    try:
        module, key = cuda_recipe.cached_module(), cuda_recipe.module_key()
    finally:
        if asked is None:
            del os.environ[cuda_recipe.ARCH_ENV]
        else:
            os.environ[cuda_recipe.ARCH_ENV] = asked
    if module is None:
        print(
            f"prepare: no CUDA module for sm_{arch} cached (key {key}): build it with "
            f"`{cuda_recipe.ARCH_ENV}={arch}-real python packaging/engine/cuda.py --build` (about 25 minutes on "
            "2 cores); without it the device compiles CUDA"
        )
        return 0
    with tf.open(into, "w:xz") as dst:
        dst.add(module, arcname=f"cuda/{cuda_recipe.MODULE_FILE}")
        dst.add(module.parent / cuda_recipe.MANIFEST_NAME, arcname=f"cuda/{cuda_recipe.MANIFEST_NAME}")
        dst.add(cuda_recipe.toolkit_root() / "lib" / "libcudart.so.13", arcname="cuda/libcudart.so.13")
    return into.stat().st_size


def _cases(models: dict[str, Path], device: str) -> list[dict[str, object]]:
    """The grid's cases for one GPU named `device` by llama.cpp (CUDA0, Vulkan0)."""
    cases = []
    for name, path in models.items():
        spec = load_model_spec(path)
        target = _target(_gpu(device))
        for g in GRID:
            ngl = spec.n_layer + 1 if g["n_gpu_layers"] == "all" else (spec.n_layer + 1) // 2
            s = Settings(**{**g, "n_gpu_layers": ngl, "n_threads": 8, "n_threads_batch": 16})  # type: ignore[arg-type]  # a dict of Settings fields
            mem = memory_breakdown(spec, s, target)
            dev = mem.per_device[0]
            cases.append(
                {
                    "model": f"models/{path.name}" if path.parent == OUT / "models" else str(path),
                    "name": name,
                    "settings": s.to_dict(),
                    "layers_on_device": len(mem.device_layers(0)),
                    # The flags from the one builder (vrampilot.export), after `llama-server -m MODEL`.
                    "args": llama_server_argv("MODEL", s)[3:],
                    "serves": name in ("llama-q8", "smollm2"),  # has a tokenizer: llama-server can generate with it
                    "expected": {
                        "weights": dev.weights_bytes,
                        "kv": dev.kv_bytes,
                        "compute": dev.compute_bytes,
                        "host_compute": mem.host.compute_bytes,
                        "host_kv": mem.host.kv_bytes,
                    },
                }
            )
    return cases


def _gpu(device: str, budget_bytes: int = 80 * GIB) -> GpuTarget:
    return GpuTarget(
        name=device,
        memory_total_bytes=80 * GIB,
        memory_budget_bytes=budget_bytes,
        bandwidth_gbps=4800.0,
        fp16_tflops=900.0,
        llama_name=device,
        buffer_name=device,
    )


def _backoff_cases(models: dict[str, Path], device: str) -> list[dict[str, object]]:
    """The plan for a device with room for the upper half of the layers at 4K: what the planner
    moves off the device (layers, experts, a smaller ubatch) and the budget the real buffers must
    stay in."""
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan

    cases: list[dict[str, object]] = []
    for name in ("llama-q8", "qwen3moe"):
        spec = load_model_spec(models[name])
        # Room for the upper half of the layers (llama.cpp offloads from the output down) at the
        # full-offload settings: the planner must choose what goes (layers, experts, a smaller ubatch).
        half = Settings(n_ctx=4096, n_gpu_layers=(spec.n_layer + 1) // 2 + 1, flash_attn=True)
        room = memory_breakdown(spec, half, _target(_gpu(device))).per_device[0]
        usable = room.weights_bytes + room.kv_bytes + room.compute_bytes
        target = _target(_gpu(device, room.margin_bytes + usable))  # the planner keeps its margin free
        p = plan(spec, target, Pins(n_ctx=4096), alternatives=False)
        dev = p.memory.per_device[0]
        cases.append(
            {
                "model": f"models/{models[name].name}",
                "name": name,
                "settings": p.settings.to_dict(),
                "args": llama_server_argv("MODEL", p.settings)[3:],
                "budget_bytes": usable,  # what the real buffers must stay within
                "fits": p.fits,
                "expected": {
                    "weights": dev.weights_bytes,
                    "kv": dev.kv_bytes,
                    "compute": dev.compute_bytes,
                    "host_compute": p.memory.host.compute_bytes,
                    "host_kv": p.memory.host.kv_bytes,
                },
            }
        )
    return cases


def _target(gpu: GpuTarget) -> Target:
    return replace(resolve_target(TargetRequest(cpu_only=True), _machine()), gpus=(gpu,))


def _machine() -> Machine:
    from testkit.machines import cpu_machine

    return cpu_machine(ram_gib=256, cores=16)


if __name__ == "__main__":
    raise SystemExit(main())
