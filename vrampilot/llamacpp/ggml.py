"""llama.cpp's own tensor operations, timed one at a time: the kernels the speed probe measures.

The planner's speed model needs what llama.cpp's kernels reach on this machine, per weight type
(a Q4_1 mat-vec runs at half the bytes per second of a Q8_0 one here; Q4_0 and Q4_K weights are
repacked for faster kernels on x86) and per KV cache type (flash attention over a q8_0 cache is
several times slower than over f16 on a CPU). A benchmark of numpy or of generic BLAS would say
nothing about either, so this module builds single-op ggml graphs and runs them on the same backend
llama.cpp uses, with weights placed where llama.cpp places them: in the CPU's "extra" buffer type
(CPU_REPACK) when that buffer supports the operation, as llama.cpp's model loader decides.

The symbols come through libllama's own handle on Linux (the wheel holds libggml*.so and .so.0 as
copies; opening one by path would load a second ggml with a registry llama.cpp never uses), and
from ggml.dll and ggml-base.dll together on Windows (backends.WindowsGgml). Everything here is ctypes on a stable C API: tensors are
opaque pointers, only `ggml_init_params` is a struct.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self, cast

import numpy as np

from vrampilot.llamacpp.binding import load

_vp = ctypes.c_void_p
_i64 = ctypes.c_int64

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_CPU = 0
# enum ggml_type values used here (ggml.h)
F32 = 0
F16 = 1
I32 = 26
# What `_Kernels._fill` writes at a time into a buffer that takes parts of a tensor.
FILL_PIECE_BYTES = 16 << 20


class GgmlError(RuntimeError):
    pass


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", _vp), ("no_alloc", ctypes.c_bool)]


def _declare(lib: Any, name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return cast(Callable[..., Any], fn)  # a ctypes function from a CDLL, which getattr types as Any


class _Api:
    """The subset of ggml.h / ggml-backend.h the probe uses, declared once."""

    def __init__(self, base: Any, registry: Any) -> None:
        d = _declare
        self.init = d(base, "ggml_init", _vp, _InitParams)
        self.free = d(base, "ggml_free", None, _vp)
        self.tensor_overhead = d(base, "ggml_tensor_overhead", ctypes.c_size_t)
        self.graph_overhead = d(base, "ggml_graph_overhead", ctypes.c_size_t)
        self.new_tensor_2d = d(base, "ggml_new_tensor_2d", _vp, _vp, ctypes.c_int, _i64, _i64)
        self.new_tensor_3d = d(base, "ggml_new_tensor_3d", _vp, _vp, ctypes.c_int, _i64, _i64, _i64)
        self.new_tensor_4d = d(base, "ggml_new_tensor_4d", _vp, _vp, ctypes.c_int, _i64, _i64, _i64, _i64)
        self.mul_mat = d(base, "ggml_mul_mat", _vp, _vp, _vp, _vp)
        self.mul_mat_id = d(base, "ggml_mul_mat_id", _vp, _vp, _vp, _vp, _vp)
        self.add = d(base, "ggml_add", _vp, _vp, _vp, _vp)
        self.mul = d(base, "ggml_mul", _vp, _vp, _vp, _vp)
        self.rms_norm = d(base, "ggml_rms_norm", _vp, _vp, _vp, ctypes.c_float)
        self.swiglu_split = d(base, "ggml_swiglu_split", _vp, _vp, _vp, _vp)
        self.geglu_split = d(base, "ggml_geglu_split", _vp, _vp, _vp, _vp)
        f = ctypes.c_float
        self.rope_ext = d(
            base, "ggml_rope_ext", _vp, _vp, _vp, _vp, _vp, ctypes.c_int, ctypes.c_int, ctypes.c_int, f, f, f, f, f, f
        )
        self.flash_attn_ext = d(
            base, "ggml_flash_attn_ext", _vp, _vp, _vp, _vp, _vp, _vp, ctypes.c_float, ctypes.c_float, ctypes.c_float
        )
        self.new_graph = d(base, "ggml_new_graph", _vp, _vp)
        self.build_forward_expand = d(base, "ggml_build_forward_expand", None, _vp, _vp)
        self.nbytes = d(base, "ggml_nbytes", ctypes.c_size_t, _vp)
        self.row_size = d(base, "ggml_row_size", ctypes.c_size_t, ctypes.c_int, _i64)
        self.blck_size = d(base, "ggml_blck_size", _i64, ctypes.c_int)
        self.quantize_chunk = d(
            base, "ggml_quantize_chunk", ctypes.c_size_t, ctypes.c_int, _vp, _vp, _i64, _i64, _i64, _vp
        )
        self.quantize_requires_imatrix = d(base, "ggml_quantize_requires_imatrix", ctypes.c_bool, ctypes.c_int)
        self.dev_by_type = d(registry, "ggml_backend_dev_by_type", _vp, ctypes.c_int)
        self.dev_init = d(base, "ggml_backend_dev_init", _vp, _vp, ctypes.c_char_p)
        self.dev_backend_reg = d(base, "ggml_backend_dev_backend_reg", _vp, _vp)
        self.dev_buffer_type = d(base, "ggml_backend_dev_buffer_type", _vp, _vp)
        self.dev_supports_op = d(base, "ggml_backend_dev_supports_op", ctypes.c_bool, _vp, _vp)
        self.reg_get_proc_address = d(base, "ggml_backend_reg_get_proc_address", _vp, _vp, ctypes.c_char_p)
        self.buft_name = d(base, "ggml_backend_buft_name", ctypes.c_char_p, _vp)
        self.alloc_ctx_tensors_from_buft = d(base, "ggml_backend_alloc_ctx_tensors_from_buft", _vp, _vp, _vp)
        self.buffer_free = d(base, "ggml_backend_buffer_free", None, _vp)
        self.buft_alloc_buffer = d(base, "ggml_backend_buft_alloc_buffer", _vp, _vp, ctypes.c_size_t)
        self.buft_get_alloc_size = d(base, "ggml_backend_buft_get_alloc_size", ctypes.c_size_t, _vp, _vp)
        self.buffer_get_base = d(base, "ggml_backend_buffer_get_base", _vp, _vp)
        self.buffer_get_size = d(base, "ggml_backend_buffer_get_size", ctypes.c_size_t, _vp)
        self.tensor_alloc = d(base, "ggml_backend_tensor_alloc", ctypes.c_int, _vp, _vp, _vp)
        self.tensor_set = d(base, "ggml_backend_tensor_set", None, _vp, _vp, ctypes.c_size_t, ctypes.c_size_t)
        self.graph_compute = d(base, "ggml_backend_graph_compute", ctypes.c_int, _vp, _vp)
        self.backend_free = d(base, "ggml_backend_free", None, _vp)
        self.cpu_buffer_type = d(base, "ggml_backend_cpu_buffer_type", _vp)


_api: _Api | None = None
_api_lock = threading.Lock()


def _load_api() -> _Api:
    global _api
    with _api_lock:
        if _api is None:
            from vrampilot.llamacpp.backends import ggml_library

            load()  # registers the CPU variant this machine runs
            # The libggml whose registry holds that variant (backends chose the handle); its
            # ggml-base functions come through it too (on Windows it is both DLLs, WindowsGgml).
            registry: Any = ggml_library()
            if registry is None:
                raise GgmlError("llama.cpp's backends are not loaded")
            _api = _Api(registry, registry)
        return _api


def cpu_buffer_type() -> int:
    """ggml's CPU buffer type (a process-wide singleton in ggml-base): the handle llama.cpp's
    loader compares a tensor override's buffer type with to keep that tensor in host memory."""
    handle = _load_api().cpu_buffer_type()
    if not handle:
        raise GgmlError("ggml_backend_cpu_buffer_type returned NULL")
    return int(handle)


