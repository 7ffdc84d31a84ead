"""A plan's vision projector against what llama-server's clip.cpp printed while loading it: shared
by the Vulkan tests (tests/gpu/projector_child.py) and bench/projector.py."""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.planner.memory.projector import ClipBuffers, clip_buffers
from vrampilot.planner.plan import Plan
from vrampilot.server import ServerConfig, free_port
from vrampilot.server.launch import prepare, wait_ready


@dataclass(frozen=True)
class ServedProjector:
    argv: tuple[str, ...]  # the plan's own llama-server line (without the -lv 4 added to read it)
    printed: ClipBuffers


def serve_and_read(p: Plan, timeout_s: float = 300) -> ServedProjector:
    """Start the bundled llama-server with the plan's argv until it is ready, and read clip.cpp's
    load report (logged at -lv 4: the backend it chose, its model size, each compute buffer)."""
    lines: list[str] = []
    config = ServerConfig("127.0.0.1", free_port(), None, on_log=lines.append)
    server = prepare(p, config)  # what `vrampilot serve` starts
    argv = tuple(server.argv)
    server.argv += ["-lv", "4"]
    server.start()
    try:
        wait_ready(server, config, timeout_s=timeout_s)
    finally:
        server.stop()
    return ServedProjector(argv, clip_buffers(lines))
