"""Which x86 instruction sets this process can really execute, not just what CPUID advertises.

llama.cpp picks its CPU variant by CPUID alone. That is not enough: AMX needs the kernel to grant
the tile state (XCR0 bits 17-18 and `arch_prctl(ARCH_REQ_XCOMP_PERM)`), AVX-512 needs XCR0's ZMM
state, AVX the YMM state; VMs advertise features their hypervisor never enabled, and a variant
built for them dies with SIGILL on the first prompt. So each feature a CPU variant is compiled for
is tested by running one instruction of it (a few bytes of machine code in an executable page):
on POSIX in a forked child, whose death by a signal means "cannot run"; on Windows in-process,
where ctypes turns the illegal-instruction exception into an OSError.

CPUID and XGETBV themselves are harmless to run in-process; they say what is advertised and what
the OS enabled, which is how a failure is explained ("advertised but not enabled by the OS"), and
they fingerprint the CPU for the cache (so qemu's emulated CPU is not mistaken for the host's).
The machine code below was assembled with GNU as (`.intel_syntax noprefix`); each encoding sits
next to its mnemonic.
"""

from __future__ import annotations

import ctypes
import faulthandler
import hashlib
import json
import mmap
import os
import platform
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

PROBE_VERSION = 1
WINDOWS = sys.platform == "win32"

# feature (as ggml's CMake names it) -> the instructions of a function that executes it and
# returns, each as (GNU as mnemonic, its encoding). tests/llamacpp check the encodings with `as`.
_TILECFG = ("ldtilecfg [rcx]", "c4e2784901") if WINDOWS else ("ldtilecfg [rdi]", "c4e2784907")
_VZ = ("vzeroupper", "c5f877")
_RET = ("ret", "c3")
INSTRUCTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "SSE42": (("crc32 eax, eax", "f20f38f1c0"), _RET),
    "AVX": (("vxorps ymm0, ymm0, ymm0", "c5fc57c0"), _VZ, _RET),
    "F16C": (("vcvtph2ps ymm0, xmm0", "c4e27d13c0"), _VZ, _RET),
    "FMA": (("vfmadd231ps ymm0, ymm0, ymm0", "c4e27db8c0"), _VZ, _RET),
    "AVX2": (("vpaddd ymm0, ymm0, ymm0", "c5fdfec0"), _VZ, _RET),
    "BMI2": (("pdep eax, eax, eax", "c4e27bf5c0"), _RET),
    "AVX_VNNI": (("{vex} vpdpbusd ymm0, ymm0, ymm0", "c4e27d50c0"), _VZ, _RET),
    # ggml's AVX512 means F, CD, VL, DQ and BW: one instruction of each.
    "AVX512": (
        ("vpxord zmm16, zmm16, zmm16", "62a17d40efc0"),
        ("vplzcntd zmm16, zmm16", "62a27d4844c0"),
        ("vpxord ymm16, ymm16, ymm16", "62a17d20efc0"),
        ("vandpd zmm16, zmm16, zmm16", "62a1fd4054c0"),
        ("vpaddb zmm16, zmm16, zmm16", "62a17d40fcc0"),
        _VZ,
        _RET,
    ),
    "AVX512_VBMI": (("vpermb zmm16, zmm16, zmm16", "62a27d408dc0"), _VZ, _RET),
    "AVX512_VNNI": (("vpdpbusd zmm16, zmm16, zmm16", "62a27d4050c0"), _VZ, _RET),
    "AVX512_BF16": (("vdpbf16ps zmm16, zmm16, zmm16", "62a27e4052c0"), _VZ, _RET),
    # AMX: load a tile configuration from the first argument, touch the tiles, release them.
    "AMX_TILE": (_TILECFG, ("tilezero tmm0", "c4e27b49c0"), ("tilerelease", "c4e27849c0"), _RET),
    "AMX_INT8": (
        _TILECFG,
        ("tilezero tmm0", "c4e27b49c0"),
        ("tilezero tmm1", "c4e27b49c8"),
        ("tilezero tmm2", "c4e27b49d0"),
        ("tdpbssd tmm0, tmm1, tmm2", "c4e26b5ec1"),
        ("tilerelease", "c4e27849c0"),
        _RET,
    ),
}
_CODE = {name: bytes.fromhex("".join(enc for _, enc in instrs)) for name, instrs in INSTRUCTIONS.items()}
FEATURES = tuple(_CODE)
_AMX = ("AMX_TILE", "AMX_INT8")