@dataclass(frozen=True)
class _WeightGraph:
    """A graph to time and its weights, for CpuKernels._time_on_weights."""

    weights: tuple[int, ...]  # laid out one after another in the weight buffer, `stride` bytes apart
    stride: int
    product: int  # the node a repacking buffer type must support
    graph: int
    fill: Callable[[], None]  # values into the weights and activations, once they are allocated


@dataclass(frozen=True)
class OpTiming:
    """One operation's best time over its repetitions, and the buffer type its weights lived in."""

    seconds: float
    buffer: str  # "CPU", "CPU_REPACK", ...


class _Kernels:
    """What timing an operation on any of llama.cpp's devices needs: contexts, valid tensor data."""

    def __init__(self) -> None:
        self.api = _load_api()
        self._stage = np.empty(0, dtype=np.uint8)
        self.backend: int | None = None

    def close(self) -> None:
        if self.backend:
            self.api.backend_free(self.backend)
            self.backend = None

    def _best_time(self, graph: int, repeats: int) -> float:
        """Best seconds of `repeats` runs after an untimed one (thread pool, caches, first touch,
        a device's pipelines compiled)."""
        api = self.api
        if api.graph_compute(self.backend, graph) != 0:
            raise GgmlError("ggml_backend_graph_compute failed")
        best = float("inf")
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            api.graph_compute(self.backend, graph)
            best = min(best, time.perf_counter() - t0)
        return best

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _context(self, n_tensors: int) -> int:
        api = self.api
        size = api.tensor_overhead() * n_tensors + api.graph_overhead() + 4096
        ctx = api.init(_InitParams(size, None, True))
        if not ctx:
            raise GgmlError("ggml_init failed")
        return int(ctx)

    def row_bytes(self, ggml_type: int, n: int) -> int:
        return int(self.api.row_size(ggml_type, n))

    def block_size(self, ggml_type: int) -> int:
        return int(self.api.blck_size(ggml_type))

    def can_quantize(self, ggml_type: int) -> bool:
        # Types whose quantization needs an importance matrix (IQ1/IQ2) cannot be filled here.
        return not self.api.quantize_requires_imatrix(ggml_type)

    # Whether `_fill` writes a tensor in one piece: llama.cpp's repacking buffers (CPU_REPACK,
    # AMX) convert a whole tensor in one write and refuse a part of one; a device's (DeviceKernels)
    # stay as they were.
    _fill_whole = False

    def _staging(self, n_bytes: int) -> np.ndarray:
        """A host buffer reused for every fill (a fresh 48 MiB array per matrix would fault its
        pages in each time)."""
        if self._stage.size < n_bytes:
            self._stage = np.empty(n_bytes, dtype=np.uint8)
        return self._stage[:n_bytes]

    def _fill(self, tensor: int, ggml_type: int, n_per_row: int, n_rows: int) -> None:
        """Valid data of `ggml_type`: a few quantized rows repeated (timing does not depend on the
        values, but random bytes could hold non-finite scales). Written FILL_PIECE_BYTES at a time
        where the buffer takes parts (`_fill_whole`): a matrix streamed from RAM is 1.5x the
        last-level cache, hundreds of MB where a VM reports its host's cache, and staging it whole
        costs as much CPU as timing it (the pace gauge runs after every reply; in pieces, a
        fraction of that)."""
        api = self.api
        size = int(api.nbytes(tensor))
        rows = max(1, min(n_rows, 16))
        src = (np.random.default_rng(0).standard_normal(rows * n_per_row) * 0.05).astype(np.float32)
        if ggml_type == F32:
            chunk = src.view(np.uint8)
        else:
            chunk = np.empty(self.row_bytes(ggml_type, n_per_row) * rows, dtype=np.uint8)
            api.quantize_chunk(ggml_type, src.ctypes.data, chunk.ctypes.data, 0, rows, n_per_row, None)
        # A piece is whole chunks, so that the pieces written one after another repeat the chunk
        # exactly as one write of the whole would.
        piece = size if self._fill_whole or size <= FILL_PIECE_BYTES else FILL_PIECE_BYTES // chunk.size * chunk.size
        piece = max(piece, min(size, chunk.size))
        stage = self._staging(piece)
        whole = piece // chunk.size
        stage[: whole * chunk.size].reshape(whole, chunk.size)[:] = chunk  # broadcast: no temporary
        stage[whole * chunk.size :] = chunk[: piece - whole * chunk.size]
        for offset in range(0, size, piece):
            api.tensor_set(tensor, stage.ctypes.data, offset, min(piece, size - offset))


