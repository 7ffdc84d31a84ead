#!/usr/bin/env bash
# The GPU device check, as one call on a lent GPU machine (15 minutes of device time in all, no
# registry there): build llama.cpp's CUDA backend with llama-server and llama-bench from the
# trimmed vendored sources, then hold the planner's per-device bytes against llama.cpp's real CUDA
# allocations, time decode through the API against llama-bench, and read NVML for the process.
#
#   here:    python bench/device_check/prepare.py            # bench/out/device (about 25 MiB)
#   there:   run(command="bash bench/device_check.sh", carry=["bench/out/device"], timeout_s=540)
#
# CUDA_ARCH (default 90, an H200/H100) builds for that GPU only, with every core: a full list
# would not finish in the time a device is lent. Results: $OUT/results.json and the log.
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