# cpuid(leaf, subleaf, uint32 out[4]); push rbx ... cpuid ... store eax, ebx, ecx, edx ... pop rbx; ret
_CPUID = bytes.fromhex(
    ("5389c889d1" if WINDOWS else "534989d089f889f1")
    + "0fa2"
    + "418900"
    + "41895804"
    + "41894808"
    + "4189500c"
    + "5bc3"
)
_XGETBV0 = bytes.fromhex("31c90f01d048c1e2204809d0c3")  # xor ecx,ecx; xgetbv; shl rdx,32; or rax,rdx; ret

# (leaf, subleaf, register index eax=0 ebx=1 ecx=2 edx=3, bit) for each part of a feature.
_CPUID_BITS: dict[str, tuple[tuple[int, int, int, int], ...]] = {
    "SSE42": ((1, 0, 2, 20),),
    "AVX": ((1, 0, 2, 28),),
    "F16C": ((1, 0, 2, 29),),
    "FMA": ((1, 0, 2, 12),),
    "AVX2": ((7, 0, 1, 5),),
    "BMI2": ((7, 0, 1, 8),),
    "AVX_VNNI": ((7, 1, 0, 4),),
    "AVX512": ((7, 0, 1, 16), (7, 0, 1, 28), (7, 0, 1, 31), (7, 0, 1, 17), (7, 0, 1, 30)),
    "AVX512_VBMI": ((7, 0, 2, 1),),
    "AVX512_VNNI": ((7, 0, 2, 11),),
    "AVX512_BF16": ((7, 1, 0, 5),),
    "AMX_TILE": ((7, 0, 3, 24),),
    "AMX_INT8": ((7, 0, 3, 25),),
}
# XCR0 state components each feature needs the OS to have enabled.
_XCR0_SSE_YMM = (1 << 1) | (1 << 2)
_XCR0_ZMM = _XCR0_SSE_YMM | (1 << 5) | (1 << 6) | (1 << 7)
_XCR0_TILE = (1 << 17) | (1 << 18)
_XCR0_NEEDS = {
    "SSE42": 0,
    "BMI2": 0,
    "AVX": _XCR0_SSE_YMM,
    "F16C": _XCR0_SSE_YMM,
    "FMA": _XCR0_SSE_YMM,
    "AVX2": _XCR0_SSE_YMM,
    "AVX_VNNI": _XCR0_SSE_YMM,
    "AVX512": _XCR0_ZMM,
    "AVX512_VBMI": _XCR0_ZMM,
    "AVX512_VNNI": _XCR0_ZMM,
    "AVX512_BF16": _XCR0_ZMM,
    "AMX_TILE": _XCR0_TILE,
    "AMX_INT8": _XCR0_TILE,
}

_CHILD_OS_REFUSED = 3  # exit status of a child whose arch_prctl request for the tile state failed


@dataclass(frozen=True)
class FeatureResult:
    name: str
    advertised: bool  # CPUID says the CPU has it
    os_enabled: bool  # XCR0 (and for AMX the kernel's permission) allows it
    runs: bool  # an instruction of it executed
    note: str  # why not, for a person; "" when it runs


@dataclass(frozen=True)
class CpuProbe:
    fingerprint: str
    method: str  # "executed" (instructions run) or "unavailable: <why>" (nothing could be run)
    results: tuple[FeatureResult, ...]

    def runs(self, feature: str) -> bool:
        return any(r.name == feature and r.runs for r in self.results)

    def result(self, feature: str) -> FeatureResult | None:
        return next((r for r in self.results if r.name == feature), None)


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


