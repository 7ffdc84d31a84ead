"""One app per data folder: a second start raises the first window instead of opening a rival.

Two windows on one data folder would write into the same "last chat" and race on the saved KV
states. The first app holds a lock file in the data folder (released by the OS when the process
ends, however it ends) and listens on 127.0.0.1 for a "raise" request carrying a random token it
wrote next to the lock; a second start finds the lock taken, sends the request and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_FILE = "instance.lock"
INFO_FILE = "instance.json"
_REQUEST = b"raise"


class InstanceLock:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = FileLock(str(folder / LOCK_FILE), timeout=0)
        self._server: socket.socket | None = None
        self._token = ""

    def acquire(self) -> bool:
        """True when this process is the first (it now holds the folder)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            return False
        return True

    def serve(self, on_raise: Callable[[], None]) -> None:
        """Listen for raise requests; `on_raise` runs on a background thread (queue it to the GUI)."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        self._server = server
        self._token = secrets.token_hex(16)
        info = {"port": server.getsockname()[1], "token": self._token, "pid": os.getpid()}
        tmp = self.folder / (INFO_FILE + ".tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, self.folder / INFO_FILE)

        def loop() -> None:
            while True:
                try:
                    conn, _addr = server.accept()
                except OSError:
                    return  # closed
                with conn:
                    conn.settimeout(2.0)
                    with contextlib.suppress(OSError):
                        data = conn.recv(256)
                        if data.strip() == _REQUEST + b" " + self._token.encode():
                            on_raise()
                            conn.sendall(b"ok\n")

        threading.Thread(target=loop, name="instance", daemon=True).start()

    def ask_first_to_raise(self, timeout_s: float = 3.0) -> bool:
        """Second start: ask the running app to show its window; False when it did not answer."""
        try:
            info = json.loads((self.folder / INFO_FILE).read_text(encoding="utf-8"))
            with socket.create_connection(("127.0.0.1", int(info["port"])), timeout=timeout_s) as conn:
                conn.sendall(_REQUEST + b" " + str(info["token"]).encode())
                conn.settimeout(timeout_s)
                return conn.recv(16).startswith(b"ok")
        except (OSError, ValueError, KeyError):
            return False

    def release(self) -> None:
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.close()
            self._server = None
            with contextlib.suppress(OSError):
                (self.folder / INFO_FILE).unlink()
        if self._lock.is_locked:
            self._lock.release()
