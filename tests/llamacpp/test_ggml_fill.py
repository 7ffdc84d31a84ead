"""The data the kernels' timings run on (llamacpp/ggml.py `_Kernels._fill`): a matrix larger than
a fill's piece, written piece by piece into llama.cpp's CPU buffer, holds exactly the bytes one
write of the whole would have (the same few quantized rows repeated), so that piecewise filling
changes what a probe costs and nothing of what it times."""

from __future__ import annotations

import ctypes

from vrampilot.llamacpp.ggml import FILL_PIECE_BYTES, CpuKernels
from vrampilot.speed import ggml_type_id


def test_a_matrix_filled_in_pieces_holds_what_one_write_holds() -> None:
    q8_0 = ggml_type_id("q8_0")
    k = 4096
    with CpuKernels() as cpu:
        api = cpu.api
        row = cpu.row_bytes(q8_0, k)
        rows = FILL_PIECE_BYTES // row + 67  # a piece and part of another
        c = cpu._context(1)
        buf = 0
        try:
            tensor = api.new_tensor_2d(c, q8_0, k, rows)
            buf = api.alloc_ctx_tensors_from_buft(c, cpu.cpu_buft)
            assert buf
            size = int(api.nbytes(tensor))
            assert size > FILL_PIECE_BYTES and size % FILL_PIECE_BYTES
            base = api.buffer_get_base(buf)  # the context's only tensor starts there

            cpu._fill(tensor, q8_0, k, rows)
            pieces = ctypes.string_at(base, size)
            cpu._fill_whole = True
            ctypes.memset(base, 0, size)
            cpu._fill(tensor, q8_0, k, rows)
            whole = ctypes.string_at(base, size)
        finally:
            if buf:
                api.buffer_free(buf)
            api.free(c)
    assert pieces == whole
    # The repeated rows: every row holds one of the first 16 rows' blocks again.
    assert pieces[16 * row : 17 * row] == pieces[:row] and pieces[-row:] == pieces[(rows - 1) % 16 * row :][:row]