class _Page:
    """One executable page holding machine code, callable through ctypes."""

    def __init__(self, code: bytes) -> None:
        size = max(mmap.PAGESIZE, len(code))
        self._keep: object
        if WINDOWS:
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only
            kernel32.VirtualAlloc.restype = ctypes.c_void_p
            kernel32.VirtualAlloc.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulong, ctypes.c_ulong)
            address = kernel32.VirtualAlloc(None, size, 0x3000, 0x40)  # MEM_COMMIT|MEM_RESERVE, RWX
            if not address:
                raise OSError(getattr(ctypes, "get_last_error")(), "VirtualAlloc refused an executable page")  # noqa: B009  (Windows-only)
            ctypes.memmove(address, code, len(code))
            self.address = int(address)
            self._keep = address
        else:
            page = mmap.mmap(-1, size, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            page.write(code)
            view = ctypes.c_char.from_buffer(page)  # holds the mapping open while this page lives
            self.address = ctypes.addressof(view)
            self._keep = (page, view)

    def function(self, restype: object, *argtypes: object) -> ctypes._CFuncPtr:  # type: ignore[name-defined]  # typeshed's private name for a ctypes function pointer
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address)  # type: ignore[arg-type]  # ctypes types passed as objects
        fn._vp_page = self  # type: ignore[attr-defined]  # the code must outlive every call
        return fn


