"""A real HTTP server on 127.0.0.1 that speaks the Hub routes the app and huggingface_hub 2.4 use.

Routes (as huggingface_hub 2.4 requests them; see hf_api.list_models / model_info,
file_download.get_hf_file_metadata and http_get):
  GET  /api/models?search=&filter=gguf&sort=&limit=&expand=...   paginated with a Link header
  GET  /api/models/{repo}?blobs=true, /api/models/{repo}/revision/{rev}?blobs=true
  GET  /api/whoami-v2                                             Authorization: Bearer <token>
  HEAD/GET /{repo}/resolve/{rev}/{file}   LFS files: 302 to the "CDN" with X-Repo-Commit,
                                          X-Linked-Etag (the sha256), X-Linked-Size; gated repos
                                          answer 401/403 with X-Error-Code: GatedRepo
  HEAD/GET /cdn/{sha256}                  the bytes, with Range support, on host `localhost`
                                          (another origin than 127.0.0.1, as a real CDN is:
                                          huggingface_hub does not follow it on HEAD, httpx drops
                                          the Authorization header on GET)

Knobs for failure tests: cut a transfer after N bytes, hold it open after N bytes, corrupt a byte
(same length), throttle, and stop the whole server (optionally in the middle of a transfer). Counters record every body
byte served per file, so tests can prove that resumed bytes were not fetched twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


# Header-only model files are sparse and several GB long; hashing them would take half a minute.
# The fake Hub gives such files a stand-in digest instead (no test downloads them).
HASH_LIMIT_BYTES = 64 * 1024 * 1024


def sha256_of(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if size > HASH_LIMIT_BYTES:
            h.update(b"stand-in digest of a sparse file:%d:" % size + fh.read(1024 * 1024))
            return h.hexdigest()
        while chunk := fh.read(1024 * 1024):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class HubFile:
    name: str
    path: Path
    size: int
    sha256: str


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    commit: str
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    last_modified: datetime = field(default_factory=lambda: datetime(2025, 1, 1, tzinfo=UTC))
    license: str | None = "apache-2.0"
    gguf: dict[str, Any] = field(default_factory=dict)
    granted_tokens: set[str] = field(default_factory=set)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None
    host: str
    bytes_sent: int = 0  # body bytes of a file served in answer to this request


class FakeHub:
    def __init__(self, port: int = 0) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.users: dict[str, str] = {}  # token -> user name
        self.requests: list[Request] = []
        self.bytes_served: dict[str, int] = {}  # repo file name -> body bytes sent
        self.cut_after: dict[str, int] = {}  # file -> cut the next transfer after this many bytes (once)
        self.stop_after: dict[str, int] = {}  # file -> stop the whole server after this many bytes (once)
        # file -> after this many bytes, hold the transfer open without sending more (once), until
        # `release` is set or the server stops: the client sits mid-download for as long as a test needs.
        self.hold_after: dict[str, int] = {}
        self.holding = threading.Event()  # set when a transfer starts to wait
        self.release = threading.Event()
        self.corrupt: set[str] = set()  # files served with one byte changed (same length)
        self.throttle_bps: float | None = None
        self.advertise_xet = False  # answer resolve requests with the headers of a Xet-backed file
        self.page_size = 1000
        self._lock = threading.Lock()
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    # -- content ---------------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, Path],
        *,
        gated: bool = False,
        downloads: int = 0,
        likes: int = 0,
        days_ago: int = 10,
        license: str | None = "apache-2.0",
        gguf: dict[str, Any] | None = None,
    ) -> HubRepo:
        hub_files = {name: HubFile(name, p, p.stat().st_size, sha256_of(p)) for name, p in files.items()}
        commit = hashlib.sha1(repo_id.encode() + b"".join(f.sha256.encode() for f in hub_files.values())).hexdigest()
        repo = HubRepo(
            repo_id=repo_id,
            files=hub_files,
            commit=commit,
            gated=gated,
            downloads=downloads,
            likes=likes,
            last_modified=datetime(2025, 6, 1, tzinfo=UTC) - timedelta(days=days_ago),
            license=license,
            gguf=gguf or {},
        )
        self.repos[repo_id] = repo
        return repo

    def add_user(self, token: str, name: str) -> None:
        self.users[token] = name

    def file_requests(self, name: str) -> list[Request]:
        """GET requests for the bytes of file `name` (at the CDN), in order."""
        sha = next(f.sha256 for r in self.repos.values() for f in r.files.values() if f.name == name)
        return [r for r in self.requests if r.method == "GET" and r.path == f"/cdn/{sha}"]

    def served(self, name: str) -> int:
        with self._lock:
            return self.bytes_served.get(name, 0)

    def _count(self, name: str, n: int) -> None:
        with self._lock:
            self.bytes_served[name] = self.bytes_served.get(name, 0) + n

    # -- server ----------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        server.daemon_threads = True
        self._port = server.server_address[1]  # a restart keeps the port (and HF_ENDPOINT)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection (kept-alive ones too): the Hub is gone."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            conns, self._connections = list(self._connections), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- JSON documents --------------------------------------------------------------------------

    def model_json(self, repo: HubRepo, *, blobs: bool) -> dict[str, Any]:
        siblings = []
        for f in repo.files.values():
            s: dict[str, Any] = {"rfilename": f.name}
            if blobs:
                s.update(
                    size=f.size,
                    blobId=hashlib.sha1(f.sha256.encode()).hexdigest(),
                    lfs={"size": f.size, "sha256": f.sha256, "pointerSize": 134},
                )
            siblings.append(s)
        tags = ["gguf"] + ([f"license:{repo.license}"] if repo.license else [])
        if repo.gguf.get("architecture"):
            tags.append(repo.gguf["architecture"])
        return {
            "_id": repo.commit[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": repo.commit,
            "lastModified": repo.last_modified.isoformat().replace("+00:00", ".000Z"),
            "createdAt": repo.last_modified.isoformat().replace("+00:00", ".000Z"),
            "private": False,
            "disabled": False,
            "gated": "manual" if repo.gated else False,
            "downloads": repo.downloads,
            "likes": repo.likes,
            "tags": tags,
            "library_name": "gguf",
            "gguf": repo.gguf or None,
            "siblings": siblings,
        }


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.hub._lock:
            self.hub._connections.add(self.connection)

    def finish(self) -> None:
        with self.hub._lock:
            self.hub._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    # -- plumbing --------------------------------------------------------------------------------

    def _record(self) -> None:
        self._request = Request(
            self.command,
            self.path,
            self.headers.get("Range"),
            self.headers.get("Authorization"),
            self.headers.get("Host", ""),
        )
        self.hub.requests.append(self._request)

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._json({"error": message}, status, headers)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.startswith("Bearer ") else None

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        self._record()
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        try:
            if path == "/api/models":
                return self._search(query)
            if path == "/api/whoami-v2":
                return self._whoami()
            if path.startswith("/api/models/"):
                return self._model_info(path[len("/api/models/") :], query)
            if path.startswith("/cdn/"):
                return self._cdn(path[len("/cdn/") :])
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self._resolve(m.group(1), m.group(2), m.group(3))
            self._error(404, None, "not found")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- API -------------------------------------------------------------------------------------

    def _search(self, query: dict[str, list[str]]) -> None:
        hub = self.hub
        text = (query.get("search") or [""])[0].lower()
        repos = [r for r in hub.repos.values() if text in r.repo_id.lower()]
        sort = (query.get("sort") or [""])[0]
        keys = {
            "downloads": lambda r: r.downloads,
            "likes": lambda r: r.likes,
            "lastModified": lambda r: r.last_modified,
            "createdAt": lambda r: r.last_modified,
        }
        if sort in keys:
            repos.sort(key=keys[sort], reverse=True)
        limit = int((query.get("limit") or [str(hub.page_size)])[0])
        cursor = int((query.get("cursor") or ["0"])[0])
        page_size = min(limit, hub.page_size)
        page = repos[cursor : cursor + page_size]
        headers = {}
        if cursor + page_size < len(repos):
            q = "&".join(f"{k}={quote(v)}" for k, vs in query.items() if k != "cursor" for v in vs)
            headers["Link"] = f'<{hub.endpoint}/api/models?{q}&cursor={cursor + page_size}>; rel="next"'
        self._json([hub.model_json(r, blobs=False) for r in page], headers=headers)

    def _whoami(self) -> None:
        token = self._token()
        if token is None or token not in self.hub.users:
            return self._error(401, None, "Invalid credentials in Authorization header")
        self._json({"type": "user", "name": self.hub.users[token], "auth": {"type": "access_token"}})

    def _model_info(self, rest: str, query: dict[str, list[str]]) -> None:
        m = re.match(r"^([^/]+/[^/]+)(?:/revision/(.+))?$", rest)
        repo = self.hub.repos.get(m.group(1)) if m else None
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        rev = m.group(2) if m else None
        if rev not in (None, "main", repo.commit):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        self._json(self.hub.model_json(repo, blobs="blobs" in query))

    def _resolve(self, repo_id: str, rev: str, filename: str) -> None:
        hub = self.hub
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if rev not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        commit = {"X-Repo-Commit": repo.commit}
        f = repo.files.get(filename)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found", commit)
        if repo.gated:
            token = self._token()
            if token is None:
                return self._error(
                    401,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                    "to access it. Please log in.",
                )
            if token not in repo.granted_tokens:
                return self._error(
                    403,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                    f"Visit {hub.endpoint}/{repo_id} to ask for access.",
                )
        cdn = f"http://localhost:{hub.port}/cdn/{f.sha256}"
        xet = {}
        if hub.advertise_xet:
            xet = {
                "X-Xet-Hash": hashlib.sha256(f.sha256.encode()).hexdigest(),
                "Link": f'<{hub.endpoint}/api/models/{repo_id}/xet-read-token/{repo.commit}>; rel="xet-auth"',
            }
        self._send(
            302,
            b"",
            {
                **commit,
                **xet,
                "Location": cdn,
                "ETag": f'"{hashlib.sha1(f.sha256.encode()).hexdigest()}"',
                "X-Linked-Etag": f'"{f.sha256}"',
                "X-Linked-Size": str(f.size),
            },
        )

    # -- the CDN ---------------------------------------------------------------------------------

    def _cdn(self, sha: str) -> None:
        hub = self.hub
        f = next((f for r in hub.repos.values() for f in r.files.values() if f.sha256 == sha), None)
        if f is None:
            return self._error(404, None, "no such object")
        start, end, status = 0, f.size - 1, 200
        rng = self.headers.get("Range")
        if rng:
            m = _RANGE_RE.match(rng.strip())
            if not m:
                return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
            start = int(m.group(1))
            end = min(int(m.group(2)), f.size - 1) if m.group(2) else f.size - 1
            if start >= f.size:
                return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{sha}"')
        self.send_header("Content-Type", "application/octet-stream")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with hub._lock:
            cut = hub.cut_after.pop(f.name, None)
            stop = hub.stop_after.pop(f.name, None)
            hold = hub.hold_after.pop(f.name, None)
        limit = cut if cut is not None else stop
        corrupt_at = f.size // 2 if f.name in hub.corrupt else -1
        sent = 0
        with open(f.path, "rb") as fh:
            fh.seek(start)
            pos = start
            while sent < length:
                if hold is not None and sent >= hold:
                    hold = None
                    hub.holding.set()
                    while hub.running and not hub.release.wait(0.05):
                        pass
                n = min(64 * 1024, length - sent)
                if hold is not None:
                    n = min(n, hold - sent)
                if limit is not None:
                    n = min(n, limit - sent)
                    if n <= 0:
                        return self._drop(stop is not None)
                data = bytearray(fh.read(n))
                if not data:
                    data = bytearray(n)  # sparse header-only files read as zeros anyway
                if pos <= corrupt_at < pos + len(data):
                    data[corrupt_at - pos] ^= 0xFF
                self.wfile.write(data)
                self.wfile.flush()
                sent += len(data)
                pos += len(data)
                hub._count(f.name, len(data))
                self._request.bytes_sent += len(data)
                if hub.throttle_bps:
                    time.sleep(len(data) / hub.throttle_bps)
        if limit is not None and sent >= limit and sent < f.size - start:
            self._drop(stop is not None)

    def _drop(self, stop_server: bool) -> None:
        """Close the socket mid-body: the client sees a short read, as when a connection is cut."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        if stop_server:
            threading.Thread(target=self.hub.stop, daemon=True).start()
