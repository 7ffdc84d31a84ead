#!/usr/bin/env bash
# The GPU device check, as one call on a lent GPU machine (15 minutes of device time in all, no
# registry there). Two backends on the same GPU:
# 1. Vulkan, as users get it: the engine built here (prepare.py packs its llama-server, llama-bench
#    and Vulkan module with Debian's Vulkan loader), run with the NVIDIA driver's Vulkan ICD. First,
#    since nothing is compiled for it: its results stand even if the CUDA build runs out of time.
# 2. CUDA: llama.cpp's CUDA module built here from PyPI's CUDA wheels for the lent GPU's
#    architecture (packaging/engine/cuda.py with VRAMPILOT_CUDA_ARCHITECTURES=90-real; the
#    installers' four-architecture module does not fit the 64 MiB payload), carried as cuda.tar.xz
#    with its cudart, beside the same tools as the Vulkan build, with the device machine's cuBLAS 13
#    (NVIDIA's cuBLAS is too large to carry). Nothing is compiled there. Only where no module for
#    the GPU's compute capability was carried, or the machine has no cuBLAS 13, is CUDA built there
#    from the trimmed vendored sources, for CUDA_ARCH only.
# For each: the planner's per-device bytes against llama.cpp's real allocations, decode through
# the API against llama-bench, and NVML for the process.
#
#   here:    python bench/device_check/prepare.py            # bench/out/device (under 64 MiB)
#   there:   run(command="bash bench/device_check.sh", carry=["bench/out/device"], timeout_s=540)
#
# CUDA_ARCH (default 90, an H200/H100) builds for that GPU only, with every core: a full list
# would not finish in the time a device is lent. Results: $OUT/results.json ($OUT/vulkan/ for
# Vulkan) and the logs. SKIP_CUDA=1 runs the Vulkan part only.
#
# The Vulkan part can be tried here on lavapipe (no nvidia-smi: run check.py as this script does,
# with VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json GGML_VK_VISIBLE_DEVICES=0):
# on 2026-12-05 the first 3 cases gave weights and KV exact, device compute +12% (the formula).
# On 2026-12-06 (`check.py --device Vulkan0 --max-cases 1`): the back-off cases held 23.4 of a 26.7
# MiB budget (llama-q8, planned 23.8: all 5 layers at ubatch 256) and 7.2 of 9.5 (qwen3moe, planned
# 7.8); decode served/llama-bench 1.005, prefill 512 0.937. The payload with the sm_90 CUDA module:
# 55.1 MiB of 64.
set -euo pipefail
cd "$(dirname "$0")/.."
PAYLOAD=bench/out/device
OUT="${OUT:-bench/out/device-results}"
ARCH="${CUDA_ARCH:-90}"
WORK="${TMPDIR:-/tmp}/vrampilot-device"
mkdir -p "$OUT" "$WORK"
test -f "$PAYLOAD/llama.cpp.tgz" || { echo "device_check: run bench/device_check/prepare.py first" >&2; exit 2; }
nvidia-smi -L | tee "$OUT/gpus.txt" || { echo "device_check: no NVIDIA GPU here" >&2; exit 2; }
t0=$(date +%s)

# --- 1. Vulkan: the prebuilt engine, the driver's ICD --------------------------------------------
if [ -f "$PAYLOAD/vulkan.tar.xz" ]; then
    tar xJf "$PAYLOAD/vulkan.tar.xz" -C "$WORK"
    icd=$(ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1 || true)
    if [ -z "$icd" ] && ldconfig -p | grep -q libGLX_nvidia.so.0; then
        # The driver's Vulkan ICD is its GLX library; a container may carry the library without
        # the manifest that names it.
        icd="$WORK/nvidia_icd.json"
        printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3"}}\n' >"$icd"
    fi
    if [ -n "$icd" ]; then
        echo "device_check: Vulkan with $icd"
        mkdir -p "$OUT/vulkan"
        LD_LIBRARY_PATH="$WORK/vulkan" VK_ICD_FILENAMES="$icd" GGML_BACKEND_PATH="$WORK/vulkan/cpu/libggml-cpu-haswell.so" \
            python3 bench/device_check/check.py --bin "$WORK/vulkan" --payload "$PAYLOAD" --cases vulkan_cases \
            --device Vulkan0 --out "$OUT/vulkan" 2>&1 | tee "$OUT/vulkan/check.log" || echo "device_check: Vulkan check failed"
    else
        echo "device_check: no NVIDIA Vulkan ICD here (no nvidia_icd.json, no libGLX_nvidia.so.0): Vulkan not measured" \
            | tee "$OUT/vulkan-missing.txt"
    fi
    echo "device_check: Vulkan done at $(( $(date +%s) - t0 )) s"