def read_cpuid() -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """The CPUID leaves the probe looks at (x86-64 only)."""
    fn = _Page(_CPUID).function(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))
    out = (ctypes.c_uint32 * 4)()
    leaves: dict[tuple[int, int], tuple[int, int, int, int]] = {}

    def get(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
        fn(leaf, sub, out)
        leaves[(leaf, sub)] = (out[0], out[1], out[2], out[3])
        return leaves[(leaf, sub)]

    max_leaf = get(0)[0]
    get(1)
    if max_leaf >= 7:
        get(7, 0)
        get(7, 1)
    if max_leaf >= 0xD:
        get(0xD, 0)
    get(0x80000000)
    return leaves


def read_xcr0(leaves: dict[tuple[int, int], tuple[int, int, int, int]]) -> int:
    """XCR0, or 0 when the OS has not enabled XSAVE (XGETBV would fault then)."""
    if not leaves.get((1, 0), (0, 0, 0, 0))[2] & (1 << 27):  # CPUID.1:ECX.OSXSAVE
        return 0
    return int(_Page(_XGETBV0).function(ctypes.c_uint64)())


def _advertised(leaves: dict[tuple[int, int], tuple[int, int, int, int]], feature: str) -> bool:
    for leaf, sub, reg, bit in _CPUID_BITS[feature]:
        value = leaves.get((leaf, sub))
        if value is None or not value[reg] & (1 << bit):
            return False
    return True


def fingerprint(leaves: dict[tuple[int, int], tuple[int, int, int, int]], xcr0: int) -> str:
    """Changes with the CPU (as CPUID reports it, so also under an emulator), the OS state, the kernel."""
    stable = dict(leaves)
    if (1, 0) in stable:  # CPUID.1:EBX[31:24] is the APIC ID of whichever core ran the query
        eax, ebx, ecx, edx = stable[(1, 0)]
        stable[(1, 0)] = (eax, ebx & 0x00FFFFFF, ecx, edx)
    blob = json.dumps(
        {
            "v": PROBE_VERSION,
            "cpuid": sorted([list(k), list(v)] for k, v in stable.items()),
            "xcr0": xcr0,
            "os": [sys.platform, platform.release()],
        }
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


_TILE_CONFIG = (
    bytes([1, 0] + [0] * 14)
    + b"".join((4).to_bytes(2, "little") if i < 3 else b"\0\0" for i in range(16))
    + bytes([1, 1, 1] + [0] * 13)
)  # palette 1; tiles 0-2: 1 row of 4 bytes


def _request_tile_permission() -> bool:
    """Linux: ask the kernel for the AMX tile data state, as ggml does before using it."""
    if not sys.platform.startswith("linux"):
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    return int(libc.syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata)) == 0


def _run_in_child(feature: str) -> tuple[bool, str]:
    """POSIX: run the instruction in a forked child; (runs, note)."""
    page = _Page(_CODE[feature])
    config = ctypes.create_string_buffer(_TILE_CONFIG, 64)
    fn = page.function(None, ctypes.c_void_p)
    pid = os.fork()
    if pid == 0:  # the child: nothing here may raise out or run Python cleanup
        try:
            # Die of the signal itself: no faulthandler traceback (pytest installs one), no handler.
            faulthandler.disable()
            signal.signal(signal.SIGILL, signal.SIG_DFL)
            if feature in _AMX and not _request_tile_permission():
                os._exit(_CHILD_OS_REFUSED)
            fn(ctypes.addressof(config))
            os._exit(0)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code == 0:
            return True, ""
        if code == _CHILD_OS_REFUSED:
            return False, "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)"
        return False, f"the probe exited with status {code}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = "SIGILL" if sig == 4 else f"signal {sig}"
        return False, f"faults when run ({name})"
    return False, "the probe ended oddly"


def _run_in_process(feature: str) -> tuple[bool, str]:
    """Windows: ctypes reports an illegal instruction as OSError instead of dying."""
    page = _Page(_CODE[feature])
    config = ctypes.create_string_buffer(_TILE_CONFIG, 64)
    try:
        page.function(None, ctypes.c_void_p)(ctypes.addressof(config))
    except OSError as exc:
        return False, f"faults when run ({exc})"
    return True, ""


def run_feature(feature: str) -> tuple[bool, str]:
    """Execute `feature`'s instructions once, whatever CPUID says: (runs, why not)."""
    return _run_in_process(feature) if WINDOWS else _run_in_child(feature)


def run_probes() -> CpuProbe:
    """Probe every feature now (about a millisecond each on POSIX, a fork apiece)."""
    leaves = read_cpuid()
    xcr0 = read_xcr0(leaves)
    results = []
    for feature in FEATURES:
        advertised = _advertised(leaves, feature)
        needs = _XCR0_NEEDS[feature]
        os_enabled = (xcr0 & needs) == needs
        if not advertised:
            results.append(FeatureResult(feature, False, os_enabled, False, "not in this CPU"))
            continue
        runs, note = run_feature(feature)
        if not runs and not os_enabled:
            note = f"advertised but not enabled by the OS ({note})"
        elif not runs:
            note = f"advertised but {note}"
        results.append(FeatureResult(feature, True, os_enabled, runs, note))
    return CpuProbe(fingerprint(leaves, xcr0), "executed", tuple(results))


def probe_cpu(cache_file: Path | None) -> CpuProbe:
    """The probe for this CPU, from `cache_file` when it was made on the same CPU and OS state."""
    if not is_x86_64():
        return CpuProbe("", f"unavailable: not an x86-64 CPU ({platform.machine()})", ())
    try:
        leaves = read_cpuid()
        current = fingerprint(leaves, read_xcr0(leaves))
    except (OSError, ValueError) as exc:  # no executable pages allowed (hardened kernel, W^X policy)
        return CpuProbe("", f"unavailable: {exc}", ())
    if cache_file is not None:
        cached = _read_cache(cache_file)
        if cached is not None and cached.fingerprint == current:
            return cached
    probe = run_probes()
    if cache_file is not None:
        _write_cache(cache_file, probe)
    return probe


def _read_cache(path: Path) -> CpuProbe | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        results = tuple(FeatureResult(**r) for r in raw["results"])
        return CpuProbe(str(raw["fingerprint"]), str(raw["method"]), results)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: Path, probe: CpuProbe) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(probe), indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full data folder only costs a re-probe next time
