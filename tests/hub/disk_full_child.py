"""Run inside a private mount namespace with a small tmpfs as HF_HOME (see test_disk_full.py).

argv: mode ("precheck" or "fills-up"), repo, file. Prints one JSON line with what happened.
"fills-up": when the first bytes arrive, another "program" fills the disk; the download must stop
with a clear message and keep what it has; after the filler is removed it resumes to the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

from vrampilot.hub import DownloadProgress, DownloadState, HubError, download_model
from vrampilot.hub.hf_cache import RepoCache


def main() -> int:
    mode, repo, filename = sys.argv[1:4]
    home = Path(os.environ["HF_HOME"])
    filler = home / "filler.bin"
    out: dict[str, object] = {}

    def fill(p: DownloadProgress) -> None:
        if mode == "fills-up" and p.state is DownloadState.DOWNLOADING and not filler.exists():
            free = shutil.disk_usage(home).free
            with contextlib.suppress(OSError), open(filler, "wb") as fh:
                fh.write(b"\0" * max(0, free - 64 * 1024))

    try:
        download_model(repo, filename, on_progress=fill)
        out["first"] = "done"
    except HubError as exc:
        out["first"] = type(exc).__name__
        out["message"] = str(exc)
    parts = list(RepoCache.for_repo(repo).blobs.glob("*.vrampilot.part")) if home.exists() else []
    out["part_bytes"] = parts[0].stat().st_size if parts else None
    if mode == "fills-up":
        filler.unlink(missing_ok=True)
        result = download_model(repo, filename)
        out["second"] = result.status
        out["path"] = str(result.path)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