fi
[ "${SKIP_CUDA:-0}" = 1 ] && exit 0

# --- 2. CUDA: the module built from the wheels, or compiled here ---------------------------------
find_cublas13() { # the folder of a libcublas.so.13 on this machine: the toolkit's, the linker's, a pip wheel's
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib \
        $(ldconfig -p 2>/dev/null | sed -n 's/.*libcublas\.so\.13 .*=> \(.*\)\/libcublas\.so\.13$/\1/p') \
        $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | tr ' ' '\n' | sed 's#$#/nvidia/cu13/lib#'); do
        if [ -e "$d/libcublas.so.13" ] && [ -e "$d/libcublasLt.so.13" ]; then echo "$d"; return 0; fi
    done
    return 1
}
# The GPU's compute capability (9.0 -> 90) must be one the carried module has code for.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
carried=""
if [ -f "$PAYLOAD/cuda.tar.xz" ]; then
    tar xJf "$PAYLOAD/cuda.tar.xz" -C "$WORK"
    carried=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["architectures"])' "$WORK/cuda/vrampilot-cuda.json")
fi
if [ -n "$carried" ] && [[ ";$carried;" == *";${cc}-real;"* ]] && [ -f "$PAYLOAD/vulkan.tar.xz" ] && cublas=$(find_cublas13); then
    # The Vulkan payload's tools and libraries, its Vulkan module and loader left out (each backend
    # module in the tools' folder is loaded), and the CUDA module with cudart beside them.
    mkdir -p "$WORK/cuda-bin"
    [ -d "$WORK/vulkan" ] || tar xJf "$PAYLOAD/vulkan.tar.xz" -C "$WORK"
    cp -a "$WORK/vulkan/." "$WORK/cuda-bin/"
    rm -f "$WORK/cuda-bin/libggml-vulkan.so" "$WORK/cuda-bin/libvulkan.so.1"
    cp -a "$WORK/cuda/." "$WORK/cuda-bin/"
    ln -sf "$cublas/libcublas.so.13" "$cublas/libcublasLt.so.13" "$WORK/cuda-bin/"
    echo "device_check: CUDA module from the wheels ($(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["architectures"], m["module_key"])' "$WORK/cuda/vrampilot-cuda.json")), cuBLAS from $cublas; nothing compiled" | tee "$OUT/cuda-source.txt"
    LD_LIBRARY_PATH="$WORK/cuda-bin" GGML_BACKEND_PATH="$WORK/cuda-bin/cpu/libggml-cpu-haswell.so" \
        python3 bench/device_check/check.py --bin "$WORK/cuda-bin" --payload "$PAYLOAD" --out "$OUT" 2>&1 | tee "$OUT/check.log"
    echo "device_check: done in $(( $(date +%s) - t0 )) s"
    exit 0
fi
echo "device_check: no carried CUDA module for this GPU (carried: ${carried:-none}; GPU: sm_${cc:-?}) or no cuBLAS 13 here: compiling CUDA for sm_$ARCH" | tee "$OUT/cuda-source.txt"
tar xzf "$PAYLOAD/llama.cpp.tgz" -C "$WORK"
cmake -S "$WORK/llama.cpp" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_RPC=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    > "$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
cmake --build "$WORK/build" -j "$(nproc)" --target llama-server llama-bench > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
echo "device_check: built in $(( $(date +%s) - t0 )) s"
python3 bench/device_check/check.py --bin "$WORK/build/bin" --payload "$PAYLOAD" --out "$OUT" 2>&1 | tee "$OUT/check.log"
echo "device_check: done in $(( $(date +%s) - t0 )) s"
