"""One llama-server process: started with the planned argv, watched until /health answers, logged,
and stopped, never left behind.

No orphans: on Linux the child gets SIGKILL when the thread that started it ends (prctl
PR_SET_PDEATHSIG; start it from a thread that lives as long as the app: the GUI or the main
thread), on Windows it joins a job object that kills it when the app's last handle closes, and on
every platform `stop()` runs at exit. A port in use is found before starting, with a free one to
suggest; llama-server's own refusals reach the user as it wrote them (the last log lines).
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from vrampilot.errors import UserError

LOG_LINES_KEPT = 2000
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# How long a server asked to stop (Ctrl+C, SIGTERM, the Stop button) may take before it is killed.
# llama-server shuts down in well under a second when it can run at all: one that takes this long
# hangs (stopped by SIGSTOP or a debugger, stuck in a driver), and the user's stop must still stop.
STOP_GRACE_S = 10.0


class PortInUseError(UserError):
    def __init__(self, host: str, port: int, suggestion: int | None) -> None:
        hint = f"; port {suggestion} is free (--port {suggestion})" if suggestion else ""
        super().__init__(f"port {port} on {host} is in use by another program{hint}")
        self.host, self.port, self.suggestion = host, port, suggestion


_ABORT = re.compile(r"\S+\.(?:c|cpp|h|cu):\d+: (.+)$")  # ggml_abort's "file.cpp:547: message"
# llama-server's words when another program took the port between our check and its bind.
_BIND = re.compile(r"couldn't bind HTTP server socket, hostname: (\S+), port: (\d+)")


class ServerExited(UserError):
    """llama-server ended before (or while) serving; the message carries its last log lines, and
    llama.cpp's own reason first when it aborted ("Remote RPC server crashed ...")."""

    def __init__(self, code: int | None, lines: Sequence[str]) -> None:
        tail = "\n".join(lines[-12:]) if lines else "(no output)"
        reason = _reason(lines)
        head = f"llama-server exited with status {code}" + (f" ({reason})" if reason else "")
        super().__init__(f"{head}:\n{tail}")
        self.code, self.lines, self.reason = code, list(lines), reason
        self.port_taken = any(_BIND.search(line) for line in lines)


def _reason(lines: Sequence[str]) -> str | None:
    """llama.cpp's own one-line reason in a log: an abort's message, or a port it could not bind."""
    for line in reversed(lines):
        if m := _ABORT.search(line):
            return m.group(1)
        if m := _BIND.search(line):
            return f"port {m.group(2)} on {m.group(1)} is in use by another program"
    return None


def exit_status(code: int | None) -> int:
    """A command's exit status for a tool that ended by itself: never 0, 128+N for signal N (as a
    shell reports it; a negative status would reach the shell as 256-N)."""
    if code is None or code == 0:
        return 1
    return 128 - code if code < 0 else code


def killed_text(code: int | None, binary: str = "llama-server") -> str | None:
    """ "<binary> was killed by <signal> (the likely cause)" when a signal ended it, else None."""
    if code is None or code >= 0:
        return None
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
    why = {
        signal.SIGKILL: " (the system may have run out of memory)",
        # A mapped model file that shrank under the server: its next read of the weights faults.
        getattr(signal, "SIGBUS", signal.SIGKILL): " (its model file was probably truncated or rewritten while "
        "loaded; start it again to load the file as it is now)",
    }.get(-code, "")
    return f"{binary} was killed by {name}{why}"


def exit_text(code: int | None, lines: Sequence[str], binary: str = "llama-server") -> str:
    """Why a tool is gone, in one line: the signal that ended it, or its status and last word
    (llama.cpp's own reason when it gave one). The CLI and the Server tab say it the same way."""
    if code != -signal.SIGABRT and (killed := killed_text(code, binary)):  # an abort has llama.cpp's reason
        return killed
    reason = _reason(lines)
    return f"{binary} exited with status {code}: " + (reason or (lines[-1] if lines else "no output"))


