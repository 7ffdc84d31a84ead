"""The engine on a model file that changes on disk while it is loaded (see test_file_changed.py).

argv[1]: a copy of the embedded model; argv[2]: what happens to it after the first reply:
"truncate" (cut to its header, in place), "replace" (another file renamed over it) or "delete".
Prints one RESULT line of JSON. A SIGBUS ends this process, which is why it is a child.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.engine.conftest import GREEDY, make_plan
from vrampilot.engine import Engine, EngineError, Message
from vrampilot.gguf import load_model_spec, read_gguf
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine


def main(path: Path, change: str) -> dict[str, object]:
    engine = Engine()
    found = detect_measured_machine()
    engine.load(
        make_plan(load_model_spec(path), resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed))
    )
    ask = [Message("user", "Name a colour.")]
    first = engine.chat(ask, GREEDY).text
    if change == "truncate":
        header = read_gguf(path).data_offset_bytes
        os.truncate(path, header)
    elif change == "replace":
        other = path.with_name("other.gguf")
        other.write_bytes(b"not this model")
        os.replace(other, path)
    elif change == "delete":
        path.unlink()
    out: dict[str, object] = {"first": bool(first)}
    try:
        # A new question (not the cached prefix alone): llama.cpp reads the weights again.
        out["second"] = bool(engine.chat([*ask, Message("assistant", first), Message("user", "Another?")], GREEDY).text)
    except EngineError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["loaded_after"] = engine.loaded
    engine.unload()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]), sys.argv[2])), flush=True)
