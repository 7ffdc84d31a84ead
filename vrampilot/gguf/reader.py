"""The one GGUF reader: header, metadata and tensor table, never tensor data.

The file is memory-mapped and parsed with explicit bounds checks, so a 30 GB model opens in
milliseconds (only header pages are touched) and a corrupt or hostile header fails fast with a
one-line message instead of allocating what its counts claim.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from vrampilot.errors import UserError
from vrampilot.units import format_count

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# Arrays of strings longer than this (token lists, merges) are skipped, keeping only their length:
# the planner needs the vocabulary size, not 150,000 Python strings.
MAX_KEPT_STRING_ARRAY = 4096
MAX_DIMS = 8
MAX_PROBLEM_CHARS = 500
_U64 = struct.Struct("<Q")

_SCALAR_FORMATS: dict[int, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


class GGUFError(UserError):
    """A file that is not a GGUF model we can read; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = str(path)
        # A problem quotes the file's own keys and names, which may be megabytes long.
        self.problem = problem if len(problem) <= MAX_PROBLEM_CHARS else problem[: MAX_PROBLEM_CHARS - 1] + "…"
        super().__init__(f"{self.path}: {self.problem}")


class GGUFNeedMoreBytes(GGUFError):
    """The header runs past the bytes given to `read_gguf_bytes` but not past the file.

    Raised only for partial buffers (a remote header fetched by range request): the caller fetches
    at least `needed_bytes` from the start of the file and parses again.
    """

    def __init__(self, path: str | os.PathLike[str], needed_bytes: int, have_bytes: int) -> None:
        self.needed_bytes = needed_bytes
        self.have_bytes = have_bytes
        super().__init__(path, f"header needs at least {needed_bytes} bytes, only the first {have_bytes} were read")


@dataclass(frozen=True)
class SkippedArray:
    """A long string array (e.g. tokenizer.ggml.tokens) whose elements were not decoded."""

    element_type: int
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: ne[0] is the row length
    ggml_type: int
    offset_bytes: int  # absolute offset of the data in the file
    n_bytes: int

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.ggml_type).name
        except ValueError:
            return f"type{self.ggml_type}"

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    file_bytes: int
    alignment: int
    data_offset_bytes: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)


