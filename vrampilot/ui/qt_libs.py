"""Which system libraries Qt's X11 platform plugin needs and this machine cannot load (Qt-free).

Without one of them Qt aborts with "could not load the Qt platform plugin xcb" and a list of
plugin names that does not say which library is missing. The plugin's own ELF dependency list
(DT_NEEDED of libqxcb.so and the Qt libraries it pulls in) is read here before Qt starts, each
library that Qt does not carry itself is tried with the system's loader, and the missing ones are
named with the Debian/Ubuntu packages that provide them, in one `apt install` line.
"""

from __future__ import annotations

import ctypes
import importlib.util
import struct
import sys
from collections.abc import Callable
from pathlib import Path

_DT_NEEDED = 1
_SHT_DYNAMIC = 6


def elf_needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a 64-bit little-endian ELF file; [] for anything else."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: list[str] = []
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != _SHT_DYNAMIC:
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == 0:
                break
            if tag == _DT_NEEDED:
                end = data.index(b"\0", strtab + value)
                out.append(data[strtab + value : end].decode("ascii", "replace"))
    return out


def debian_package(soname: str) -> str:
    """Debian's library package naming: libxcb-cursor.so.0 -> libxcb-cursor0, libxkbcommon-x11.so.0 -> libxkbcommon-x11-0."""
    name, _, version = soname.partition(".so.")
    version = version.split(".")[0]
    sep = "-" if name[-1:].isdigit() else ""
    return f"{name}{sep}{version}".lower().replace("_", "-")


def qt_dir() -> Path | None:
    """PySide6's Qt folder (plugins/, lib/), found without importing PySide6."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and (Path(bundle) / "PySide6" / "Qt").is_dir():
        return Path(bundle) / "PySide6" / "Qt"
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "Qt").is_dir():
            return Path(loc) / "Qt"
    return None


def _system_loadable(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_for_xcb(qt: Path | None = None, loadable: Callable[[str], bool] = _system_loadable) -> list[str]:
    """Sonames Qt's xcb plugin needs that neither Qt (or the bundle) carries nor the system loads."""
    qt = qt or qt_dir()
    if qt is None:
        return []
    plugin = qt / "plugins" / "platforms" / "libqxcb.so"
    if not plugin.is_file():
        return []
    carried = [qt / "lib", qt.parent, qt.parent.parent]  # Qt's lib/, PySide6/, a bundle's _internal/
    seen: set[str] = set()
    missing: list[str] = []
    todo = [plugin]
    while todo:
        for soname in elf_needed(todo.pop()):
            if soname in seen:
                continue
            seen.add(soname)
            own = next((d / soname for d in carried if (d / soname).is_file()), None)
            if own is not None:
                todo.append(own)  # Qt's own library: its dependencies count too
            elif not loadable(soname):
                missing.append(soname)
    return sorted(missing)


def xcb_problem(qt: Path | None = None, loadable: Callable[[str], bool] = _system_loadable) -> str | None:
    """One sentence naming what to install, or None when the X11 plugin can load."""
    missing = missing_for_xcb(qt, loadable)
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(debian_package(s) for s in missing))
    return f"Qt's X11 plugin needs {', '.join(missing)}, which this system lacks (e.g. sudo apt install {packages})"
