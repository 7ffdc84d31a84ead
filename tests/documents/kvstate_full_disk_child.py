"""Run in a private mount namespace with a 2 MiB tmpfs (see test_kvstate_faults.py).

argv: the tmpfs folder, the model. Saves a small good state there, fills the disk almost to the
brim, grows the cache and saves again; prints one JSON line with the error and the files left.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

from testkit.machines import cpu_machine
from vrampilot.documents import KvStateStore
from vrampilot.engine import Engine, EngineError, Message, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target


def main() -> int:
    folder, model = Path(sys.argv[1]), Path(sys.argv[2])
    p = plan(
        load_model_spec(model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=512, n_threads=1, n_threads_batch=1),
    )
    engine = Engine()
    engine.load(p)
    store = KvStateStore(folder)
    engine.chat([Message("user", "Hi")], SamplingParams(temperature=0.0, max_tokens=2, seed=1))
    store.save(engine, "good")
    free = shutil.disk_usage(folder).free
    with contextlib.suppress(OSError), open(folder / "filler.bin", "wb") as f:
        f.write(b"\0" * max(0, free - 96 * 1024))
    engine.chat(
        [Message("user", "Tell me a long story about a dragon and a castle. " * 4)],
        SamplingParams(temperature=0.0, max_tokens=8, seed=1),
    )
    error = ""
    try:
        store.save(engine, "good")
    except EngineError as exc:
        error = str(exc)
    (folder / "filler.bin").unlink()
    files = sorted(f.name for f in folder.iterdir())
    print(json.dumps({"error": error, "files": files}))
    engine.unload()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