def tensor_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor from ggml's block table (the gguf package's copy of it)."""
    try:
        qtype = GGMLQuantizationType(ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError) as exc:
        raise ValueError(f"unknown ggml tensor type {ggml_type}") from exc
    n = 1
    for d in shape:
        n *= d
    if shape and shape[0] % block:
        raise ValueError(f"row length {shape[0]} is not a multiple of the {qtype.name} block size {block}")
    return n // block * type_size


class _Cursor:
    """Bounds-checked reads. `size` is what `buf` holds; `file_bytes` is the whole file's size, larger
    only when `buf` is a prefix (a remote header): running past `size` but not past `file_bytes`
    then means "fetch more", not "corrupt file"."""

    def __init__(
        self, buf: mmap.mmap | bytes | memoryview, path: Path, size: int, file_bytes: int | None = None
    ) -> None:
        self.buf = buf
        self.path = path
        self.size = size
        self.file_bytes = size if file_bytes is None else file_bytes
        self.pos = 0

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(self.path, problem)

    def need(self, n: int, what: str) -> None:
        if n >= 0 and self.size < self.pos + n <= self.file_bytes:
            raise GGUFNeedMoreBytes(self.path, self.pos + n, self.size)
        if n < 0 or self.pos + n > self.size:
            raise self.fail(
                f"truncated header: {what} needs {n} bytes at offset {self.pos}, file has {self.file_bytes}; "
                "the file ends early (the download or copy may be incomplete)"
            )

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"length of {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int, key: str) -> None:
        # Tight loop on purpose: vocabularies hold 100k-250k strings and this runs on every open.
        buf, size, pos = self.buf, self.size, self.pos
        unpack_len = _U64.unpack_from
        for _ in range(count):
            if pos + 8 > size:
                if pos + 8 <= self.file_bytes:
                    raise GGUFNeedMoreBytes(self.path, pos + 8, size)
                break
            pos += 8 + unpack_len(buf, pos)[0]
        else:
            if pos <= size:
                self.pos = pos
                return
            if pos <= self.file_bytes:
                raise GGUFNeedMoreBytes(self.path, pos, size)
        raise self.fail(f"truncated header: string array {key} runs past the end of the file")

    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is not None:
            return self.unpack(fmt, f"value of {key}")
        if vtype == GGUFValueType.STRING:
            return self.string(f"value of {key}")
        if vtype == GGUFValueType.ARRAY:
            if depth > 2:
                raise self.fail(f"metadata {key}: arrays nested too deeply")
            etype = self.unpack("<I", f"array type of {key}")
            count = self.unpack("<Q", f"array length of {key}")
            remaining = self.file_bytes - self.pos
            efmt = _SCALAR_FORMATS.get(etype)
            if efmt is not None:
                esize = struct.calcsize(efmt)
                if count * esize > remaining:
                    raise self.fail(f"metadata {key}: array of {count} elements runs past the end of the file")
                self.need(count * esize, f"elements of {key}")
                out = list(struct.unpack_from(f"<{count}{efmt[1]}", self.buf, self.pos))
                self.pos += count * esize
                return out
            if etype == GGUFValueType.STRING:
                if count * 8 > remaining:
                    raise self.fail(f"metadata {key}: array of {count} strings runs past the end of the file")
                if count > MAX_KEPT_STRING_ARRAY:
                    self.skip_strings(count, key)
                    return SkippedArray(int(etype), count)
                return [self.string(f"element of {key}") for _ in range(count)]
            if etype == GGUFValueType.ARRAY:
                if count * 12 > remaining:
                    raise self.fail(f"metadata {key}: array of {count} arrays runs past the end of the file")
                return [self.value(etype, key, depth + 1) for _ in range(count)]
            raise self.fail(f"metadata {key}: unknown array element type {etype}")
        raise self.fail(f"metadata {key}: unknown value type {vtype}")


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse the header of a GGUF file. Raises GGUFError with a one-line message on bad input."""
    p = Path(path)
    try:
        _refuse_unless_regular(p, p.stat().st_mode)
        # O_NONBLOCK: a FIFO put in the file's place after the check opens at once instead of
        # waiting for a writer; the fstat below then refuses it. Regular files ignore the flag.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        fh = os.fdopen(fd, "rb")  # closed below, after mmap is released
    except FileNotFoundError:
        raise GGUFError(p, "file not found") from None
    except OSError as exc:
        raise GGUFError(p, f"cannot open: {exc.strerror or exc}") from None
    with fh:
        st = os.fstat(fh.fileno())
        _refuse_unless_regular(p, st.st_mode)
        size = st.st_size
        if size < 24:
            raise GGUFError(p, f"not a GGUF file (only {size} bytes)")
        try:
            buf: mmap.mmap | bytes = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            # Some file systems cannot map; the header is all we need, so read a bounded prefix.
            buf = fh.read(min(size, 512 * 1024 * 1024))
            size = len(buf)
        try:
            return _parse(_Cursor(buf, p, size), p, size)
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()


