"""Several processes opening one data folder at the same moment: a new database, an older schema
to migrate, the documents database. Every start must succeed (36 of 100 failed before: "database
is locked" at the WAL switch, "table chats already exists", "duplicate column name: backend")."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from vrampilot.storage.db import _MIGRATIONS, connect

ROOT = Path(__file__).resolve().parents[2]
N = 8
# Each child imports what it needs, says so, then blocks reading the start pipe: the parent closes
# its end once every child is ready, and the end of file wakes them all at once. (They spun on the
# clock before: 8 children x 1.5 s x 6 rounds of both cores burnt, taken from the other tests.)
CHILD = """
import os, sys
from pathlib import Path
from vrampilot.storage.db import connect
from vrampilot.documents.store import DocumentStore
print("ready", flush=True)
os.read(int(sys.argv[3]), 1)
conn = connect(Path(sys.argv[1]))
conn.execute("INSERT INTO chats (title, created_at, updated_at) VALUES ('x', 0, 0)")
conn.close()
DocumentStore(Path(sys.argv[2])).close()
print("ok")
"""


def _start_together(db: Path, docs: Path) -> list[subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start_r, start_w = os.pipe()
    cmd = [sys.executable, "-c", CHILD, str(db), str(docs), str(start_r)]
    try:
        procs = [
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(start_r,)
            )
            for _ in range(N)
        ]
        for p in procs:  # every child imported and waiting (a child that died says why below)
            assert p.stdout is not None
            p.stdout.readline()
    finally:
        os.close(start_r)
        os.close(start_w)  # the start: every child's read returns at once
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.parametrize("rounds", [3])
def test_many_starts_on_a_new_database_all_succeed(tmp_path: Path, rounds: int) -> None:
    for r in range(rounds):
        db, docs = tmp_path / f"new-{r}.sqlite3", tmp_path / f"docs-{r}.sqlite3"
        results = _start_together(db, docs)
        failed = [p.stderr.strip().splitlines()[-1] for p in results if p.returncode != 0]
        assert not failed, failed
        conn = connect(db)
        assert conn.execute("SELECT COUNT(*) FROM chats").fetchone()[0] == N
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()


def test_many_starts_migrating_an_older_schema_all_succeed(tmp_path: Path) -> None:
    for r in range(3):
        db, docs = tmp_path / f"old-{r}.sqlite3", tmp_path / f"docs-{r}.sqlite3"
        old = sqlite3.connect(db, isolation_level=None)
        for script in _MIGRATIONS[:2]:  # what a build before the backend column wrote
            old.executescript(script)
        old.execute("PRAGMA user_version = 2")
        old.close()
        results = _start_together(db, docs)
        failed = [p.stderr.strip().splitlines()[-1] for p in results if p.returncode != 0]
        assert not failed, failed
        conn = connect(db)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(chats)")]
        assert columns.count("backend") == 1
        conn.close()
