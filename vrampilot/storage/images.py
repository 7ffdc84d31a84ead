"""Images kept with chats: copied into the data folder by content hash, so a chat's images survive
the originals being moved or deleted, and one picture attached twice is stored once.

The rules for what counts as an image the engine can take (its size and its first bytes) live here,
below the engine and the window, so the window refuses at attach time what the engine would refuse
at reply time, in the same words. Decoding is not checked here (no imaging library below the UI):
the window decodes for the thumbnail, the engine's mtmd decodes for the model.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vrampilot.errors import UserError
from vrampilot.paths import data_dir

# mtmd's helper decodes an image into RGB in memory (stb_image): larger files are refused first.
MAX_IMAGE_BYTES = 32 * 1024 * 1024
# The formats stb_image decodes that the engine hands over, by their first bytes. Anything else is
# refused: mtmd would otherwise try it as audio, then as video by launching ffprobe.
IMAGE_SUFFIXES = {
    b"\x89PNG\r\n\x1a\n": ".png",
    b"\xff\xd8\xff": ".jpg",
    b"GIF87a": ".gif",
    b"GIF89a": ".gif",
    b"BM": ".bmp",
}
# The file names the window treats as images (dropped, or offered by the file dialog); the bytes
# decide in the end (a .png that is text is refused as "not an image").
IMAGE_FILE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
IMAGES_DIR = "images"
# Said of an image whose first bytes are right but whose pixels cannot be decoded (cut short, or
# damaged), by the window when it makes the thumbnail and by the engine when mtmd decodes it.
DAMAGED = "the image is damaged or cut short (it could not be decoded)"


class ImageFileError(UserError):
    """An image that cannot be kept or shown to the model: the message says which and why."""


def too_large(name: str, n_bytes: int) -> str | None:
    if n_bytes <= MAX_IMAGE_BYTES:
        return None
    return f"{name}: {n_bytes / 2**20:.1f} MiB is too large (at most {MAX_IMAGE_BYTES // 2**20} MiB)"


def image_problem(name: str, data: bytes) -> str | None:
    """Why the engine would refuse these bytes before decoding them, in one line; None: it takes them."""
    big = too_large(name, len(data))
    if big:
        return big
    if image_suffix(data) is None:
        return f"{name}: not an image this engine reads (PNG, JPEG, GIF or BMP)"
    return None


def image_suffix(data: bytes) -> str | None:
    return next((suffix for magic, suffix in IMAGE_SUFFIXES.items() if data.startswith(magic)), None)


def read_image(path: str | Path) -> bytes:
    """An image file's bytes, refused in one line when missing, unreadable, too large or no image."""
    p = Path(path)
    try:
        big = too_large(p.name, p.stat().st_size)  # before reading 2 GiB of something else
        if big:
            raise ImageFileError(big)
        data = p.read_bytes()
    except OSError as exc:
        raise ImageFileError(f"{p.name}: cannot read the image ({exc.strerror or exc})") from None
    problem = image_problem(p.name, data)
    if problem:
        raise ImageFileError(problem)
    return data


@dataclass(frozen=True)
class StoredImage:
    """One image of a message: its content hash names the copy in the data folder."""

    sha256: str
    suffix: str  # ".png", ".jpg", ...: from the file's first bytes, not its name
    name: str  # the file's name when it was attached, for the user

    @property
    def file_name(self) -> str:
        return f"{self.sha256}{self.suffix}"

    def to_dict(self) -> dict[str, str]:
        return {"sha256": self.sha256, "suffix": self.suffix, "name": self.name}

    @staticmethod
    def from_dict(d: dict[str, str]) -> StoredImage:
        return StoredImage(str(d["sha256"]), str(d["suffix"]), str(d.get("name", "")))


class ImageStore:
    """The data folder's images/ (or `root`), one file per distinct content."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or data_dir() / IMAGES_DIR

    def path(self, image: StoredImage) -> Path:
        return self.root / image.file_name

    def add(self, path: str | Path) -> StoredImage:
        """Copy the image at `path` in (once per content); refused in one line when it is none."""
        p = Path(path)
        data = read_image(p)
        image = StoredImage(hashlib.sha256(data).hexdigest(), image_suffix(data) or "", p.name)
        target = self.path(image)
        if target.is_file() and target.stat().st_size == len(data):
            return image  # the same picture, attached before
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: a crash never leaves a half image under the hash's name.
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise ImageFileError(f"could not keep {p.name} in {self.root}: {exc.strerror or exc}") from None
        return image
