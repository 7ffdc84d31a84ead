"""A port in use is answered with the next free one above it (8081 for 8080): a number the user
reads and types, not a random one the system picked (`serve`, `rpc-host` and the Server tab)."""

from __future__ import annotations

import socket

import pytest

from vrampilot.server import PortInUseError
from vrampilot.server.process import NEAR_PORTS, check_port, free_port, port_is_free


def test_a_taken_port_suggests_the_next_free_one() -> None:
    with socket.socket() as taken, socket.socket() as also_taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        if port_is_free("127.0.0.1", port + 1):
            also_taken.bind(("127.0.0.1", port + 1))  # the next one is taken too: the one after
            also_taken.listen(1)
        with pytest.raises(PortInUseError) as info:
            check_port("127.0.0.1", port)
        suggestion = info.value.suggestion
        assert suggestion is not None and port + 1 < suggestion <= port + NEAR_PORTS
        assert port_is_free("127.0.0.1", suggestion)
        assert f"port {suggestion} is free (--port {suggestion})" in str(info.value)
        assert free_port("127.0.0.1", near=port) == suggestion