@dataclass(frozen=True)
class ServerConfig:
    """Where a llama-server listens and how it is started (vrampilot.server.launch)."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    # Served as the user's API (`vrampilot serve`, the Server tab): the model named by its file's
    # stem in /v1/models, and /metrics on. A private server (a chat across RPC hosts, a benchmark)
    # needs neither.
    public: bool = False
    on_log: Callable[[str], None] | None = field(default=None, compare=False, repr=False)  # each log line
    binary: str = "llama-server"  # the bundled tool that runs the plan
    # A Jinja chat template replacing the model's own (llama-server's --chat-template-file): for a
    # model whose template does not describe tools, which llama-server then never shows the model.
    chat_template_file: Path | None = None

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK

    @property
    def base_url(self) -> str:
        """Where a client on this machine reaches the server: one bound to every interface
        (0.0.0.0, ::, or a short form llama-server's getaddrinfo reads the same: 0, 0.0) on
        loopback; an IPv6 address in brackets, as a URL writes it."""
        host = "127.0.0.1" if binds_every_interface(self.host) else self.host.strip("[]")
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"


def binds_every_interface(host: str) -> bool:
    """Whether `host` is the unspecified address, in any spelling inet_aton or IPv6 takes."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        pass
    try:
        return socket.inet_aton(host) == bytes(4)
    except OSError:
        return False


def api_key_problem(key: str) -> str | None:
    """Why `key` cannot work as an API key, or None. Clients send it in an HTTP header, and HTTP
    drops the blanks at a header's ends: with a key of blanks, or one that begins or ends with a
    blank, llama-server would start and no client could ever send the key it wants."""
    if not key.strip():
        return "is blank" if key else "is empty"
    if key != key.strip():
        return "begins or ends with a blank, which HTTP drops from the header that carries it"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        return "holds a control character, which no HTTP header can carry"
    return None


def lan_address() -> str:
    """This machine's address on its network, as other devices would reach it (the interface of
    the default route; connecting a UDP socket sends nothing). The host name when there is none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.254.254.254", 1))
            address = str(s.getsockname()[0])
        except OSError:
            address = ""
    return address if address and not address.startswith("127.") else socket.gethostname()


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # The same options llama-server's listener uses: a port in TIME_WAIT counts as free.
        if sys.platform != "win32":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


NEAR_PORTS = 100  # how far above a taken port to look for a free one before asking the system


def free_port(host: str = "127.0.0.1", near: int | None = None) -> int:
    """A free port on `host`: with `near`, the first free one above it (8081 for a taken 8080, which
    a user reads and types easily), else, or when those are all taken, one the system picks."""
    for port in range(near + 1, min(near + NEAR_PORTS, 65535) + 1) if near is not None else ():
        if port_is_free(host, port):
            return port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> PortInUseError:
    """The error for a port another program holds, with a free port to suggest when `host` is
    loopback (what `serve` and `rpc-host` print; the Server tab picks one on any host)."""
    return PortInUseError(host, port, free_port(host, near=port) if host in LOOPBACK else None)


def check_port(host: str, port: int) -> None:
    """PortInUseError, before starting a server, when `port` on `host` is taken."""
    if not port_is_free(host, port):
        raise port_in_use(host, port)


def _parent_death_hook() -> Callable[[], None]:
    """What the child runs between fork and exec on Linux: the kernel sends it SIGKILL when the
    thread that started it ends (the app's GUI thread, the CLI's main thread), however that ends.
    SIGKILL, not SIGTERM: as a killed app's threads end one by one the kernel can send the signal
    more than once, and llama-server takes a second SIGTERM as "exit now", calling exit() from its
    signal handler, which deadlocked on malloc's lock when it came during a free() (1 killed
    `serve` in about 30 left its llama-server hung). An orphan has nobody to answer: nothing is lost.
    prctl is looked up here, in the parent: after a fork in a threaded program the child must not
    load anything (dlopen's lock may be held by a thread that no longer exists there)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before prctl: nobody would stop this one
            os._exit(1)

    return hook


class _WindowsJob:
    """A job object that kills its processes when the app's handle to it closes (the app exits)."""

    def __init__(self) -> None:
        import ctypes
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only
        kernel32.CreateJobObjectW.restype = wintypes.HANDLE
        kernel32.CreateJobObjectW.argtypes = [wintypes.LPVOID, wintypes.LPCWSTR]
        kernel32.SetInformationJobObject.argtypes = [wintypes.HANDLE, ctypes.c_int, wintypes.LPVOID, wintypes.DWORD]
        kernel32.AssignProcessToJobObject.argtypes = [wintypes.HANDLE, wintypes.HANDLE]
        self._k = kernel32
        self.handle = kernel32.CreateJobObjectW(None, None)
        if not self.handle:
            raise OSError(ctypes.get_last_error(), "CreateJobObjectW failed")  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only

        class _Basic(ctypes.Structure):
            _fields_ = [
                ("PerProcessUserTimeLimit", ctypes.c_int64),
                ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", wintypes.DWORD),
                ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t),
                ("ActiveProcessLimit", wintypes.DWORD),
                ("Affinity", ctypes.c_size_t),
                ("PriorityClass", wintypes.DWORD),
                ("SchedulingClass", wintypes.DWORD),
            ]

        class _Io(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in ("R", "W", "O", "RT", "WT", "OT")]

        class _Extended(ctypes.Structure):
            _fields_ = [
                ("Basic", _Basic),
                ("Io", _Io),
                ("ProcessMemoryLimit", ctypes.c_size_t),
                ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t),
                ("PeakJobMemoryUsed", ctypes.c_size_t),
            ]

        info = _Extended()
        info.Basic.LimitFlags = 0x2000  # JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        kernel32.SetInformationJobObject(self.handle, 9, ctypes.byref(info), ctypes.sizeof(info))

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        self._k.AssignProcessToJobObject(self.handle, int(proc._handle))  # type: ignore[attr-defined]  # Popen's Windows process handle, private and win32-only


