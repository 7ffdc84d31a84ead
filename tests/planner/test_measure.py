"""measure_allocations: llama.cpp's log turned into numbers, dry run vs real allocation, refusals."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from testkit.gguf_models import write_header_only, write_model, write_wrong_magic
from vrampilot.gguf import load_model_spec
from vrampilot.paths import embedded_model_path
from vrampilot.planner.dry_run.log_lines import MIB, PRINT_RESOLUTION_BYTES, matches_print, parse_buffers
from vrampilot.planner.dry_run.measure import MeasureError, dry_run_plan, measure_allocations
from vrampilot.planner.memory.kv import kv_cache_bytes
from vrampilot.planner.settings import Settings

llama_cpp = pytest.importorskip("llama_cpp")

CANNED_LOG = """\
load_tensors:          CPU model buffer size =    92.10 MiB
load_tensors:   CPU_REPACK model buffer size =    10.50 MiB
llama_context: n_ctx                 = 4096
llama_context: n_ctx_seq             = 4096
llama_context: n_ubatch              = 512
llama_context:        CPU  output buffer size =     0.19 MiB
llama_kv_cache:        CPU KV buffer size =    90.00 MiB
llama_kv_cache: size =   80.00 MiB (  4096 cells,   5 layers,  1/1 seqs), K (f16):   40.00 MiB, V (f16):   40.00 MiB
llama_kv_cache: size =   10.00 MiB (   768 cells,  25 layers,  1/1 seqs), K (q8_0):    5.00 MiB, V (f16):    5.00 MiB
sched_reserve:        CPU compute buffer size =    99.38 MiB
~llama_context:        CPU compute buffer size is  99.3828 MiB, matches expectation of  99.3828 MiB
"""


def test_parse_reads_every_buffer_line() -> None:
    m = parse_buffers(CANNED_LOG.splitlines(), dry_run=False, refused=None, seconds=0.0)
    assert m.model_bytes == {"CPU": round(92.10 * MIB), "CPU_REPACK": round(10.5 * MIB)}
    assert m.kv_buffer_bytes == {"CPU": 90 * MIB}
    assert [(k.cells, k.layers, k.type_k) for k in m.kv_lines] == [(4096, 5, "f16"), (768, 25, "q8_0")]
    assert m.kv_bytes == 90 * MIB
    assert m.compute_bytes == {"CPU": round(99.3828 * MIB)}  # the 4-decimal teardown line wins
    assert m.compute_resolution_bytes < PRINT_RESOLUTION_BYTES
    assert m.output_bytes == round(0.19 * MIB)
    assert (m.n_ctx, m.n_ctx_seq, m.n_ubatch) == (4096, 4096, 512)


def test_matches_print_resolution() -> None:
    assert matches_print(45 * MIB, 45 * MIB)
    assert matches_print(45 * MIB + 5000, 45 * MIB)
    assert not matches_print(45 * MIB + 6000, 45 * MIB)


@pytest.fixture(scope="module")
def llama_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("measure") / "llama.gguf", "llama")


def test_dry_run_and_real_allocation_agree(llama_file: Path) -> None:
    spec = load_model_spec(llama_file)
    for s in (Settings(n_ctx=4096, flash_attn=False), Settings(n_ctx=1000, type_k="q8_0", type_v="q8_0")):
        dry = measure_allocations(llama_file, s, dry_run=True)
        real = measure_allocations(llama_file, s, dry_run=False)
        assert dry.dry_run and not real.dry_run
        assert sum(dry.model_bytes.values()) == 0  # prints 0.00 without allocating
        assert matches_print(spec.weight_bytes, sum(real.model_bytes.values()))
        assert dry.kv_bytes == real.kv_bytes
        assert matches_print(kv_cache_bytes(spec, s).total_bytes, sum(real.kv_buffer_bytes.values()))
        assert abs(dry.compute_total - real.compute_total) <= PRINT_RESOLUTION_BYTES
        assert real.compute_resolution_bytes < 100  # 4-decimal teardown line
        assert dry.output_bytes == real.output_bytes
        assert dry.n_ctx == real.n_ctx == kv_cache_bytes(spec, s).n_cells


def test_refusal_is_reported_not_raised(llama_file: Path) -> None:
    m = measure_allocations(llama_file, Settings(n_ctx=512, flash_attn=False, type_v="q4_0"))
    assert m.refused == "quantized V cache requires flash_attn to be enabled"
    assert m.kv_lines == [] and m.compute_bytes == {}


def test_log_callback_is_restored(llama_file: Path) -> None:
    before_cb = llama_cpp.llama_log_callback()
    before_ud = ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(before_cb), ctypes.byref(before_ud))
    measure_allocations(llama_file, Settings(n_ctx=512))
    after_cb = llama_cpp.llama_log_callback()
    after_ud = ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(after_cb), ctypes.byref(after_ud))
    assert ctypes.cast(after_cb, ctypes.c_void_p).value == ctypes.cast(before_cb, ctypes.c_void_p).value
    assert after_ud.value == before_ud.value


def test_unloadable_files_raise_measure_error(tmp_path: Path) -> None:
    with pytest.raises(MeasureError, match="not found"):
        measure_allocations(tmp_path / "missing.gguf", Settings(n_ctx=512))
    with pytest.raises(MeasureError, match="cannot load"):
        measure_allocations(write_wrong_magic(tmp_path / "bad.gguf"), Settings(n_ctx=512))


def test_dry_run_of_a_header_only_7b_is_fast(tmp_path: Path) -> None:
    path = write_header_only(tmp_path / "qwen7b.gguf", "qwen2.5-7b")
    spec = load_model_spec(path)
    s = Settings(n_ctx=32768, n_ubatch=512, flash_attn=True)
    totals = dry_run_plan(path, s)
    assert totals.refused is None
    assert totals.seconds < 5
    assert matches_print(kv_cache_bytes(spec, s).total_bytes, totals.kv_bytes)
    assert totals.compute_bytes > 0 and totals.output_bytes > 0
    assert totals.context_bytes == totals.kv_bytes + totals.compute_bytes + totals.output_bytes


def test_embedded_model_measures() -> None:
    path = embedded_model_path()
    if path is None or not path.is_file():
        pytest.skip("embedded model not installed")
    m = measure_allocations(path, Settings(n_ctx=4096, flash_attn=False))
    assert m.refused is None and m.n_ctx == 4096
    assert m.kv_bytes == 90 * MIB  # 30 layers x 2 x 192 x 2 bytes x 4096 cells