class CpuKernels(_Kernels):
    """The CPU backend llama.cpp runs on, for timing single operations.

    Not thread-safe: one probe at a time (the probe holds it for about a second).
    """

    def __init__(self) -> None:
        super().__init__()
        api = self.api
        self.dev = api.dev_by_type(DEVICE_CPU)
        if not self.dev:
            raise GgmlError("llama.cpp has no CPU backend registered")
        self.backend = api.dev_init(self.dev, None)
        if not self.backend:
            raise GgmlError("llama.cpp's CPU backend did not start")
        reg = api.dev_backend_reg(self.dev)
        set_threads = api.reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
        if not set_threads:
            raise GgmlError("llama.cpp's CPU backend cannot set its thread count")
        self._set_threads = ctypes.CFUNCTYPE(None, _vp, ctypes.c_int)(set_threads)
        self.cpu_buft = api.dev_buffer_type(self.dev)
        # One weight buffer per buffer type, reused by every matrix timed: a fresh 48 MiB
        # allocation per type would spend more time faulting pages in than computing.
        self._arenas: dict[int, int] = {}
        self.extra_bufts: list[int] = []
        get_extra = api.reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if get_extra:
            arr = ctypes.CFUNCTYPE(ctypes.POINTER(_vp), _vp)(get_extra)(self.dev)
            i = 0
            while arr and arr[i]:
                self.extra_bufts.append(int(arr[i]))
                i += 1

    def close(self) -> None:
        for buf in self._arenas.values():
            self.api.buffer_free(buf)
        self._arenas.clear()
        super().close()

    # -- building blocks -------------------------------------------------------------------------
    def _compute(self, graph: int, threads: int, repeats: int) -> float:
        self._set_threads(self.backend, threads)
        return self._best_time(graph, repeats)

    def _scaling(self, graph: int, threads: Sequence[int], repeats: int, buffer: str) -> list[OpTiming]:
        """Times at each thread count for a kernel that more threads never slow down on an idle
        machine: a count that came out slower than one thread was preempted by another program
        (llama.cpp's threads wait for each other), so it is measured again, twice at most."""
        times = [self._compute(graph, t, repeats) for t in threads]
        for i in range(1, len(times)):
            for _ in range(2):
                if times[i] <= times[0]:
                    break
                times[i] = min(times[i], self._compute(graph, threads[i], repeats))
        return [OpTiming(t, buffer) for t in times]

    # -- operations ------------------------------------------------------------------------------
    def _arena(self, buft: int, n_bytes: int) -> int | None:
        """A buffer of `buft` with room for n_bytes (grown when needed), or None if it cannot be had."""
        api = self.api
        buf = self._arenas.get(buft)
        if buf and api.buffer_get_size(buf) >= n_bytes:
            return buf
        if buf:
            api.buffer_free(buf)
            del self._arenas[buft]
        buf = api.buft_alloc_buffer(buft, n_bytes + 4096)
        if not buf:
            return None
        self._arenas[buft] = int(buf)
        return int(buf)

    def _time_on_weights(
        self,
        ggml_type: int,
        w_bytes: int,
        tensors: tuple[int, int],
        build: Callable[[int, int], _WeightGraph],
        threads: Sequence[int],
        repeats: int,
    ) -> list[OpTiming]:
        """Time the graph `build(weights context, activations context)` makes (contexts for
        `tensors` of each), its weights laid out in the first buffer type that takes them, as
        llama.cpp's loader chooses: an extra one that supports the product, else the plain CPU one."""
        api = self.api
        for buft in [*self.extra_bufts, self.cpu_buft]:
            # A fresh pair of contexts per try: a tensor keeps the buffer it was first given.
            cw, cx = self._context(tensors[0]), self._context(tensors[1])
            bx = 0
            try:
                g = build(cw, cx)
                # A buffer type may ask more than a weight's own bytes (AMX pads a q8_0 matrix for
                # its tiles; llama.cpp aborts the process when a tensor overruns its buffer): each
                # weight gets what its buffer type asks for.
                need = max(int(api.buft_get_alloc_size(buft, w)) for w in g.weights)
                stride = max(g.stride, -(-need // 64) * 64) if len(g.weights) > 1 else 0
                arena = self._arena(buft, max(w_bytes, stride * (len(g.weights) - 1) + need))
                if arena is None:
                    continue
                bx = api.alloc_ctx_tensors_from_buft(cx, self.cpu_buft)
                if not bx:
                    raise GgmlError("could not allocate activations")
                base = api.buffer_get_base(arena)
                if any(api.tensor_alloc(arena, w, base + i * stride) != 0 for i, w in enumerate(g.weights)):
                    continue
                if buft != self.cpu_buft and not api.dev_supports_op(self.dev, g.product):
                    continue
                self._fill_whole = buft != self.cpu_buft
                try:
                    g.fill()
                finally:
                    self._fill_whole = False
                name = (api.buft_name(buft) or b"?").decode()
                return self._scaling(g.graph, threads, repeats, name)
            finally:
                if bx:
                    api.buffer_free(bx)
                api.free(cw)
                api.free(cx)
        raise GgmlError(f"no buffer type takes a type {ggml_type} matrix")

    def mul_mat(
        self,
        ggml_type: int,
        k: int,
        n: int,
        m: int,
        threads: Sequence[int],
        repeats: int,
        *,
        experts: tuple[int, int] | None = None,
    ) -> list[OpTiming]:
        """A (k x n) weight of `ggml_type` times (k x m) f32 activations, once per thread count.

        m = 1 is what decoding does for every weight; m = ubatch what reading a prompt does.
        `experts` = (n_expert, n_used): a mixture-of-experts product instead (llama.cpp's
        mul_mat_id, one k x n matrix per expert), each of the m tokens routed to n_used experts,
        spread evenly. The weight goes to the first extra buffer type that supports the product
        (as llama.cpp's loader chooses), else the plain CPU buffer.
        """
        api = self.api
        n_expert, n_used = experts or (1, 1)

        def build(cw: int, cx: int) -> _WeightGraph:
            if experts is None:
                w = api.new_tensor_2d(cw, ggml_type, k, n)
                x = api.new_tensor_2d(cx, F32, k, m)
                ids = None
                out = api.mul_mat(cx, w, x)
            else:
                w = api.new_tensor_3d(cw, ggml_type, k, n, n_expert)
                x = api.new_tensor_3d(cx, F32, k, 1, m)
                ids = api.new_tensor_2d(cx, I32, n_used, m)
                out = api.mul_mat_id(cx, w, x, ids)
            graph = api.new_graph(cx)
            api.build_forward_expand(graph, out)

            def fill() -> None:
                self._fill(w, ggml_type, k, n * n_expert)
                self._fill(x, F32, k, m)
                if ids is not None:
                    # Token j goes to experts j*n_used .. j*n_used + n_used - 1 (mod n_expert).
                    route = (np.arange(m * n_used, dtype=np.int32) % n_expert).astype(np.int32)
                    api.tensor_set(ids, route.ctypes.data, 0, route.nbytes)

            return _WeightGraph((w,), 0, out, graph, fill)

        w_bytes = self.row_bytes(ggml_type, k) * n * n_expert
        return self._time_on_weights(ggml_type, w_bytes, (2, 8), build, threads, repeats)

    def mul_vec_chain(
        self, ggml_type: int, k: int, n: int, count: int, threads: Sequence[int], repeats: int
    ) -> list[OpTiming]:
        """`count` distinct (k x n) weights of `ggml_type`, each times the same k-vector, as the
        nodes of one graph: a decode step's mat-vecs one after another (a barrier between them,
        the weights streamed from RAM), once per thread count. A model of small matrices pays per
        product what one large matrix does not: with 2 threads here, 84 repacked Q4_0 matrices of
        92-737 KB took 1.34-1.44x their bytes at the one-matrix rate (1 thread: 1.0x;
        docs/speed-model.md)."""
        api = self.api
        align = 64
        stride = -(-self.row_bytes(ggml_type, k) * n // align) * align

        def build(cw: int, cx: int) -> _WeightGraph:
            x = api.new_tensor_2d(cx, F32, k, 1)
            ws = tuple(api.new_tensor_2d(cw, ggml_type, k, n) for _ in range(count))
            outs = [api.mul_mat(cx, w, x) for w in ws]
            graph = api.new_graph(cx)
            for out in outs:
                api.build_forward_expand(graph, out)

            def fill() -> None:
                for w in ws:
                    self._fill(w, ggml_type, k, n)
                self._fill(x, F32, k, 1)

            return _WeightGraph(ws, stride, outs[0], graph, fill)

        return self._time_on_weights(ggml_type, stride * count, (count, count + 2), build, threads, repeats)

    def _allocated_graph(self, c: int, out: int, what: str) -> tuple[int, int]:
        """The graph computing `out`, and the CPU buffer the context's tensors were given."""
        api = self.api
        graph = api.new_graph(c)
        api.build_forward_expand(graph, out)
        buf = api.alloc_ctx_tensors_from_buft(c, self.cpu_buft)
        if not buf:
            raise GgmlError(f"could not allocate the {what} tensors")
        return graph, int(buf)

    def elementwise(self, op: str, width: int, rows: int, threads: Sequence[int], repeats: int) -> list[OpTiming]:
        """One of the elementwise steps every layer takes per token, over `rows` tokens of `width`
        f32 elements: "norm" (RMS norm times its weight), "swiglu" / "geglu" (the gated
        activation of a feed-forward, silu(a) * b or gelu(a) * b), "rope" (rotating heads of
        `width` / 8 elements, eight heads per token, all dimensions, NeoX order)."""
        api = self.api
        c = self._context(8)
        buf = 0
        try:
            inputs: list[tuple[int, int, int]] = []  # tensor, type, elements per row
            if op == "norm":
                x = api.new_tensor_2d(c, F32, width, rows)
                w = api.new_tensor_2d(c, F32, width, 1)
                out = api.mul(c, api.rms_norm(c, x, 1e-6), w)
                inputs += [(x, F32, width), (w, F32, width)]
            elif op in ("swiglu", "geglu"):
                a = api.new_tensor_2d(c, F32, width, rows)
                b = api.new_tensor_2d(c, F32, width, rows)
                out = (api.swiglu_split if op == "swiglu" else api.geglu_split)(c, a, b)
                inputs += [(a, F32, width), (b, F32, width)]
            elif op == "rope":
                head = width // 8
                x = api.new_tensor_3d(c, F32, head, 8, rows)
                pos = api.new_tensor_2d(c, I32, rows, 1)
                out = api.rope_ext(c, x, pos, None, head, 2, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
                inputs.append((x, F32, head))
            else:
                raise ValueError(f"unknown elementwise op {op!r}")
            graph, buf = self._allocated_graph(c, out, "elementwise")
            for tensor, ggml_type, n in inputs:
                self._fill(tensor, ggml_type, n, int(api.nbytes(tensor)) // (4 * n))
            if op == "rope":
                positions = np.arange(rows, dtype=np.int32)
                api.tensor_set(pos, positions.ctypes.data, 0, positions.nbytes)
            return self._scaling(graph, threads, repeats, "CPU")
        finally:
            if buf:
                api.buffer_free(buf)
            api.free(c)

    def flash_attn(
        self,
        kv_type: int,
        head_dim: int,
        n_q: int,
        n_kv: int,
        n_head: int,
        threads: Sequence[int],
        repeats: int,
        n_head_kv: int = 0,
    ) -> list[OpTiming]:
        """Flash attention of n_q queries (n_head heads) over n_kv cached cells of `kv_type`, the
        query heads sharing n_head_kv KV heads (0: one per query head)."""
        n_head_kv = n_head_kv or n_head
        api = self.api
        c = self._context(8)
        buf = 0
        try:
            q = api.new_tensor_4d(c, F32, head_dim, n_q, n_head, 1)
            k = api.new_tensor_4d(c, kv_type, head_dim, n_kv, n_head_kv, 1)
            v = api.new_tensor_4d(c, kv_type, head_dim, n_kv, n_head_kv, 1)
            mask = api.new_tensor_4d(c, F16, n_kv, n_q, 1, 1)  # one row per query, as llama.cpp builds it
            out = api.flash_attn_ext(c, q, k, v, mask, head_dim**-0.5, 0.0, 0.0)
            graph, buf = self._allocated_graph(c, out, "attention")
            self._fill(q, F32, head_dim, n_q * n_head)
            self._fill(k, kv_type, head_dim, n_kv * n_head_kv)
            self._fill(v, kv_type, head_dim, n_kv * n_head_kv)
            zeros = np.zeros(int(api.nbytes(mask)) // 2, dtype=np.float16)  # nothing masked
            api.tensor_set(mask, zeros.ctypes.data, 0, zeros.nbytes)
            return self._scaling(graph, threads, repeats, "CPU")
        finally:
            if buf:
                api.buffer_free(buf)
            api.free(c)


class DeviceKernels(_Kernels):
    """One of llama.cpp's offload devices ("Vulkan0", "CUDA0"), for timing its matrix products the
    way the CPU's are timed: a weight of a ggml type in the device's own buffer, times f32
    activations, computed by the device's backend (ggml_backend_graph_compute waits for the result)."""

    _fill_whole = True

    def __init__(self, device_name: str) -> None:
        super().__init__()
        from vrampilot.llamacpp.devices import device_handle

        try:
            self.dev = device_handle(device_name)
        except KeyError as exc:
            raise GgmlError(str(exc.args[0])) from None
        self.backend = self.api.dev_init(self.dev, None)
        if not self.backend:
            raise GgmlError(f"llama.cpp's {device_name} did not start")
        self.buft = self.api.dev_buffer_type(self.dev)

    def mul_mat(self, ggml_type: int, k: int, n: int, m: int, repeats: int, *, count: int = 1) -> float:
        """Best seconds of a (k x n) `ggml_type` weight times (k x m) f32 activations on the device,
        after one untimed run (pipelines compiled, buffers touched). `count` > 1: as many distinct
        weights times the same activations, one graph (a decode step's chain of products)."""
        api = self.api
        c = self._context(2 * count + 2)
        buf = 0
        try:
            x = api.new_tensor_2d(c, F32, k, m)
            ws = [api.new_tensor_2d(c, ggml_type, k, n) for _ in range(count)]
            outs = [api.mul_mat(c, w, x) for w in ws]
            graph = api.new_graph(c)
            for out in outs:
                api.build_forward_expand(graph, out)
            buf = api.alloc_ctx_tensors_from_buft(c, self.buft)
            if not buf:
                raise GgmlError(
                    f"the device could not hold {count * self.row_bytes(ggml_type, k) * n >> 20} MiB of weights"
                )
            if not api.dev_supports_op(self.dev, outs[0]):
                raise GgmlError(f"the device has no product for ggml type {ggml_type}")
            for w in ws:
                self._fill(w, ggml_type, k, n)
            self._fill(x, F32, k, m)
            return self._best_time(graph, repeats)
        finally:
            if buf:
                api.buffer_free(buf)
            api.free(c)
