"""The address `serve` announces and checks health on, for each way a user can write --host."""

from __future__ import annotations

import pytest

from vrampilot.server import ServerConfig


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:8080"),
        # Short forms llama-server's getaddrinfo binds to every interface as well (`serve --host 0`
        # announced http://0:8080/v1).
        ("0", "http://127.0.0.1:8080"),
        ("0.0", "http://127.0.0.1:8080"),
        ("::", "http://127.0.0.1:8080"),
        ("0:0::0", "http://127.0.0.1:8080"),
        ("[::]", "http://127.0.0.1:8080"),
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("localhost", "http://localhost:8080"),
        ("192.168.1.20", "http://192.168.1.20:8080"),
        # An IPv6 address goes in brackets in a URL.
        ("::1", "http://[::1]:8080"),
    ],
)
def test_base_url(host: str, url: str) -> None:
    assert ServerConfig(host=host, port=8080).base_url == url
