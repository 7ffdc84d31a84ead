"""`vrampilot hub download` killed with SIGKILL mid-transfer, then run again: it resumes from the
bytes on disk (none fetched twice), the result is verified by sha256, and until then the partial file
is never offered as a model: not by `hub library`, not by the library code, not loadable.

The fake Hub holds each transfer open after a chosen number of bytes, so the kill lands at a known
point with no timing guess: the test waits (bounded by work, tests/waits.py) for the Hub to say it is holding.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import waits
from tests.clock import FUTURE, PAST, env_at
from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.hub import LocalStatus, list_pending, scan_library
from vrampilot.hub.hf_cache import PART_SUFFIX, RepoCache
from vrampilot.hub.records import verified_sha256

ROOT = Path(__file__).resolve().parents[2]
F16 = "tiny-llama-F16.gguf"
CPU_S = 60.0  # for a child process to start and write a few bytes

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, when: str | None = None) -> dict[str, str]:
    """The child's environment; `when`: its clock says that time (tests/clock.py)."""
    # HOME too: `hub library` also looks for LM Studio and Ollama models there.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home")}
    return env_at(when, env) if when else env


def _cli(tmp_path: Path, *args: str, when: str | None = None) -> subprocess.CompletedProcess[str]:
    return waits.run([sys.executable, "-m", "vrampilot", *args], cpu_s=300, env=_env(tmp_path, when), cwd=ROOT)


def _parts(repo: str) -> list[Path]:
    return sorted(RepoCache.for_repo(repo).blobs.glob(f"*{PART_SUFFIX}"))


def _part(repo: str, source: Path) -> Path:
    """Our part file for `source` (the fake Hub's etag is the file's sha256)."""
    return RepoCache.for_repo(repo).part(hashlib.sha256(source.read_bytes()).hexdigest())


