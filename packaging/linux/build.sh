#!/usr/bin/env bash
# Build the Linux packages into dist/ (run by `make package`):
#   dist/vrampilot/                              the PyInstaller onedir bundle
#   dist/vrampilot_<version>_<arch>.deb          /opt/vrampilot + /usr/bin link, menu entry, .gguf type
#   dist/VRAM_Pilot-<version>-<arch>.AppImage    one file, runs on a double-click (after chmod +x)
#
# VARIANT=cuda builds the CUDA variant into dist/cuda/ instead (`make package-cuda`): the same app
# plus llama.cpp's CUDA module (packaging/engine/cuda.py, cached by `make cuda`) and NVIDIA's cudart
# and cuBLAS with their licences; package vrampilot-cuda, VRAM_Pilot-CUDA-<version>-<arch>.AppImage.
#
# Environment: PY (python of the venv, default .venv/bin/python), APPIMAGE=0 (skip the AppImage),
# APPIMAGETOOL=/path/to/appimagetool (use the reference tool and runtime instead of ours),
# DEB_COMPRESS (zstd|xz|gzip|none; default zstd: 3 s here against 6 min for xz, 180 MB against 156 MB;
# dpkg reads zstd since Debian 12 and Ubuntu 21.10, older than the glibc the bundle needs anyway), DEB_MAINTAINER, SKIP_PYINSTALLER=1 (reuse dist/vrampilot).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
HERE=packaging/linux
ICONS=packaging/icons
PY=${PY:-.venv/bin/python}
VARIANT=${VARIANT:-default}
VERSION=$("$PY" -c 'import vrampilot; print(vrampilot.__version__)')
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
case "$ARCH" in amd64) AI_ARCH=x86_64 ;; arm64) AI_ARCH=aarch64 ;; *) AI_ARCH=$ARCH ;; esac
case "$VARIANT" in
default)
    BUILD=build/package DIST=dist PKG=vrampilot OTHER_PKG=vrampilot-cuda
    APPIMAGE_OUT="$DIST/VRAM_Pilot-${VERSION}-${AI_ARCH}.AppImage"
    CUDA_LINE=" On NVIDIA GPUs the vrampilot-cuda package adds llama.cpp's CUDA backend."
    ;;
cuda)
    BUILD=build/package-cuda DIST=dist/cuda PKG=vrampilot-cuda OTHER_PKG=vrampilot
    APPIMAGE_OUT="$DIST/VRAM_Pilot-CUDA-${VERSION}-${AI_ARCH}.AppImage"
    CUDA_LINE=" This is the CUDA variant: llama.cpp's CUDA backend (CUDA 13.0) for NVIDIA GPUs, which needs
 the NVIDIA driver 580 or newer; without it the app runs through Vulkan or on the CPU."
    ;;
*) echo "packaging: VARIANT=$VARIANT: expected default or cuda" >&2; exit 2 ;;
esac
export VRAMPILOT_VARIANT=$VARIANT
DEB="$DIST/${PKG}_${VERSION}_${ARCH}.deb"

step() { printf '\n== %s (t=%ds)\n' "$*" "$SECONDS"; }

