"""A Hub-compatible test server on 127.0.0.1, for the real huggingface_hub client.

It speaks what trainbox uses: file resolve (HEAD/GET with Range), repo creation, and the
upload protocol (preupload, LFS batch with basic transfer, PUT, NDJSON commit). It keeps a
log of every request, and injects faults: a status code with an ``X-Error-Code``, 429/5xx,
a connection dropped after some bytes, and a throttled body rate.
"""

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

GOOD_TOKEN = "hf_testtoken_good"
READ_TOKEN = "hf_testtoken_read"  # may read everything public and private, write nothing
RESOLVE = re.compile(r"^/(?:(datasets|models)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


@dataclass
class Repo:
    private: bool = False
    gated: bool = False
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    hashes: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def sha256(self, name: str) -> str:
        """A file's sha256, computed once per content, when first asked."""
        data = self.files[name]
        cached = self.hashes.get(name)
        if cached is None or cached[0] is not data:
            cached = self.hashes[name] = (data, hashlib.sha256(data).hexdigest())
        return cached[1]

    def commit(self, files: dict[str, bytes]) -> str:
        self.files.update(files)
        digest = hashlib.sha1(f"{len(self.commits)}:{sorted(self.files)}".encode()).hexdigest()
        self.commits.append(digest)
        return digest


@dataclass
class Fault:
    """What to do to the next ``times`` requests whose path contains ``path``."""

    path: str
    status: int | None = None
    error_code: str | None = None
    drop_after: int | None = None  # bytes of body sent before the connection is cut
    stall_after: int | None = None  # bytes of body sent before the server goes silent
    times: int = 1
    methods: tuple[str, ...] = ("GET", "HEAD", "POST", "PUT")


class Hub:
    """The server. ``with Hub() as hub:`` starts it; ``hub.url`` is its endpoint."""

    def __init__(self, rate: float | None = None) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self.rate = rate  # bytes per second for file bodies; None is unthrottled
        self.upload_rate: float | None = None  # bytes per second for uploaded files
        self.uploads: dict[str, bytes] = {}
        self.served: list[tuple[str, int, int]] = []  # file GETs: (name, first byte, bytes sent)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "Hub":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        kind: str = "datasets",
        private: bool = False,
        gated: bool = False,
    ) -> str:
        """Create a repo holding ``files``; return its commit."""
        repo = self.repos.setdefault(f"{kind}/{repo_id}", Repo(private=private, gated=gated))
        return repo.commit(files)

    def downloads(self, name: str) -> list[str]:
        """The GET requests that fetched a file named ``name``."""
        return [path for method, path in self.requests if method == "GET" and path.endswith(name)]

    def _fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.path in path and method in fault.methods and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _reply(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
                self.send_response(status)
                for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, status: int, payload: object, headers: dict | None = None) -> None:
                body = json.dumps(payload).encode()
                self._reply(status, body, {"Content-Type": "application/json", **(headers or {})})

            def _error(self, status: int, code: str | None, message: str = "") -> None:
                headers = {"X-Error-Code": code} if code else {}
                if message:
                    headers["X-Error-Message"] = message
                self._json(status, {"error": message or code or "error"}, headers)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def _authorized(self, repo: Repo) -> bool | None:
                """None: a bad token; False: no access (a gated repo's terms are never
                accepted here); True: access."""
                auth = self.headers.get("Authorization", "")
                if auth and auth not in (f"Bearer {GOOD_TOKEN}", f"Bearer {READ_TOKEN}"):
                    return None
                return not repo.gated and (bool(auth) or not repo.private)

            def _dispatch(self) -> None:
                path = unquote(self.path.split("?", 1)[0])
                hub.requests.append((self.command, path))
                fault = hub._fault(self.command, path)
                if fault and fault.status:
                    if self.command in ("POST", "PUT"):
                        self._body()
                    headers = {"Retry-After": "0"} if fault.status == 429 else {}
                    headers |= {"X-Error-Code": fault.error_code} if fault.error_code else {}
                    self._reply(fault.status, b"fault", headers)
                    return
                if match := RESOLVE.match(path):
                    self._resolve(*match.groups(), fault)
                elif match := re.match(r"^/api/(datasets|models)/(.+)/paths-info/[^/]+$", path):
                    self._paths_info(f"{match.group(1)}/{match.group(2)}", self._body())
                elif self.command in ("POST", "PUT") and not self._may_write():
                    self._body()
                elif path == "/api/repos/create":
                    self._create(json.loads(self._body()))
                elif match := re.match(r"^/api/(datasets|models)/(.+)/preupload/[^/]+$", path):
                    self._preupload(json.loads(self._body()))
                elif match := re.match(
                    r"^/(?:(datasets)/)?(.+)\.git/info/lfs/objects/batch$", path
                ):
                    self._lfs_batch(json.loads(self._body()))
                elif match := re.match(r"^/upload/([0-9a-f]{64})$", path):
                    hub.uploads[match.group(1)] = body = self._body()
                    if hub.upload_rate:  # a slow uplink: the answer waits as the bytes would
                        time.sleep(len(body) / hub.upload_rate)
                    self._reply(200)
                elif match := re.match(r"^/api/(datasets|models)/(.+)/commit/[^/]+$", path):
                    self._commit(f"{match.group(1)}/{match.group(2)}", self._body())
                else:
                    self._error(404, None, f"no route for {self.command} {path}")

            def _may_write(self) -> bool:
                """Writes need the good token: a bad one is 401, the read-only one 403."""
                auth = self.headers.get("Authorization", "")
                if auth == f"Bearer {GOOD_TOKEN}" or self.path.startswith("/upload/"):
                    return True
                if auth == f"Bearer {READ_TOKEN}":
                    self._error(403, None, "You don't have the rights to create or write here")
                else:
                    self._error(401, None, "Invalid credentials in Authorization header")
                return False

            def _resolve(
                self, kind: str | None, repo_id: str, revision: str, name: str, fault: Fault | None
            ) -> None:
                repo = hub.repos.get(f"{kind or 'models'}/{repo_id}")
                if repo is None:
                    self._error(404 if self.headers.get("Authorization") else 401, "RepoNotFound")
                    return
                access = self._authorized(repo)
                if access is None:
                    self._error(401, None, "Invalid credentials in Authorization header")
                    return
                if not access:
                    self._error(
                        401 if repo.private else 403, "GatedRepo" if repo.gated else "RepoNotFound"
                    )
                    return
                if revision not in ("main", *repo.commits):
                    self._error(404, "RevisionNotFound")
                    return
                if name not in repo.files:
                    self._error(404, "EntryNotFound")
                    return
                data, sha = repo.files[name], repo.sha256(name)
                start, end = 0, len(data) - 1
                status = 200
                if ranged := re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "")):
                    start = int(ranged.group(1))
                    end = int(ranged.group(2) or end)
                    status = 206
                headers = {
                    "Content-Length": str(end - start + 1),
                    "X-Repo-Commit": repo.commits[-1],
                    "ETag": f'"{sha}"',
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "Accept-Ranges": "bytes",
                }
                if status == 206:
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command == "HEAD":
                    return
                sent = self._send(memoryview(data)[start : end + 1], fault)
                hub.served.append((name, start, sent))

            def _send(self, body: memoryview, fault: Fault | None) -> int:
                """Send ``body`` (throttled, or cut short by ``fault``); return the bytes sent."""
                drop = fault.drop_after if fault else None
                stall = fault.stall_after if fault else None
                cut = min((n for n in (drop, stall) if n is not None), default=len(body))
                chunk, started, sent = 1 << 20, time.monotonic(), 0
                while sent < min(cut, len(body)):
                    piece = body[sent : min(sent + chunk, cut)]
                    try:
                        self.wfile.write(piece)
                        self.wfile.flush()
                    except OSError:  # the client went away
                        return sent
                    sent += len(piece)
                    if hub.rate:
                        ahead = sent / hub.rate - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)
                if sent == drop:
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif sent == stall:
                    time.sleep(3600)  # a stuck server: the connection stays open and silent
                return sent

            def _create(self, spec: dict) -> None:
                kind = f"{spec.get('type', 'model')}s"
                repo_id = (
                    f"{spec['organization']}/{spec['name']}"
                    if spec.get("organization")
                    else spec["name"]
                )
                key = f"{kind}/{repo_id}"
                if key in hub.repos:  # the real Hub names the existing repo in its 409
                    self._json(
                        409, {"error": "You already created this repo", "url": f"{hub.url}/{key}"}
                    )
                    return
                hub.repos[key] = Repo(private=bool(spec.get("private")))
                hub.repos[key].commit({})
                self._json(200, {"url": f"{hub.url}/{key}", "name": repo_id})

            def _paths_info(self, key: str, body: bytes) -> None:
                """What the Hub holds at these paths: git blob id, and LFS sha256 (every
                upload here is LFS)."""
                repo = hub.repos.get(key)
                if repo is None or not self._authorized(repo):
                    self._error(404, "RepoNotFound")
                    return
                wanted = parse_qs(body.decode()).get("paths", [])
                found = []
                for name in wanted:
                    if (data := repo.files.get(name)) is None:
                        continue
                    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                    lfs = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                           "pointerSize": 134}  # fmt: skip
                    found.append({"type": "file", "path": name, "size": len(data),
                                  "oid": blob, "lfs": lfs})  # fmt: skip
                self._json(200, found)

            def _preupload(self, spec: dict) -> None:
                files = [
                    {"path": f["path"], "uploadMode": "lfs", "shouldIgnore": False}
                    for f in spec.get("files", [])
                ]
                self._json(200, {"files": files})

            def _lfs_batch(self, spec: dict) -> None:
                objects = [
                    {
                        "oid": o["oid"],
                        "size": o["size"],
                        "authenticated": True,
                        "actions": {"upload": {"href": f"{hub.url}/upload/{o['oid']}"}},
                    }
                    for o in spec.get("objects", [])
                ]
                self._json(200, {"transfer": "basic", "objects": objects})

            def _commit(self, key: str, body: bytes) -> None:
                repo = hub.repos.get(key)
                if repo is None:
                    self._error(404, "RepoNotFound")
                    return
                files = {}
                for line in body.decode().splitlines():
                    entry = json.loads(line)
                    value = entry.get("value", {})
                    if entry["key"] == "lfsFile":
                        files[value["path"]] = hub.uploads[value["oid"]]
                    elif entry["key"] == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                oid = repo.commit(files)
                self._json(200, {"commitUrl": f"{hub.url}/{key}/commit/{oid}", "commitOid": oid})

            do_GET = do_HEAD = do_POST = do_PUT = _dispatch

        return Handler