def _kill_at(
    tmp_path: Path, hub: FakeHub, repo: str, filename: str, held: Path, when: str | None = None, at_least: int = 0
) -> int:
    """Start a download, SIGKILL it while the Hub holds the transfer of `held` and at least `at_least`
    bytes are on disk; the bytes left on disk.

    What the Hub sent and the child had not yet written out is lost with it, as in a real kill."""
    hub.holding.clear()
    part = _part(repo, held)
    child = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "hub", "download", repo, filename],
        env=_env(tmp_path, when),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:

        def holding() -> bool:
            assert child.poll() is None, f"the download ended before it was killed: {child.stderr.read()!r}"  # type: ignore[union-attr]  # stderr=PIPE
            return hub.holding.is_set() and part.is_file() and part.stat().st_size >= at_least

        waits.until_true(holding, cpu_s=CPU_S, poll_s=0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()  # SIGKILL cannot be ignored
        assert child.stderr is not None
        child.stderr.close()
    return part.stat().st_size if part.is_file() else 0


def _not_offered(tmp_path: Path, repo: str) -> None:
    """Nothing of `repo` is usable yet: the CLI library, the library code, and loading the part."""
    out = _cli(tmp_path, "hub", "library", "--json")
    assert out.returncode == 0, out.stderr
    listed = [m for m in json.loads(out.stdout)["models"] if m["repo_id"] == repo]
    assert listed and all(m["status"] == "partial" for m in listed), listed
    assert not [m for m in scan_library() if m.repo_id == repo and m.usable]
    for part in _parts(repo):
        shown = _cli(tmp_path, "inspect", str(part))
        assert shown.returncode == 2, shown.stdout
        assert shown.stderr.startswith("vrampilot: ") and len(shown.stderr.splitlines()) == 1, shown.stderr


def _finish(tmp_path: Path, repo: str, filename: str, source: Path, when: str | None = None) -> Path:
    done = _cli(tmp_path, "hub", "download", repo, filename, when=when)
    assert done.returncode == 0, done.stderr
    assert "verified sha256" in done.stderr and "Traceback" not in done.stderr
    path = Path(done.stdout.strip())
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    return path


@pytest.mark.parametrize("sent", [0, 1, 200_017, 2_137_279], ids=lambda n: f"after-{n}")
def test_killed_download_resumes_verified_and_is_never_offered_meanwhile(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path, sent: int
) -> None:
    size = models.tiny_llama.stat().st_size
    assert sent < size  # the last: killed one byte short of the end
    hub.hold_after[F16] = sent
    kept = _kill_at(tmp_path, hub, tiny_repo, F16, models.tiny_llama)
    assert kept <= sent
    _not_offered(tmp_path, tiny_repo)
    assert [p.filename for p in list_pending()] == [F16]

    path = _finish(tmp_path, tiny_repo, F16, models.tiny_llama)
    assert hub.served(F16) == sent + size - kept  # the bytes on disk were kept, none fetched twice
    blob = path.resolve()
    assert verified_sha256(blob) == hashlib.sha256(models.tiny_llama.read_bytes()).hexdigest()
    mine = [m for m in scan_library() if m.repo_id == tiny_repo]
    assert [(m.path, m.status, m.verified) for m in mine] == [(path, LocalStatus.OK, True)]
    assert not _parts(tiny_repo) and not list_pending()


def test_killed_twice_then_damaged_on_disk_is_caught_by_the_checksum(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path
) -> None:
    """Two kills, then a byte of the kept part changed on disk: the resumed download re-reads the part,
    the checksum fails, nothing is offered; the next run starts over and ends verified."""
    size = models.tiny_llama.stat().st_size
    hub.hold_after[F16] = 300_000
    first = _kill_at(tmp_path, hub, tiny_repo, F16, models.tiny_llama, at_least=1)
    hub.hold_after[F16] = 700_000  # counted from where the resumed request starts
    kept = _kill_at(tmp_path, hub, tiny_repo, F16, models.tiny_llama, at_least=first + 1)
    served = hub.served(F16)
    (part,) = _parts(tiny_repo)
    with open(part, "r+b") as fh:  # a byte the second run wrote
        fh.seek(kept - 1)
        byte = fh.read(1)
        fh.seek(kept - 1)
        fh.write(bytes([byte[0] ^ 0xFF]))

    bad = _cli(tmp_path, "hub", "download", tiny_repo, F16)
    assert bad.returncode == 2 and "failed its checksum" in bad.stderr and "Traceback" not in bad.stderr
    assert hub.served(F16) == served + size - kept  # the kept bytes were re-read from disk, not fetched
    mine = [m for m in scan_library() if m.repo_id == tiny_repo]
    assert mine and not [m for m in mine if m.usable]
    assert {m.status for m in mine} == {LocalStatus.QUARANTINED}

    _finish(tmp_path, tiny_repo, F16, models.tiny_llama)
    mine = [m for m in scan_library() if m.repo_id == tiny_repo and m.usable]
    assert len(mine) == 1 and mine[0].verified


def test_split_model_killed_in_its_second_part_is_not_offered_until_whole(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path
) -> None:
    first, second = (f"Q4_0/{p.name}" for p in models.split_parts)
    hub.hold_after[second] = 4096
    kept = _kill_at(tmp_path, hub, tiny_repo, first, models.split_parts[1])
    _not_offered(tmp_path, tiny_repo)
    _finish(tmp_path, tiny_repo, first, models.split_parts[0])
    assert hub.served(second) == 4096 + models.split_parts[1].stat().st_size - kept
    mine = [m for m in scan_library() if m.repo_id == tiny_repo]
    assert len(mine) == 1 and mine[0].usable and mine[0].verified and len(mine[0].parts) == 2


@pytest.mark.parametrize(
    ("started", "resumed"), [(PAST, FUTURE), (FUTURE, PAST)], ids=["1971-then-2100", "2100-then-1971"]
)
def test_killed_download_resumes_across_a_clock_jump(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path, started: str, resumed: str
) -> None:
    """Started at one end of time, killed, resumed at the other: the bytes kept are used, and the
    result is verified and listed like any other."""
    size = models.tiny_llama.stat().st_size
    hub.hold_after[F16] = 1_000_000
    kept = _kill_at(tmp_path, hub, tiny_repo, F16, models.tiny_llama, when=started)
    listed = _cli(tmp_path, "hub", "library", "--json", when=resumed)
    assert [m["status"] for m in json.loads(listed.stdout)["models"] if m["repo_id"] == tiny_repo] == ["partial"]
    path = _finish(tmp_path, tiny_repo, F16, models.tiny_llama, when=resumed)
    assert hub.served(F16) == 1_000_000 + size - kept
    listed = _cli(tmp_path, "hub", "library", "--json", when=started)
    mine = [m for m in json.loads(listed.stdout)["models"] if m["repo_id"] == tiny_repo]
    assert [(m["path"], m["status"], m["verified"]) for m in mine] == [(str(path), "ok", True)]