# --- build tools from Debian's archive -------------------------------------------------------
# dpkg-deb comes with dpkg; the AppImage needs mksquashfs and, for our runtime, a C compiler and
# the static squashfuse/fuse3/compression libraries.
need_pkgs=()
command -v dpkg-deb >/dev/null || need_pkgs+=(dpkg)
if [ "${APPIMAGE:-1}" != 0 ]; then
    command -v mksquashfs >/dev/null || need_pkgs+=(squashfs-tools)
    if [ -z "${APPIMAGETOOL:-}" ] && ! command -v appimagetool >/dev/null; then
        command -v gcc >/dev/null || need_pkgs+=(gcc)
        for pair in libsquashfuse-dev:/usr/include/squashfuse/ll.h libfuse3-dev:/usr/include/fuse3/fuse_lowlevel.h \
            libzstd-dev:libzstd.a liblzma-dev:liblzma.a liblz4-dev:liblz4.a liblzo2-dev:liblzo2.a zlib1g-dev:libz.a; do
            pkg=${pair%%:*} file=${pair#*:}
            case "$file" in /*) [ -e "$file" ] ;; *) [ -n "$(find /usr/lib /usr/lib64 -name "$file" -print -quit 2>/dev/null)" ] ;; esac ||
                need_pkgs+=("$pkg")
        done
    fi
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        step "installing build tools: ${need_pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
    else
        echo "packaging: missing build tools; run: sudo apt-get install -y ${need_pkgs[*]}" >&2
        exit 1
    fi
fi

# --- 1. the PyInstaller bundle -----------------------------------------------------------------
if [ "${SKIP_PYINSTALLER:-0}" != 1 ] || [ ! -x "$DIST/vrampilot/vrampilot" ]; then
    step "PyInstaller onedir -> $DIST/vrampilot"
    "$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$DIST" --workpath "$BUILD/pyinstaller" \
        packaging/vrampilot.spec
fi
BUNDLE="$DIST/vrampilot"
[ -x "$BUNDLE/vrampilot" ] || { echo "packaging: $BUNDLE/vrampilot was not built" >&2; exit 1; }
# PyInstaller links top-level names to libraries it found in subfolders, also to the ones the spec
# dropped afterwards: remove those dangling links.
find "$BUNDLE" -xtype l -print -delete | sed 's/^/removed dangling link: /'
# llama-cpp-python installs each library twice (libllama.so, libllama.so.0): keep one, link the other.
for lib in "$BUNDLE"/_internal/llama_cpp/lib/*.so; do
    if [ -f "$lib.0" ] && [ ! -L "$lib" ] && cmp -s "$lib" "$lib.0"; then ln -sf "$(basename "$lib").0" "$lib"; fi
done
[ ! -e "$BUNDLE/_internal/torch" ] || { echo "packaging: torch ended up in the bundle" >&2; exit 1; }

# Desktop integration files, shared by the .deb (under /) and the AppDir (under usr/).
install_share() { # $1 = prefix directory that gets usr/share/...
    local share="$1/usr/share"
    install -Dm644 "$HERE/vrampilot.desktop" "$share/applications/vrampilot.desktop"
    install -Dm644 "$HERE/vrampilot-mime.xml" "$share/mime/packages/vrampilot.xml"
    install -Dm644 "$ICONS/vrampilot.svg" "$share/icons/hicolor/scalable/apps/vrampilot.svg"
    for size in 16 24 32 48 64 128 256 512; do
        install -Dm644 "$ICONS/vrampilot-$size.png" "$share/icons/hicolor/${size}x${size}/apps/vrampilot.png"
    done
}

# --- 2. the .deb ---------------------------------------------------------------------------------
step "Debian package -> $DEB"
STAGE="$BUILD/deb/root"
rm -rf "$BUILD/deb"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/doc/$PKG"
cp -a "$BUNDLE" "$STAGE/opt/vrampilot"
ln -s /opt/vrampilot/vrampilot "$STAGE/usr/bin/vrampilot"
install_share "$STAGE"
cat >"$STAGE/usr/share/doc/$PKG/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: VRAM Pilot
License: MIT
Comment: /opt/vrampilot bundles Python, Qt (PySide6, LGPLv3), llama.cpp (MIT), NumPy (BSD) and
 the SmolLM2-135M-Instruct model (Apache-2.0) with their own licenses.
EOF
if [ "$VARIANT" = cuda ]; then
    cat >>"$STAGE/usr/share/doc/$PKG/copyright" <<EOF
 The CUDA variant also carries NVIDIA's CUDA runtime (libcudart) and cuBLAS (libcublas,
 libcublasLt) from NVIDIA's PyPI wheels, under NVIDIA's license: see
 /opt/vrampilot/_internal/llama_cpp/lib/cuda-licences/.
EOF
fi
install -m755 "$HERE/deb/postinst" "$HERE/deb/postrm" "$STAGE/DEBIAN/"
# Depends: the system libraries the bundle does not carry (PyInstaller leaves out glibc, GL/EGL and
# some libxcb-*; Qt's X11 plugin needs libxcb-cursor0, see vrampilot/ui/launch.py). The glibc floor is
# the newest GLIBC_x.y symbol version any bundled ELF file asks for.
GLIBC_MIN=$(find "$BUNDLE" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null |
    grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
cat >"$STAGE/DEBIAN/control" <<EOF
Package: $PKG
Version: $VERSION
Architecture: $ARCH
Maintainer: ${DEB_MAINTAINER:-VRAM Pilot maintainers <maintainers@vrampilot.invalid>}
Installed-Size: $(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
Depends: libc6 (>= ${GLIBC_MIN:-2.31}), libgl1, libegl1, libfontconfig1, libxkbcommon0, libxkbcommon-x11-0, libxcb1, libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, libxcb-image0, libxcb-render-util0, libxcb-shape0, libxcb-randr0, libxcb-xkb1, libwayland-client0, libwayland-cursor0, libwayland-egl1
Recommends: libvulkan1, mesa-vulkan-drivers
Conflicts: $OTHER_PKG
Replaces: $OTHER_PKG
Section: science
Priority: optional
Description: plan, run and explain local GGUF models on the GPU you have
 VRAM Pilot reads a GGUF model's header, plans GPU offload and context size for this machine,
 explains the plan, and runs the model with llama.cpp. The package carries its own Python,
 Qt and llama.cpp under /opt/vrampilot and a small embedded model, so it works offline.
 llama.cpp runs on the CPU, and on AMD, Intel and NVIDIA GPUs through their Vulkan drivers
 (libvulkan1 and the driver; without them it runs on the CPU): see "vrampilot doctor".
$CUDA_LINE
EOF
mkdir -p "$DIST"
rm -f "$DEB"
dpkg-deb --root-owner-group -Z"${DEB_COMPRESS:-zstd}" --build "$STAGE" "$DEB" >/dev/null
echo "built $DEB ($(du -h "$DEB" | cut -f1))"

# --- 3. the AppImage -----------------------------------------------------------------------------
if [ "${APPIMAGE:-1}" = 0 ]; then
    echo "AppImage skipped (APPIMAGE=0)"
    exit 0
fi
step "AppImage -> $APPIMAGE_OUT"
APPDIR="$BUILD/VRAMPilot.AppDir"
rm -rf "$APPDIR"
mkdir -p "$APPDIR/opt"
cp -al "$(realpath "$BUNDLE")" "$APPDIR/opt/vrampilot" 2>/dev/null || cp -a "$BUNDLE" "$APPDIR/opt/vrampilot"
install -m755 "$HERE/appimage/AppRun" "$APPDIR/AppRun"
install_share "$APPDIR"
install -m644 "$HERE/vrampilot.desktop" "$APPDIR/vrampilot.desktop"
install -m644 "$ICONS/vrampilot-256.png" "$APPDIR/vrampilot.png"
ln -s vrampilot.png "$APPDIR/.DirIcon"
rm -f "$APPIMAGE_OUT"

tool=${APPIMAGETOOL:-$(command -v appimagetool || true)}
if [ -n "$tool" ]; then
    # The reference tool (and its runtime), where one was downloaded by hand or in CI.
    ARCH=$AI_ARCH "$tool" --no-appstream "$APPDIR" "$APPIMAGE_OUT"
else
    # Our runtime (runtime.c), statically linked so the AppImage runs on other distributions.
    RUNTIME="$BUILD/appimage-runtime"
    gcc -O2 -Wall -static -o "$RUNTIME" "$HERE/appimage/runtime.c" \
        -I/usr/include/squashfuse -I/usr/include/fuse3 \
        -lsquashfuse_ll -lsquashfuse -lfuse3 -lzstd -llzma -llz4 -llzo2 -lz -lpthread -ldl 2> >(grep -v -e dlopen -e 'fuse.c.o' >&2)
    strip "$RUNTIME"
    mksquashfs "$APPDIR" "$BUILD/appimage.squashfs" -root-owned -noappend -comp zstd -quiet -no-progress \
        -processors "$(nproc)" >/dev/null
    cat "$RUNTIME" "$BUILD/appimage.squashfs" >"$APPIMAGE_OUT"
    printf 'AI\002' | dd of="$APPIMAGE_OUT" bs=1 seek=8 conv=notrunc status=none # AppImage type 2 magic
    rm -f "$BUILD/appimage.squashfs"
fi
chmod 755 "$APPIMAGE_OUT"
echo "built $APPIMAGE_OUT ($(du -h "$APPIMAGE_OUT" | cut -f1))"
step "done"
