"""The speed probe of an offload device: llama.cpp's own matrix products on the device, timed.

Without it the speed model prices a device by its peak bandwidth (NVML or a profile; 288 GB/s
for a device nothing names) times a share llama.cpp is assumed to reach, which for a device
unlike the assumption is off by any factor: Mesa's lavapipe generated 2.45 tokens/s where the
assumption said 620, beyond what replies may correct (planner/learned_factors.py FACTOR_MIN..MAX). Two
figures per device, each the best of a few runs after an untimed one:
- decode: a mat-vec over a weight larger than the device's caches (every decoded token reads each
  weight once): weight bytes per second;
- prefill: a prompt-sized product: FLOPs per second;
- the cost of each product in a chain of small ones beyond its bytes (a decode step is such a
  chain: a kernel launch and a barrier each, which on lavapipe cost more than the reading).
A second or two per device (more on lavapipe). Software devices get smaller matrices: they run
on the CPU and their caches are the CPU's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from vrampilot.hardware import LlamaDevice
from vrampilot.speed.host_probe import ggml_type_id
from vrampilot.speed.measured import DeviceRates

# The type timed: what the file types the app offers most (Q8_0, Q4_K_M's bulk) read per weight
# lies between q4_k and q8_0; q8_0 runs one plain kernel on every backend.
DEVICE_WEIGHT_TYPE = "q8_0"
# Larger than the L2 of any consumer or data-centre card (RTX 4090: 72 MB; H200: 50 MB) by far.
_GPU_STREAM_BYTES = 256 << 20
_SOFTWARE_STREAM_BYTES = 32 << 20
_ROW = 4096
# 2048 x 2048 weights times a 512-token ubatch: 4.3 GFLOP.
_MATMUL_K, _MATMUL_N, _MATMUL_M = 2048, 2048, 512
_REPEATS = 3
# A small model's products (SmolLM2-135M: 576 wide): 96 of them, 64 MiB of q8_0 at most.
_CHAIN_K, _CHAIN_N, _CHAIN_COUNT = 576, 1536, 96


def measure_device(device: LlamaDevice, *, software: bool = False) -> DeviceRates:
    """Time `device` (one llama.cpp lists). Raises GgmlError when it cannot run the products."""
    from vrampilot.llamacpp import DeviceKernels

    tid = ggml_type_id(DEVICE_WEIGHT_TYPE)
    stream = min(_SOFTWARE_STREAM_BYTES if software else _GPU_STREAM_BYTES, max(1 << 20, device.memory_free_bytes // 4))
    with DeviceKernels(device.name) as kernels:
        row_bytes = kernels.row_bytes(tid, _ROW)
        rows = max(64, stream // row_bytes // 64 * 64)
        vec_s = kernels.mul_mat(tid, _ROW, rows, 1, _REPEATS)
        mat_s = kernels.mul_mat(tid, _MATMUL_K, _MATMUL_N, _MATMUL_M, _REPEATS)
        chain_s = kernels.mul_mat(tid, _CHAIN_K, _CHAIN_N, 1, _REPEATS, count=_CHAIN_COUNT)
    decode_bps = row_bytes * rows / vec_s
    one = kernels.row_bytes(tid, _CHAIN_K) * _CHAIN_N
    return DeviceRates(
        llama_name=device.name,
        description=device.description,
        measured_at=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        weight_type=DEVICE_WEIGHT_TYPE,
        decode_gbps=round(decode_bps / 1e9, 4),
        prefill_gflops=round(2.0 * _MATMUL_K * _MATMUL_N * _MATMUL_M / mat_s / 1e9, 4),
        product_overhead_us=round(max(0.0, chain_s / _CHAIN_COUNT - one / decode_bps) * 1e6, 3),
    )


def measure_devices(devices: Sequence[LlamaDevice]) -> tuple[DeviceRates, ...]:
    """Each offload device llama.cpp lists (RPC hosts are another machine's and are not timed)."""
    from vrampilot.llamacpp import is_software_name

    return tuple(measure_device(d, software=is_software_name(d.description)) for d in devices if d.backend != "RPC")
