"""llama.cpp's per-device buffer lines, as llama-server prints them (lines from a real run across
two RPC hosts on loopback; the CUDA names follow the same pattern: CUDA0, CUDA_Host)."""

from __future__ import annotations

from vrampilot.llamacpp.buffer_log import MIB, device_buffers

LOG = """\
0.00.209.493 I load_tensors:   CPU_Mapped model buffer size =    28.69 MiB
0.00.209.494 I load_tensors: RPC0[127.0.0.1:50052] model buffer size =    19.02 MiB
0.00.209.496 I load_tensors: RPC0[127.0.0.1:50053] model buffer size =    73.08 MiB
0.00.447.132 I llama_context:        CPU  output buffer size =     0.19 MiB
0.00.447.444 I llama_kv_cache: RPC0[127.0.0.1:50052] KV buffer size =    13.50 MiB
0.00.451.759 I llama_kv_cache: RPC0[127.0.0.1:50053] KV buffer size =    31.50 MiB
0.00.488.487 I sched_reserve: RPC0[127.0.0.1:50052] compute buffer size =    24.91 MiB
0.00.488.502 I sched_reserve: RPC0[127.0.0.1:50053] compute buffer size =    24.91 MiB
0.00.488.504 I sched_reserve:        CPU compute buffer size =    13.67 MiB
sched_reserve:  CUDA_Host compute buffer size =    24.01 MiB
"""


def test_buffers_per_device_from_llama_servers_log() -> None:
    b = device_buffers(LOG.splitlines())
    assert b["model"] == {
        "CPU_Mapped": round(28.69 * MIB),
        "RPC0[127.0.0.1:50052]": round(19.02 * MIB),
        "RPC0[127.0.0.1:50053]": round(73.08 * MIB),
    }
    assert b["kv"]["RPC0[127.0.0.1:50053]"] == round(31.5 * MIB)
    assert b["compute"]["CPU"] == round(13.67 * MIB) and b["compute"]["CUDA_Host"] == round(24.01 * MIB)
    assert b["output"] == {"CPU": round(0.19 * MIB)}


def test_deepseek4_compressor_states_count_as_kv_memory_of_their_device() -> None:
    """llama_kv_cache_dsv4's f32 compressor states live in buffers of their own, beside its caches."""
    log = [
        "llama_kv_cache:      CUDA0 KV buffer size =     3.00 MiB",
        "llama_dsv4_comp_state:      CUDA0 DSV4 csa state buffer size =     0.05 MiB",
        "llama_dsv4_comp_state: csa ratio = 4, state = 8 x 256, streams = 1, rs_seq = 0, layers = 3, size =    0.05 MiB",
        "llama_dsv4_comp_state:        CPU DSV4 hca state buffer size =     0.25 MiB",
    ]
    assert device_buffers(log)["kv"] == {"CUDA0": round(3.0 * MIB) + round(0.05 * MIB), "CPU": round(0.25 * MIB)}
