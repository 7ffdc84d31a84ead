"""The buffer lines llama.cpp logs, parsed: what a load or a dry run allocated, by buffer.

    load_tensors:          CPU model buffer size =    92.10 MiB
    llama_context:        CPU  output buffer size =     0.19 MiB
    llama_kv_cache:        CPU KV buffer size =    90.00 MiB
    llama_kv_cache: size =   90.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16): 45.00 MiB, V (f16): 45.00 MiB
    sched_reserve:        CPU compute buffer size =    99.38 MiB
    ~llama_context:        CPU compute buffer size is  99.3828 MiB, matches expectation of ...  (debug, real runs)

Every number is printed in MiB with 2 decimals (4 for the debug line at teardown), so a parsed size
is exact to +-0.005 MiB (5243 bytes) per line; `matches_print` compares a byte prediction with a
printed value at that resolution. Kept apart from the loads (measure.py, graph.py) so the tests,
testkit and the loads read one parse, with no llama.cpp needed to read a log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vrampilot.llamacpp import COMPUTE_RE, KVBUF_RE, MODEL_RE, OUTPUT_RE, STATE_BUF_RE

MIB = 1024 * 1024
PRINT_RESOLUTION_BYTES = int(0.005 * MIB) + 1  # one unit in the last printed digit, halved, rounded up

_MODEL_RE, _OUTPUT_RE, _KVBUF_RE, _COMPUTE_RE = MODEL_RE, OUTPUT_RE, KVBUF_RE, COMPUTE_RE
_KVSIZE_RE = re.compile(
    r"^llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\), "
    r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB"
)
_STATE_RE = re.compile(
    r"^llama_dsv4_comp_state: (\w+) ratio = (\d+), state = (\d+) x (\d+), streams = (\d+), rs_seq = (\d+), "
    r"layers = (\d+), size =\s+([\d.]+) MiB"
)
_RS_RE = re.compile(r"^llama_memory_recurrent: size =\s+([\d.]+) MiB")
_COMPUTE_EXACT_RE = re.compile(r"^~llama_context:\s+(\S+) compute buffer size (?:is|of)\s+([\d.]+) MiB")
_CPARAM_RE = re.compile(r"^llama_context: (n_ctx|n_ctx_seq|n_ubatch|n_batch|n_seq_max)\s+=\s+(\d+)")
_ERROR_PREFIXES = ("llama_init_from_model: ", "llama_context: ")


@dataclass(frozen=True)
class KvLine:
    """One `llama_kv_cache: size = ...` line (sliding-window models print two)."""

    size_mib: float
    cells: int
    layers: int
    n_seq: int
    n_stream: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float

    @property
    def size_bytes(self) -> int:
        return round(self.size_mib * MIB)

    @property
    def k_bytes(self) -> int:
        return round(self.k_mib * MIB)

    @property
    def v_bytes(self) -> int:
        return round(self.v_mib * MIB)


@dataclass(frozen=True)
class StateLine:
    """One DeepSeek-V4 compressor-state line: `csa ratio = 4, state = 8 x 1024, streams = 1, ...`."""

    name: str  # csa, hca, lid
    ratio: int
    rows: int
    width: int
    n_stream: int
    rs_seq: int
    layers: int
    size_mib: float

    @property
    def size_bytes(self) -> int:
        return round(self.size_mib * MIB)


@dataclass(frozen=True)
class MeasuredBuffers:
    model_bytes: dict[str, int]  # per buffer name (CPU, CPU_Mapped, CPU_REPACK, ...); 0 in a dry run
    kv_bytes: int  # sum of the KV `size =` lines (+ recurrent state), at print resolution
    kv_lines: list[KvLine]
    compute_bytes: dict[str, int]  # per device buffer (CPU on this build)
    output_bytes: int
    refused: str | None  # llama.cpp's reason when it refused the context, else None
    kv_buffer_bytes: dict[str, int] = field(default_factory=dict)  # real runs only
    recurrent_bytes: int = 0
    state_lines: list[StateLine] = field(default_factory=list)  # DeepSeek-V4 compressor states (in kv_bytes)
    n_ctx: int = 0  # as llama.cpp settled them
    n_ctx_seq: int = 0
    n_ubatch: int = 0
    dry_run: bool = True
    compute_resolution_bytes: int = PRINT_RESOLUTION_BYTES
    seconds: float = 0.0
    log: tuple[str, ...] = field(default=(), repr=False)
    # The MTP draft context's own buffers, when the settings draft with MTP (spec_type "mtp")
    draft: MeasuredBuffers | None = None

    @property
    def compute_total(self) -> int:
        return sum(self.compute_bytes.values())

    @property
    def total_bytes(self) -> int:
        """Model + KV + compute + output, as llama.cpp reports them."""
        return sum(self.model_bytes.values()) + self.kv_bytes + self.compute_total + self.output_bytes


def matches_print(predicted_bytes: int, printed_bytes: int, decimals: int = 2) -> bool:
    """True when llama.cpp's `%.{decimals}f MiB` print of `predicted_bytes` could read `printed_bytes`."""
    tolerance = 0.5 * 10.0 ** (-decimals) * MIB
    # llama.cpp divides in float (KV lines cast to float32): allow its relative rounding as well
    return abs(predicted_bytes - printed_bytes) <= tolerance + 1e-6 * max(predicted_bytes, 1) + 1