_job: _WindowsJob | None = None


class ServerProcess:
    """llama-server (or ggml-rpc-server) as a child process with its log kept in memory."""

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        *,
        cwd: str | None = None,
        on_log: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.on_log = on_log
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES_KEPT)
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._asked_at: float | None = None  # monotonic time it was first asked to end
        self.grace_s = STOP_GRACE_S  # how long it may take to end once asked
        self.killed = False  # it did not end when asked and was killed

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        global _job
        kwargs: dict[str, object] = {}
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = _parent_death_hook()
        if sys.platform == "win32":
            kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]  # a win32-only constant, used on Windows only
        else:
            # Its own process group: a terminal's Ctrl+C reaches only this process, which passes
            # it on once (`interrupt`); a second SIGINT makes llama-server exit(1) from its
            # signal handler without shutting down.
            kwargs["process_group"] = 0
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            **kwargs,  # type: ignore[call-overload]  # kwargs holds only creationflags (Windows)
        )
        if sys.platform == "win32":
            with contextlib.suppress(OSError, AttributeError):
                _job = _job or _WindowsJob()
                _job.add(self.proc)
        self._reader = threading.Thread(target=self._read, name="server-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            with self._lock:
                self._lines.append(line)
            if self.on_log is not None:
                with contextlib.suppress(Exception):
                    self.on_log(line)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def wait_ready(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        cancel: threading.Event | None = None,
        api_key: str | None = None,
    ) -> None:
        """Until GET /health says the model is loaded. ServerExited when the process ends first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                raise InterruptedError("cancelled")
            if not self.running:
                self._drain()
                raise ServerExited(self.returncode, self.lines())
            if health(base_url, api_key=api_key) == 200 and self._listens_on(base_url):
                return
            time.sleep(0.1)
        raise ServerExited(None, [*self.lines(), f"(no answer on {base_url}/health after {timeout_s:.0f} s)"])

    def _listens_on(self, base_url: str) -> bool:
        """Whether this process holds the port /health answered on. Another program on the port
        (a second serve that bound it first) answers too, while this one is failing to bind."""
        port = int(base_url.rstrip("/").rpartition(":")[2])

        def listeners(sockets: list[Any]) -> list[Any]:
            return [s for s in sockets if s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port]

        try:
            if listeners(psutil.Process(self.pid).net_connections(kind="inet")):
                return True
        except (psutil.Error, OSError, ValueError):
            return True  # cannot tell (no permission, no pid): /health is all there is
        try:
            # Wine gives every socket to no process (owner 0 in the system's table, none in the
            # process's own list): there a listener that nobody owns is all that can be known.
            return {s.pid for s in listeners(psutil.net_connections(kind="inet"))} == {0}
        except (psutil.Error, OSError, ValueError):
            return False  # its own list is known and holds no listener on the port

    def wait_exit(self, timeout_s: float) -> int | None:
        """Its exit status once it has ended (its log read to the end), None if it still runs."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._drain()
        return code

    def _drain(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=2)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Ask it to end (SIGTERM / Ctrl+Break; not again when `interrupt` already asked: a second
        signal makes llama-server exit without shutting down), then kill it when it has not ended
        `timeout_s` (its `grace_s`) after it was first asked; returns its exit status. `killed`
        says whether it had to be killed."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else None
        if self._asked_at is None:
            self._ask(signal.SIGTERM if sys.platform != "win32" else signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]  # a win32-only constant, used on Windows only
        assert self._asked_at is not None
        try:
            grace_s = self.grace_s if timeout_s is None else timeout_s
            proc.wait(max(0.0, self._asked_at + grace_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            proc.wait(5)
        self._drain()
        return proc.returncode

    def interrupt(self) -> None:
        """Pass on the user's Ctrl+C (the server shuts down cleanly on it)."""
        if self.running and self._asked_at is None:
            self._ask(signal.SIGINT if sys.platform != "win32" else signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]  # a win32-only constant, used on Windows only

    def kill(self) -> None:
        """End it now (SIGKILL; a stopped process dies of it too), without waiting: a hung server
        after its grace time, or a user who asked twice."""
        if self.running and self.proc is not None:
            self.killed = True
            with contextlib.suppress(OSError):
                self.proc.kill()

    def _ask(self, sig: int) -> None:
        assert self.proc is not None
        self._asked_at = time.monotonic()
        try:
            self.proc.send_signal(sig)
            # A stopped process (SIGSTOP, a debugger's, a terminal's Ctrl+Z) keeps a signal pending
            # until it runs again, and would hang the stop: it is continued to take it.
            if sys.platform != "win32":
                self.proc.send_signal(signal.SIGCONT)
        except (OSError, SystemError):
            # On Windows a Ctrl+Break reaches only a process that shares a console with this one:
            # from the windowed app, or under Wine, GenerateConsoleCtrlEvent fails (and CPython
            # raises SystemError for it, not OSError), and `serve` died in its Ctrl+C handler.
            # Nothing can ask it then: it is ended, as it would be after its grace time.
            if sys.platform == "win32":
                with contextlib.suppress(OSError):
                    self.proc.terminate()


def health(base_url: str, *, api_key: str | None = None, timeout_s: float = 2.0) -> int | None:
    """HTTP status of GET /health (200: ready, 503: still loading), None when nothing answers."""
    host_port = base_url.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout_s)
    try:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        conn.request("GET", "/health", headers=headers)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def is_alive(pid: int) -> bool:
    """Whether a process with this id still runs (for tests and the app's own bookkeeping)."""
    if sys.platform == "win32":
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only
        if not handle:
            return False
        code = ctypes.c_ulong()
        ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only
        ctypes.windll.kernel32.CloseHandle(handle)  # type: ignore[attr-defined]  # Windows-only ctypes API; typeshed has it on win32 only
        return code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (dead, not yet reaped by its parent) counts as gone. So does an id that now names a
    # thread of another process: Linux gives threads ids from the processes' range, kill(id, 0)
    # reaches them, and on a busy machine a dead server's id was a thread's within seconds.
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        if fields.get("Tgid", str(pid)).strip() != str(pid):
            return False
        return not fields.get("State", "").strip().startswith("Z")
    return True