# What a path that is not a regular file is, in the user's words. Reading one would block (a FIFO,
# `<(...)`, a socket) or say "only 0 bytes" of /dev/zero, which has no end.
_NOT_REGULAR: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a pipe (FIFO or a shell's <(...))"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_unless_regular(p: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    raise GGUFError(p, f"is {kind}, not a GGUF file; name a model file saved on disk")


def read_gguf_bytes(
    buf: bytes | bytearray | memoryview, name: str | os.PathLike[str], total_file_bytes: int
) -> GGUFFile:
    """Parse a header from the first `len(buf)` bytes of a file of `total_file_bytes` (a remote file
    read by range request). Tensor offsets are checked against the whole file's size.

    Raises GGUFNeedMoreBytes when the header continues past `buf` (fetch `needed_bytes` or more and
    call again), GGUFError when the file itself is bad.
    """
    p = Path(name)
    view = memoryview(buf).cast("B")
    have = min(len(view), total_file_bytes)
    if total_file_bytes < 24:
        raise GGUFError(p, f"not a GGUF file (only {total_file_bytes} bytes)")
    if have < 24:
        raise GGUFNeedMoreBytes(p, 24, have)
    return _parse(_Cursor(view, p, have, total_file_bytes), p, total_file_bytes)


def _parse(cur: _Cursor, path: Path, file_bytes: int) -> GGUFFile:
    magic = bytes(cur.buf[0:4])
    if magic != GGUF_MAGIC:
        # Said in words: the bytes' Python repr (b'\xddg\x91') means nothing to a user.
        raise cur.fail(
            "not a GGUF file: it does not start with the letters GGUF that every GGUF model starts with "
            "(another kind of file named .gguf, or a damaged one)"
        )
    cur.pos = 4
    version = cur.unpack("<I", "version")
    if version not in SUPPORTED_VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        if swapped in SUPPORTED_VERSIONS:
            raise cur.fail("big-endian GGUF files are not supported")
        raise cur.fail(f"GGUF version {version} is not supported (this reader handles versions 2 and 3)")
    n_tensors = cur.unpack("<Q", "tensor count")
    n_kv = cur.unpack("<Q", "metadata count")
    # Each metadata entry takes at least 8+1+4 bytes, each tensor entry 8+1+4+4+8+8: counts that
    # cannot fit in the file are rejected before any loop runs.
    # Said in words too: the first bytes of a model whose download stopped early read this way.
    cut = "the file ends early (the download or copy may be incomplete) or is damaged"
    if n_kv * 13 > file_bytes - cur.pos:
        raise cur.fail(
            f"metadata count {format_count(n_kv)} cannot fit in a file of {format_count(file_bytes)} bytes: {cut}"
        )
    if n_tensors * 33 > file_bytes - cur.pos:
        raise cur.fail(
            f"tensor count {format_count(n_tensors)} cannot fit in a file of {format_count(file_bytes)} bytes: {cut}"
        )

    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        vtype = cur.unpack("<I", f"type of {key}")
        value = cur.value(vtype, key)
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        metadata[key] = value

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment {alignment!r} is not a power of two")

    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        n_dims = cur.unpack("<I", f"dimensions of {name}")
        if n_dims == 0 or n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(cur.unpack("<Q", f"shape of {name}") for _ in range(n_dims))
        ggml_type = cur.unpack("<I", f"type of {name}")
        offset = cur.unpack("<Q", f"offset of {name}")
        if name in names:
            raise cur.fail(f"duplicate tensor name {name!r}")
        names.add(name)
        raw.append((name, shape, ggml_type, offset))

    data_offset = (cur.pos + alignment - 1) // alignment * alignment
    tensors: list[TensorInfo] = []
    for name, shape, ggml_type, offset in raw:
        try:
            n_bytes = tensor_nbytes(ggml_type, shape)
        except ValueError as exc:
            raise cur.fail(f"tensor {name!r}: {exc}") from None
        start = data_offset + offset
        if start + n_bytes > file_bytes:
            raise cur.fail(
                f"tensor {name!r} points past the end of the file "
                f"(needs bytes up to {start + n_bytes}, file has {file_bytes}); the download may be incomplete"
            )
        tensors.append(TensorInfo(name, shape, ggml_type, start, n_bytes))

    return GGUFFile(
        path=path,
        version=version,
        file_bytes=file_bytes,
        alignment=alignment,
        data_offset_bytes=data_offset,
        metadata=metadata,
        tensors=tuple(tensors),
    )
