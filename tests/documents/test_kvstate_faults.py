"""Damaged saved KV states are never used as if good: every kind of damage seen in fault injection
(a flipped byte, a zeroed 4 KiB page, appended bytes, a save cut short, a NaN in the cache) is
refused, removed, reported in one line, and the chat goes on by reading the document again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from testkit.machines import cpu_machine
from tests.documents.writers import long_report
from vrampilot.documents import DocumentSet, KvStateStore, Tokenizer, extract
from vrampilot.documents.kvstate import STALE_PART_S
from vrampilot.engine import Engine, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, seed=1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def doc_plan(embedded_model: Path) -> Plan:
    spec = load_model_spec(embedded_model)
    return plan(
        spec,
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=1024, n_threads=1, n_threads_batch=1),
    )


@pytest.fixture(scope="module")
def engine(doc_plan: Plan) -> Iterator[Engine]:
    e = Engine()
    e.load(doc_plan)
    yield e
    e.unload()


@pytest.fixture(scope="module")
def saved(engine: Engine, doc_plan: Plan, tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good state file and its record, made once from a real chat about a document."""
    src = tmp_path_factory.mktemp("doc") / "review.md"
    src.write_text(long_report(n_sections=2).markdown)
    docs = DocumentSet(tokenizer.count)
    docs.attach(extract(src))
    composed = docs.compose("", [], "Who was the chief engineer?", mode="full", n_ctx=1024)
    engine.chat(composed.messages, GREEDY)
    root = tmp_path_factory.mktemp("good")
    KvStateStore(root).save(engine, "good")
    return root


def _copy(saved: Path, tmp_path: Path) -> KvStateStore:
    root = tmp_path / "states"
    shutil.copytree(saved, root)
    store = KvStateStore(root)
    shutil.copy(root / "good.llstate", store.path("k"))
    shutil.copy(root / "good.json", store.record_path("k"))
    record = json.loads(store.record_path("k").read_text())
    record["key"] = "k"
    store.record_path("k").write_text(json.dumps(record))
    return store


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _zero_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    start = (len(data) // 3) & ~4095
    data[start : start + 4096] = bytes(4096)
    path.write_bytes(bytes(data))


def _append(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(b"\0" * 100)


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1100])  # what a save short by ~1.1 KB left behind


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_flip, "checksum mismatch"),
        (_zero_page, "checksum mismatch"),
        (_append, "bytes were saved"),
        (_cut, "bytes were saved"),
    ],
)
def test_damaged_files_are_refused_before_llama_cpp_sees_them(
    engine: Engine, saved: Path, tmp_path: Path, damage: Callable[[Path], None], reason: str
) -> None:
    store = _copy(saved, tmp_path)
    damage(store.path("k"))
    before = engine.cached_tokens()
    restored = store.restore(engine, "k")
    assert restored is not None and restored.tokens == 0 and reason in restored.dropped
    assert not store.path("k").exists() and not store.record_path("k").exists()
    assert engine.cached_tokens() == before  # untouched: nothing half-restored


def test_a_nan_in_the_cache_is_caught_on_the_first_step(engine: Engine, saved: Path, tmp_path: Path) -> None:
    """The damage happened before the save (the record vouches for the file as written), so only
    trying the cache can tell: the last token is evaluated again over it and its logits checked."""
    store = _copy(saved, tmp_path)
    path = store.path("k")
    data = bytearray(path.read_bytes())
    # The file ends with the last layer's V cells: write f16 NaNs (0x7e00) over its last 4 KiB.
    nan = np.full(2048, np.float16(np.nan)).tobytes()
    data[-len(nan) :] = nan
    path.write_bytes(bytes(data))
    from vrampilot.documents.kvstate import _sha256

    record = json.loads(store.record_path("k").read_text())
    record["sha256"] = _sha256(path)
    store.record_path("k").write_text(json.dumps(record))
    assert store.check("k") == ""
    restored = store.restore(engine, "k")
    assert restored is not None and restored.tokens == 0 and "invalid numbers" in restored.dropped
    assert engine.tokens_in_cache == 0  # emptied, never left with the poisoned cells
    # The chat goes on: the next reply is computed afresh and is not empty.
    from vrampilot.engine import Message

    again = engine.chat([Message("user", "Say hello.")], GREEDY)
    assert again.text.strip()


def test_a_good_state_still_restores(engine: Engine, saved: Path, tmp_path: Path) -> None:
    store = _copy(saved, tmp_path)
    restored = store.restore(engine, "k")
    assert restored is not None and not restored.dropped and restored.tokens > 0


def test_killed_saves_leave_parts_that_are_counted_and_cleaned(saved: Path, tmp_path: Path) -> None:
    root = tmp_path / "states"
    shutil.copytree(saved, root)
    stale = root / "old.llstate.part"
    stale.write_bytes(b"\0" * 10_000)
    os.utime(stale, (0, 0))  # long ago: a save that was killed
    recent = root / "new.llstate.part"
    recent.write_bytes(b"\0" * 10_000)  # a save that may still be running: not removed at start
    os.utime(recent, (os.stat(recent).st_mtime - 60,) * 2)
    store = KvStateStore(root)
    assert not stale.exists() and recent.exists()
    assert STALE_PART_S > 60
    # Parts count against the cap like states, oldest first; the state just saved stays.
    (root / "good.llstate").touch()
    store.max_bytes = (root / "good.llstate").stat().st_size + 100
    store.prune(keep=root / "good.llstate")
    assert not recent.exists() and (root / "good.llstate").exists()


def test_a_save_cut_short_by_a_full_disk_is_refused(tmp_path: Path, embedded_model: Path) -> None:
    """A 2 MiB tmpfs (private mount namespace): llama.cpp's save comes up short without noticing;
    the engine sees the size, removes the file and says why; nothing replaces a good state."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux with unshare(1)")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    child = Path(__file__).with_name("kvstate_full_disk_child.py")
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    script = f'mount -t tmpfs -o size=2m tmpfs "{mnt}" || exit 77; exec "{sys.executable}" "{child}" "$@"'
    proc = subprocess.run(
        [*prefix, "sh", "-c", script, "child", str(mnt), str(embedded_model)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "VRAMPILOT_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if proc.returncode == 77 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] and "not saved completely" in out["error"] and "disk" in out["error"]
    assert out["files"] == ["good.json", "good.llstate"]  # the cut save left nothing, the good one stays
