"""What the test groups need from the system, in one table: `.ci/run` installs it, `make test` names
what is missing before it starts, and the README points here.

A newcomer's `make test` runs without root and installs no system package, so every group below
whose parts are missing skips (each skip listed at the end, with its reason). The table says which
groups those are and the one `apt-get install` line that turns them into runs; CI (as root) installs
all of it and fails on any skip (VRAMPILOT_NO_SKIPS).

Standard library only: `.ci/run` asks it for the package list before any venv exists.

    python3 tests/system_packages.py            # every Debian package the groups need, one line
    python3 tests/system_packages.py --missing  # only those whose group would skip here
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass


def _which(*names: str) -> Callable[[], bool]:
    return lambda: all(shutil.which(n) is not None for n in names)


def _files(*patterns: str) -> Callable[[], bool]:
    return lambda: all(glob.glob(p) for p in patterns)


def _all(*checks: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: all(check() for check in checks)


@dataclass(frozen=True)
class Group:
    """A set of tests that skips without `debian_packages` (`present` says whether they are here)."""

    tests: str
    debian_packages: tuple[str, ...]
    present: Callable[[], bool]


WINDOWS_ENGINE_TESTS = "the Windows engine, cross-compiled and run under Wine (tests/packaging/test_windows_engine.py)"

GROUPS = (
    Group(
        # lavapipe, Mesa's software Vulkan device, stands in for a GPU; glslc compiles llama.cpp's
        # shaders when the engine is built (the recipe can fetch it by itself, without root).
        "the GPU path on a real Vulkan device (tests/gpu, the bundle's Vulkan test)",
        ("mesa-vulkan-drivers", "libvulkan1", "glslc"),
        _files("/usr/share/vulkan/icd.d/lvp_icd*.json", "/usr/lib/*/libvulkan.so.1"),
    ),
    Group(
        "the engine on older CPUs under emulation (tests/llamacpp/test_dispatch.py)",
        ("qemu-user",),
        _which("qemu-x86_64"),
    ),
    Group(
        "child processes living in 1971 or 2100 (tests/clock.py)",
        ("faketime",),
        _files("/usr/lib/*/faketime/libfaketime.so.1"),
    ),
    Group(
        "the .desktop and MIME files (tests/packaging/test_linux_files.py)",
        ("desktop-file-utils", "shared-mime-info"),
        _which("desktop-file-validate", "update-mime-database"),
    ),
    Group(
        "the AppImage runtime, built static and run (tests/packaging/test_linux_files.py)",
        (
            "squashfs-tools",
            "gcc",
            "libsquashfuse-dev",
            "libfuse3-dev",
            "libzstd-dev",
            "liblzma-dev",
            "liblz4-dev",
            "liblzo2-dev",
            "zlib1g-dev",
        ),
        _all(
            _which("gcc", "mksquashfs", "unsquashfs"),
            _files("/usr/include/squashfuse/ll.h", "/usr/include/fuse3/fuse_lowlevel.h"),
        ),
    ),
    Group("the Windows installer script (tests/packaging/test_nsis.py)", ("nsis",), _which("makensis")),
    Group(
        # The installer built on Linux and tested under Wine (packaging/windows/build.py): Wine runs
        # the Windows CPython, PyInstaller and the installed app; MinGW builds the ICU stand-in
        # that Qt needs under Wine 8 and cross-compiles the Windows engine (packaging/engine/build.py).
        "the Windows installer under Wine (tests/packaging/test_windows_installer.py, make package-windows-test)",
        # DejaVu Sans: the font the window is drawn with offscreen (Wine's own fonts have no usable metrics).
        (
            "nsis",
            "wine",
            "wine64",
            "gcc-mingw-w64-x86-64-posix",
            "g++-mingw-w64-x86-64-posix",
            "mingw-w64-tools",
            "fonts-dejavu-core",
        ),
        _all(
            _which("makensis", "wine", "wineserver", "x86_64-w64-mingw32-gcc-posix", "x86_64-w64-mingw32-g++-posix"),
            _files("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
        ),
    ),
    Group(
        # MinGW-w64 cross-compiles the Windows engine (`make engine-windows`); Wine runs its programs.
        # wine64 alone runs 64-bit programs: no i386 architecture (wine32) is needed for the engine.
        WINDOWS_ENGINE_TESTS,
        ("g++-mingw-w64-x86-64-posix", "gcc-mingw-w64-x86-64-posix", "mingw-w64-tools", "wine", "wine64"),
        _which("x86_64-w64-mingw32-g++-posix", "x86_64-w64-mingw32-dlltool", "x86_64-w64-mingw32-objdump", "wine"),
    ),
    Group("the API called from a shell (tests/server/test_serve.py)", ("curl",), _which("curl")),
)

# Not a package: tests that hide the system's Vulkan loader in a private mount namespace.
ROOT_TESTS = "hiding the Vulkan loader (tests/gpu, mount namespaces need root)"
# Not from Debian: the CUDA module compiles longer than CI's budget (packaging/engine/cuda.py).
CUDA_TESTS = "the CUDA module beside the engine (tests/llamacpp/test_cuda_module.py): `make cuda`, about 90 minutes"
# Nor the Windows engine: MinGW cross-compiles it in about 15 minutes on two cores (packaging/engine/build.py --windows; .ci/run builds it).
WINDOWS_ENGINE_BUILT = "the Windows engine's programs under Wine (tests/packaging/test_windows_engine.py): `make engine-windows`, about 15 minutes"


def group(tests: str) -> Group:
    return next(g for g in GROUPS if g.tests == tests)


def packages(groups: list[Group]) -> list[str]:
    return list(dict.fromkeys(p for g in groups for p in g.debian_packages))


def missing_groups() -> list[Group]:
    return [g for g in GROUPS if not g.present()]


def install_line(groups: list[Group]) -> str:
    return "sudo apt-get install " + " ".join(packages(groups))


def skip_report(*, cuda_module_cached: bool, windows_engine_cached: bool = True) -> list[str]:
    """The lines `make test` prints before it starts: which groups will skip here, and why."""
    missing = missing_groups()
    lines = []
    if missing:
        lines.append(f"{len(missing)} test group(s) will skip here; `{install_line(missing)}` enables them:")
        lines += [f"  {g.tests}: {', '.join(g.debian_packages)}" for g in missing]
    if os.geteuid() != 0:
        lines.append(f"will skip, not root: {ROOT_TESTS}")
    if not cuda_module_cached:
        lines.append(f"will skip, not built here: {CUDA_TESTS}")
    if not windows_engine_cached:
        lines.append(f"will skip, not built here: {WINDOWS_ENGINE_BUILT}")
    return lines


def main(argv: list[str]) -> int:
    print(" ".join(packages(missing_groups() if "--missing" in argv else list(GROUPS))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