def _mib(text: str) -> int:
    return round(float(text) * MIB)


def parse_buffers(lines: list[str], dry_run: bool, refused: str | None, seconds: float) -> MeasuredBuffers:
    model: dict[str, int] = {}
    kv_buf: dict[str, int] = {}
    compute: dict[str, int] = {}
    compute_exact: dict[str, int] = {}
    kv_lines: list[KvLine] = []
    states: list[StateLine] = []
    cparams: dict[str, int] = {}
    output = recurrent = 0
    for line in lines:
        if m := _MODEL_RE.match(line):
            model[m[1]] = model.get(m[1], 0) + _mib(m[2])
        elif m := _OUTPUT_RE.match(line):
            output += _mib(m[2])
        elif m := (_KVBUF_RE.match(line) or STATE_BUF_RE.match(line)):
            kv_buf[m[1]] = kv_buf.get(m[1], 0) + _mib(m[2])
        elif m := _STATE_RE.match(line):
            ratio, rows, width, n_stream, rs_seq, layers = (int(m[i]) for i in range(2, 8))
            states.append(StateLine(m[1], ratio, rows, width, n_stream, rs_seq, layers, float(m[8])))
        elif m := _KVSIZE_RE.match(line):
            kv_lines.append(
                KvLine(float(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], float(m[7]), m[8], float(m[9]))
            )
        elif m := _RS_RE.match(line):
            recurrent += _mib(m[1])
        elif m := _COMPUTE_RE.match(line):
            compute[m[1]] = _mib(m[2])
        elif m := _COMPUTE_EXACT_RE.match(line):
            compute_exact[m[1]] = round(float(m[2]) * MIB)
        elif m := _CPARAM_RE.match(line):
            cparams[m[1]] = int(m[2])
    resolution = PRINT_RESOLUTION_BYTES
    if compute_exact and set(compute_exact) >= set(compute):
        compute = compute_exact
        resolution = int(0.00005 * MIB) + 1
    kv_total = round(sum(k.size_mib for k in kv_lines) * MIB) + recurrent + sum(s.size_bytes for s in states)
    return MeasuredBuffers(
        model_bytes=model,
        kv_bytes=kv_total,
        kv_lines=kv_lines,
        compute_bytes=compute,
        output_bytes=output,
        refused=refused,
        kv_buffer_bytes=kv_buf,
        recurrent_bytes=recurrent,
        state_lines=states,
        n_ctx=cparams.get("n_ctx", 0),
        n_ctx_seq=cparams.get("n_ctx_seq", 0),
        n_ubatch=cparams.get("n_ubatch", 0),
        dry_run=dry_run,
        compute_resolution_bytes=resolution,
        seconds=seconds,
        log=tuple(lines),
    )


def refusal_reason(errors: list[str]) -> str:
    for text in errors:
        for prefix in _ERROR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
        text = text.removeprefix("failed to initialize the context: ")
        if text:
            return text
    return "llama.cpp refused to create the context (no reason logged)"
