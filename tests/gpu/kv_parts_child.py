"""Run with VRAMPILOT_SOFTWARE_GPU=1: write a DeepSeek-V4 or V3.2 fixture, and for each setting in
the JSON argument plan its memory for this machine's Vulkan device (memory/breakdown.py's per-device split),
load it for real, check every cache part against llama.cpp's log (testkit/kv_checks.py) and print
the plan's KV bytes per device next to llama.cpp's KV and compressor-state buffers per device."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from testkit.gguf_models import write_deepseek4, write_deepseek32
from testkit.kv_checks import DraftSettings, UnifiedSettings, assert_dsa_parts_match, assert_dsv4_parts_match
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.target import TargetRequest, resolve_target

# llama.cpp's per-buffer lines of a cache: `<dev> KV buffer size` and `<dev> DSV4 <x> state buffer size`
BUFFER_RE = re.compile(r"^\w+:\s+(\S+) (?:KV|DSV4 \w+ state) buffer size =")
WRITERS = {
    "deepseek4": (write_deepseek4, assert_dsv4_parts_match),
    "deepseek32": (write_deepseek32, assert_dsa_parts_match),
}


def main() -> int:
    arch, shape, cases, folder = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), Path(sys.argv[4])
    write, check = WRITERS[arch]
    path = write(folder / f"{arch}.gguf", **shape)
    spec = load_model_spec(path)
    target = resolve_target(TargetRequest(), detect_machine())
    if not target.gpus:
        print(json.dumps({"error": "no Vulkan device in the target"}))
        return 0
    device = target.gpus[0].buffer_name
    out = []
    for case in cases:
        settings = DraftSettings(**case) if case.get("spec_type") == "mtp" else UnifiedSettings(**case)
        mem = memory_breakdown(spec, settings, target)
        m = measure_allocations(path, settings, dry_run=False)
        measured = dict(m.kv_buffer_bytes)
        log = list(m.log)
        if m.draft is not None:  # the MTP draft context's cache buffers, beside the main context's
            for name, size in m.draft.kv_buffer_bytes.items():
                measured[name] = measured.get(name, 0) + size
            log += m.draft.log
        try:
            check(spec, settings, m)
            parts_error = None
        except AssertionError as exc:
            parts_error = repr(exc)[:2000]
        lines: dict[str, int] = {}
        for line in log:
            if b := BUFFER_RE.match(line):
                lines[b[1]] = lines.get(b[1], 0) + 1
        out.append(
            {
                "settings": case,
                "parts_error": parts_error,
                "refused": m.refused,
                "plan_device_kv": mem.per_device[0].kv_bytes if mem.per_device else 0,
                "plan_host_kv": mem.host.kv_bytes,
                "plan_total_kv": mem.kv.total_bytes,
                "device_layers": list(mem.device_layers(0)),
                "measured": measured,
                "draft_bytes": mem.kv.draft.bytes if mem.kv.draft else 0,
                "buffer_lines": lines,
            }
        )
    print(json.dumps({"device": device, "n_layer": spec.n_layer, "cases": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
