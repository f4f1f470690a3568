"""A Hub-compatible test server on 127.0.0.1, for the real huggingface_hub client.

It speaks what trainbox uses: file resolve (HEAD/GET with Range), paths-info, repo creation,
and both upload protocols: Xet, which huggingface_hub uses whenever hf_xet is installed (as in
the image), and LFS basic transfer (preupload, LFS batch, PUT), then the NDJSON commit. It keeps
a log of every request, one snapshot of the files per commit, and injects faults: a status
code with an ``X-Error-Code``, 429/5xx, a silent wait before the answer (``hang``), a
connection dropped or stalled after some body bytes, a throttled body rate (per connection:
each response is paced on its own, as one CDN stream is), faults that last
some seconds instead of some requests, and a closed port (``Hub.refuse``).

What it does as the real Hub does, and where that was checked (read in huggingface_hub 2.4.0
source, 2026-11-30, unless said otherwise):

- Preupload: the client POSTs ``{"files": [{"path", "sample", "size"}]}``, ``sample`` being the
  base64 of the file's first 512 bytes (``_commit_api.py::_fetch_upload_modes``;
  ``lfs.py::UploadInfo``), and accepts only ``"uploadMode": "lfs" | "regular"`` per file
  (``_commit_api.py::_validate_preupload_info``); it uploads empty files as regular whatever the
  answer (``_fetch_upload_modes``). The answer here comes from ``upload_mode`` below. A missing
  repo is a 404 ``RepoNotFound`` at preupload already (huggingface_hub's
  ``tests/test_hf_api.py::test_create_commit_repo_does_not_exist`` expects the 404 on the
  preupload URL; read in the huggingface_hub repository, 2026-11-30).
- Commit: NDJSON lines ``header`` (``summary``, ``description``, ``parentCommit``), ``file``
  (``content`` base64, ``path``, ``encoding``), ``lfsFile`` (``path``, ``algo``, ``oid``,
  ``size``), ``deletedFile``/``deletedFolder`` (``_commit_api.py::_prepare_commit_payload``); the
  answer needs ``commitUrl`` and ``commitOid`` (``_commit_api.py::_send_commit``). A
  ``parentCommit`` that is not the head is refused with 412 and the message the real Hub gives,
  "The branch was updated since you opened this page. Please refresh and try again." (asserted
  by huggingface_hub's ``tests/test_hf_api.py::test_create_commit_conflict``, which runs against
  the Hub's staging server; read in the huggingface_hub repository, 2026-11-30). The message is
  sent both as ``X-Error-Message`` and as the JSON ``error``; ``utils/_http.py::_format`` puts
  either into the exception's text, and which of the two the real Hub uses is not known here.
- Model cards: the real Hub parses a committed ``README.md``'s YAML block (the regex
  huggingface_hub keeps "in sync" with the server, ``repocard.py``'s ``REGEX_YAML_BLOCK``) and
  refuses a commit whose metadata it finds invalid with 400 "Invalid metadata in README.md";
  huggingface_hub 2.4.0's ``create_commit`` asks ``POST /api/validate-yaml`` first
  (``hf_api.py::_validate_yaml``: 400 with ``{"errors": [{"message"}]}`` becomes a
  ``ValueError`` raised from the ``BadRequestError``; huggingface_hub issue 1927 and pull
  request 1934). Checked here (``card_errors``), a subset of the real Hub's rules: YAML that
  parses into a mapping; ``license`` one of the Hub's identifiers (a subset of its list,
  ``LICENSES``); ``model-index`` a list of entries with ``name`` and ``results``, each result
  with ``task.type``, ``dataset.type`` and ``dataset.name``, and ``metrics`` with ``type`` and
  ``value``. Its other rules (languages, base_model existence, ...) are not checked.
- Resolve: ``get_hf_file_metadata`` (``file_download.py``) takes ``X-Repo-Commit``, then
  ``X-Linked-Etag`` or else ``ETag``, then ``X-Linked-Size`` or else ``Content-Length``; the
  ``hf_hub_download`` docstring says "An object's ETag is: its git-sha1 if stored in git, or its
  sha256 if stored in git-lfs". So an LFS file answers ``ETag``/``X-Linked-Etag`` = sha256 and
  ``X-Linked-Size``; a regular file answers ``ETag`` = git blob sha1 and no ``X-Linked-*``. An
  ``EntryNotFound`` carries ``X-Repo-Commit`` (``file_download.py::_get_metadata_or_catch_error``
  reads it to cache the file's absence).
- paths-info: ``RepoFile.__init__`` (``hf_api.py``) reads ``path``, ``size``, ``oid`` (the git
  blob id: for an LFS file that of its pointer file) and, for LFS files only, ``lfs`` with
  ``oid`` (sha256), ``size``, ``pointerSize``; ``HfApi.get_paths_info`` POSTs the form fields
  ``paths`` and ``expand`` to ``/api/{type}s/{id}/paths-info/{revision}``.
- Revisions: every commit keeps a snapshot; ``main`` is the newest, a full commit sha serves that
  commit's bytes, with that sha in ``X-Repo-Commit``.
- Xet (hub-docs ``docs/xet/``, read 2026-12-01; hf_xet 1.8.0's requests seen here): ``GET
  /api/{models,datasets}/REPO/xet-{read,write}-token/REV`` answers ``{accessToken, exp,
  casUrl}`` (what hf_xet parses) and the ``X-Xet-*`` headers (what huggingface_hub parses);
  write needs a token that may write (read-only: 403, bad: 401), and a mirror (``xet =
  False``) answers 404. The CAS at ``/cas`` takes only those tokens (401, or 403 for a read
  token on a write): chunk queries are 404 (no global dedup), xorb grants 404 (hf_xet then
  POSTs the xorb itself), ``POST /v1/xorbs/default/HASH`` stores a parsed xorb
  (``{"was_inserted"}``),
  ``POST /v2/shards`` (NDJSON ``result`` event) and ``/v1/shards`` register each file whose
  terms name stored chunks making the bytes of its sha256 (else 400), which then count as an
  uploaded LFS object for the commit; ``GET /v{1,2}/reconstructions/ID`` (with ``Range``)
  point at ``/xorb-data/HASH`` byte ranges, one range per URL. The formats:
  ``tests/standins/xet.py``.
- LFS files: ``/resolve/`` answers 302 to a bridge on another origin (``bridge_url``; the real
  one is another host, and huggingface_hub follows a same-origin redirect with the token,
  ``utils/_http.py``), with ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size`` on the
  redirect, and ``X-Xet-Hash`` with a ``Link: <read token route>; rel="xet-auth"`` for a file
  stored through Xet (hub-docs ``docs/xet/file-id.md``). The bridge serves ``Range`` and needs
  no ``Authorization`` (a signed URL in reality).

Where it still simplifies:

- Regular or LFS: the Hub's rule is server code that is not public. ``upload_mode`` follows the
  Hub docs (hub-docs ``docs/hub/repositories-getting-started.md``, read 2026-11-30: files larger
  than 10MB go to large-file storage; new repos get a ``.gitattributes`` listing common ML file
  extensions) with ``LFS_PATTERNS``, the default ``.gitattributes`` of new Hub repos as copied in
  public repositories (the model list plus the dataset list's audio and image types, used for
  both kinds: those are binary anyway). The threshold is taken as 10 MiB; the exact boundary
  is not verified. "Binary" is a NUL byte or non-UTF-8 text in the 512-byte sample: a guess at
  the Hub's heuristic. The repo's own ``.gitattributes`` is never read, and repos here have no
  ``.gitattributes`` file (the real first commit is "a system commit containing the
  ``.gitattributes`` file", ``hf_api.py::HfApi.list_repo_commits`` comment).
- A regular ``file`` entry whose content is binary is refused with 400 and "Your push was
  rejected because it contains binary files" (wording from a third-party client's docs, the
  Elixir ``HfHub.Commit.Preupload``, not from Hugging Face). An ``lfsFile`` whose object was
  never uploaded is refused with 400 in words made up here.
- The LFS batch always asks for an upload; the real one leaves out ``actions`` for objects it
  already holds
  (``_commit_api.py::_upload_lfs_files`` then skips the PUT). Preupload never answers a file's
  ``oid``, so the client never drops an unchanged file from a commit
  (``hf_api.py::HfApi.create_commit``, which would then also call ``repo_info``, not served).
- Revisions: only ``main`` and full 40-hex commit shas; no other branches, tags, short shas or
  pull requests. Commits go to ``main`` only. A commit id is the sha1 of the parent and the
  changes, not of a git commit object. No 128-commits-per-hour limit. Xet: no hash is
  recomputed (``tests/standins/xet.py`` says what is checked instead), tokens never expire within a
  test, every bridge and xorb URL is one unsigned origin, files added with ``add`` are LFS
  without Xet (no ``X-Xet-Hash``: served by the bridge only, as older LFS files are).
- A fault with a status or a hang applies to the request it first matches; one that only cuts
  (``drop_after``) or stalls (``stall_after``) applies to the first matching request that sends
  or receives a file body: a file GET (the bridge's, or a regular file's resolve), an LFS PUT,
  a xorb or shard POST (cut after that many bytes, with no answer). ``stall_after`` acts on
  GET bodies only.
"""

import base64
import codecs
import errno
import fnmatch
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

import yaml

from tests.standins import xet

GOOD_TOKEN = "hf_testtoken_good"
READ_TOKEN = "hf_testtoken_read"  # may read everything public and private, write nothing
RESOLVE = re.compile(r"^/(?:(datasets|models)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
XET_TOKEN = re.compile(r"^/api/(datasets|models)/([^/]+/[^/]+)/xet-(read|write)-token/[^/]+$")
BRANCH_MOVED = "The branch was updated since you opened this page. Please refresh and try again."

LFS_THRESHOLD = 10 * 1024 * 1024  # "files larger than 10MB" (Hub docs); the boundary is a guess
# The .gitattributes a new Hub repo starts with: models, then what datasets add (audio, images).
LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib",
    "*.lfs.*", "*.lz4", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot",
    "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors",
    "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
    "*.zst", "*tfevents*",
    "*.pcm", "*.sam", "*.raw", "*.aac", "*.flac", "*.mp3", "*.ogg", "*.wav",
    "*.bmp", "*.gif", "*.png", "*.tiff", "*.jpg", "*.jpeg", "*.webp",
)  # fmt: skip


def matches_lfs_pattern(path: str) -> bool:
    """Whether ``path`` matches ``LFS_PATTERNS`` as .gitattributes does: a pattern without a
    slash matches the file name at any depth, one with a slash the path from the repo root."""
    name = path.rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatchcase(path, pattern.replace("**/", "*"))
        if "/" in pattern
        else fnmatch.fnmatchcase(name, pattern)
        for pattern in LFS_PATTERNS
    )


def is_binary(sample: bytes) -> bool:
    """A NUL byte, or bytes that are not UTF-8 (a character cut at the sample's end is fine)."""
    if b"\0" in sample:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return True
    return False


def upload_mode(path: str, size: int, sample: bytes) -> str:
    """What the Hub's preupload answers for a file: ``"lfs"`` when it is over 10 MB, matches
    the default .gitattributes LFS patterns or is binary; else ``"regular"`` (a git blob, sent
    base64 in the commit: small text such as .json, .jsonl, .yaml, .csv, .log, .txt)."""
    if size > LFS_THRESHOLD or matches_lfs_pattern(path) or is_binary(sample[:512]):
        return "lfs"
    return "regular"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes, sha256: str) -> bytes:
    """The git-lfs pointer file that git stores for an LFS file."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
    ).encode()


# The Hub's license identifiers (a subset of its list, docs/hub/repositories-licenses).
LICENSES = frozenset({
    "apache-2.0", "mit", "openrail", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause",
    "bsd-3-clause", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0", "cc-by-nd-4.0", "wtfpl", "epl-2.0", "agpl-3.0", "gpl", "gpl-2.0",
    "gpl-3.0", "lgpl-3.0", "isc", "mpl-2.0", "odbl", "unlicense", "zlib", "unknown", "other",
})  # fmt: skip
CARD_YAML = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")


def card_errors(text: str) -> list[str]:
    """What the Hub finds invalid in a README's metadata (the rules in the module's doc)."""
    found = CARD_YAML.match(text)
    if not found:
        return []
    try:
        meta = yaml.safe_load(found.group(2)) or {}
    except yaml.YAMLError as err:
        return [f"YAML: {str(err).splitlines()[0]}"]
    if not isinstance(meta, dict):
        return ["metadata must be a mapping"]
    errors = []
    if "license" in meta and meta["license"] not in LICENSES:
        errors.append('"license" must be one of the Hub\'s license identifiers')
    index = meta.get("model-index")
    if index is not None and not _valid_index(index):
        errors.append('"model-index" must be a list of {name, results: [{task: {type}, '
                      'dataset: {type, name}, metrics: [{type, value}]}]}')  # fmt: skip
    return errors


def _valid_index(index: object) -> bool:
    def result_ok(r: object) -> bool:
        return (isinstance(r, dict) and isinstance(r.get("task"), dict) and "type" in r["task"]
                and isinstance(r.get("dataset"), dict)
                and {"type", "name"} <= r["dataset"].keys()
                and isinstance(r.get("metrics"), list)
                and all(isinstance(m, dict) and {"type", "value"} <= m.keys()
                        for m in r["metrics"]))  # fmt: skip

    return isinstance(index, list) and all(
        isinstance(e, dict) and "name" in e and isinstance(e.get("results"), list)
        and all(result_ok(r) for r in e["results"]) for e in index)  # fmt: skip


@dataclass
class Snapshot:
    """A commit's files, which of them are stored with LFS, and their hashes (computed once per
    content: a test may replace a file's bytes in ``files`` to make the Hub hold other bytes)."""

    files: dict[str, bytes]
    lfs: frozenset[str]
    _sha256: dict[str, tuple[bytes, str]] = field(default_factory=dict, repr=False)
    _blob: dict[str, tuple[bytes, str]] = field(default_factory=dict, repr=False)

    def sha256(self, name: str) -> str:
        data = self.files[name]
        cached = self._sha256.get(name)
        if cached is None or cached[0] is not data:
            cached = self._sha256[name] = (data, hashlib.sha256(data).hexdigest())
        return cached[1]

    def lfs_info(self, name: str, sha_key: str = "oid") -> dict | None:
        """An LFS file's ``lfs`` field as the Hub's listings give it (its sha256 under
        ``sha_key``: ``oid`` in tree and paths-info, ``sha256`` in repo info); None otherwise."""
        if name not in self.lfs:
            return None
        data, sha = self.files[name], self.sha256(name)
        return {sha_key: sha, "size": len(data), "pointerSize": len(lfs_pointer(data, sha))}

    def blob_id(self, name: str) -> str:
        """The git blob id: of the content for a regular file, of the pointer for LFS."""
        data = self.files[name]
        cached = self._blob.get(name)
        if cached is None or cached[0] is not data:
            stored = lfs_pointer(data, self.sha256(name)) if name in self.lfs else data
            cached = self._blob[name] = (data, git_blob_id(stored))
        return cached[1]


@dataclass
class Repo:
    private: bool = False
    gated: bool = False
    commits: list[str] = field(default_factory=list)  # oldest first; the last is ``main``
    snapshots: dict[str, Snapshot] = field(default_factory=dict)  # by commit
    branches: dict[str, str] = field(default_factory=dict)  # other refs -> their commit
    changed: dict[str, list[str]] = field(default_factory=dict)  # by commit: the paths it added

    @property
    def files(self) -> dict[str, bytes]:
        """The newest files (``main``). Read it; change the repo with ``commit``."""
        return self.snapshots[self.commits[-1]].files if self.commits else {}

    def sha256(self, name: str) -> str:
        """A newest file's sha256, computed once per content, when first asked."""
        return self.snapshots[self.commits[-1]].sha256(name)

    def at(self, revision: str) -> tuple[str, Snapshot] | None:
        """The commit and snapshot that ``revision`` (``main`` or a commit sha) names."""
        if not self.commits:
            return None
        commit = self.commits[-1] if revision == "main" else self.branches.get(revision, revision)
        snapshot = self.snapshots.get(commit)
        return (commit, snapshot) if snapshot is not None else None

    def commit(
        self, files: dict[str, bytes], lfs: set[str] | None = None, deleted: tuple[str, ...] = ()
    ) -> str:
        """A new commit on ``main``: the newest files with ``files`` added or replaced and the
        paths in ``deleted`` (a file, or a folder ending in "/") removed. ``lfs`` names the added
        files stored with LFS; by default ``upload_mode`` decides, as for an upload."""
        base = self.snapshots[self.commits[-1]] if self.commits else Snapshot({}, frozenset())
        if lfs is None:
            lfs = {n for n, d in files.items() if upload_mode(n, len(d), d[:512]) == "lfs"}
        gone = {
            n
            for n in base.files
            for d in deleted
            if n == d or (d.endswith("/") and n.startswith(d))
        } - files.keys()
        merged = {n: d for n, d in base.files.items() if n not in gone} | files
        stored = frozenset((base.lfs - files.keys() - gone) | (lfs & files.keys()))
        snapshot = Snapshot(merged, stored)
        kept = merged.keys() - files.keys()
        snapshot._sha256 = {n: h for n, h in base._sha256.items() if n in kept}
        snapshot._blob = {n: h for n, h in base._blob.items() if n in kept}
        change = {n: snapshot.sha256(n) for n in sorted(files)}
        parent = self.commits[-1] if self.commits else ""
        digest = hashlib.sha1(
            json.dumps([parent, len(self.commits), change, sorted(gone), sorted(stored)]).encode()
        ).hexdigest()
        self.snapshots[digest] = snapshot
        self.changed[digest] = sorted(files)
        self.commits.append(digest)
        return digest


@dataclass
class Fault:
    """What to do to requests whose path contains ``path`` and whose method is in ``methods``:
    the next ``times`` of them, or, with ``seconds``, every one until ``seconds`` after the
    first request it matched (``times`` is then ignored; the window starts at the first match,
    not when the fault is added, so setup time does not eat into it).

    ``hang``: wait that long, silent, before answering (a large value is a server that accepts
    and never answers; the wait ends when the Hub closes), then answer with ``status`` if set,
    else normally (with ``drop_after``/``stall_after`` still applying)."""

    path: str
    status: int | None = None
    error_code: str | None = None
    drop_after: int | None = None  # bytes of body sent before the connection is cut
    stall_after: int | None = None  # bytes of body sent before the server goes silent
    times: int = 1
    methods: tuple[str, ...] = ("GET", "HEAD", "POST", "PUT")
    seconds: float | None = None  # applies to every match for this long after the first
    hang: float | None = None  # seconds of silence before the answer
    hits: int = field(default=0, init=False)  # requests it applied to
    until: float | None = field(default=None, init=False)  # when ``seconds`` ends (monotonic)

    def _take(self, now: float) -> bool:
        """Apply to one more request, if still in force. Call with the Hub's lock held."""
        if self.seconds is not None:
            if self.until is None:
                self.until = now + self.seconds
            if now >= self.until:
                return False
        elif self.times > 0:
            self.times -= 1
        else:
            return False
        self.hits += 1
        return True


class Served:
    """One file GET body, recorded when it starts and updated as bytes go out. Unpacks and
    indexes as ``(name, first byte, bytes sent so far)``; ``done`` once the send has ended
    (completed, cut or failed); ``commit`` is the commit served; ``began`` and ``ended`` are
    the send's ``time.monotonic()`` bounds (``ended`` None while it goes on)."""

    def __init__(self, name: str, start: int, commit: str) -> None:
        self.name, self.start, self.commit = name, start, commit
        self.sent = 0
        self.done = False
        self.began, self.ended = time.monotonic(), None

    def overlaps(self, other: "Served") -> bool:
        """Whether the two bodies were being sent at the same time."""
        now = time.monotonic()
        return self.began < (other.ended or now) and other.began < (self.ended or now)

    def __iter__(self):
        return iter((self.name, self.start, self.sent))

    def __getitem__(self, index: int):
        return tuple(self)[index]

    def __len__(self) -> int:
        return 3

    def __repr__(self) -> str:
        state = "done" if self.done else "sending"
        return f"Served({self.name!r}, start={self.start}, sent={self.sent}, {state})"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops concurrent connects: 1 s SYN retries


class Hub:
    """The server. ``with Hub() as hub:`` starts it; ``hub.url`` is its endpoint.

    ``hub.requests``: every (method, path) in arrival order. ``hub.served``: every file GET body
    (``Served``), in start order. ``hub.upload_modes``: every preupload answer as (repo key, path,
    mode). ``hub.received``: every request body read, as (path, bytes). ``hub.faults``: a list of
    ``Fault``; append to it at any time."""

    def __init__(self, rate: float | None = None) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self.rate = rate  # bytes per second for file bodies; None is unthrottled
        self.upload_rate: float | None = None  # bytes per second for uploaded files
        self.uploads: dict[str, bytes] = {}  # LFS objects by sha256
        self.served: list[Served] = []
        self.upload_modes: list[tuple[str, str, str]] = []
        self.received: list[tuple[str, int]] = []  # (path, bytes) of every request body read
        self.xet = True  # False: a Hub-compatible mirror without Xet (its token routes are 404)
        self.xorbs: dict[str, list[xet.Chunk]] = {}  # the CAS: stored xorbs by hash, parsed
        self.xorb_bytes: dict[str, bytes] = {}  # ... and as they were sent
        self.xet_files: dict[str, xet.FileInfo] = {}  # files registered by a shard, by Xet hash
        self.xet_hashes: dict[str, str] = {}  # sha256 -> Xet hash of those files
        self.xet_tokens: dict[str, str] = {}  # Xet tokens handed out -> "read" or "write"
        self.bridged: dict[str, tuple[bytes, str]] = {}  # sha256 -> (bytes, commit) redirected to
        self.bridge_auth: list[bool] = []  # per bridge request: whether it had an Authorization
        self._lock = threading.Lock()  # the state above, as the handler threads change it
        self._serving = threading.Lock()  # the listening socket: open, close, reopen
        self._closing = threading.Event()  # set on exit: hangs and stalls end
        self._listening = threading.Event()
        self._refused_until = 0.0
        self._started = False
        self._handler_class = self._handler()
        self._server = self._bind(0)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # Another origin, as the real bridge and transfer hosts are (huggingface_hub follows a
        # redirect to the same origin with the token, and stops at any other: utils/_http.py
        # ``_httpx2_follow_hub_redirects_with_backoff``): LFS bytes and xorb ranges.
        self._bridge_server = _Server(("127.0.0.1", 0), self._handler_class)
        self.bridge_url = f"http://127.0.0.1:{self._bridge_server.server_address[1]}"

    def __enter__(self) -> "Hub":
        with self._serving:
            self._started = True
            self._serve()
        threading.Thread(target=self._bridge_server.serve_forever, args=(0.05,),
                         daemon=True).start()  # fmt: skip
        return self

    def __exit__(self, *_: object) -> None:
        self._closing.set()
        with self._serving:
            self._close()
        self._bridge_server.shutdown()
        self._bridge_server.server_close()

    def add(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        kind: str = "datasets",
        private: bool = False,
        gated: bool = False,
        lfs: set[str] | None = None,
    ) -> str:
        """Create a repo holding ``files`` (or add a commit to it); return the commit. ``lfs``:
        the files stored with LFS; by default ``upload_mode`` decides."""
        with self._lock:
            repo = self.repos.setdefault(f"{kind}/{repo_id}", Repo(private=private, gated=gated))
            return repo.commit(files, lfs)

    def branch(self, repo_id: str, ref: str, files: dict[str, bytes]) -> str:
        """A ref of its own holding only ``files`` (as the Hub's ``refs/convert/parquet``,
        whose tree the dataset viewer's converter writes apart from ``main``); its commit."""
        with self._lock:
            repo = self.repos[f"datasets/{repo_id}"]
            lfs = {n for n, d in files.items() if upload_mode(n, len(d), d[:512]) == "lfs"}
            snapshot = Snapshot(dict(files), frozenset(lfs))
            commit = hashlib.sha1(json.dumps([ref, sorted(files)]).encode()).hexdigest()
            repo.snapshots[commit] = snapshot
            repo.branches[ref] = commit
            return commit

    def downloads(self, name: str) -> list[str]:
        """The GET requests that fetched a file named ``name``."""
        return [path for method, path in self.requests
                if method == "GET" and RESOLVE.match(path) and path.endswith(name)]  # fmt: skip

    def refuse(self, seconds: float) -> threading.Event:
        """Close the listening socket now, so that connecting is refused (not reset), and
        listen again on the same port after ``seconds``; a call while refusing extends the time.
        Connections already open carry on. Returns an event set once it listens again."""
        with self._serving:
            self._refused_until = max(self._refused_until, time.monotonic() + seconds)
            if self._listening.is_set():
                self._close()
                threading.Thread(target=self._reopen, daemon=True).start()
        return self._listening

    def _bind(self, port: int) -> "_Server":
        """A server bound to ``port`` (SO_REUSEADDR, as HTTPServer sets). Retried for a while if
        the port is taken, as an outgoing connection may take it for its local end meanwhile."""
        deadline = time.monotonic() + 5
        while True:
            try:
                server = _Server(("127.0.0.1", port), self._handler_class)
            except OSError as err:
                if err.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            return server

    def _serve(self) -> None:
        """Serve the bound socket from a thread. Call with ``_serving`` held."""
        server = self._server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self._listening.set()

    def _close(self) -> None:
        """Stop accepting and close the listening socket. Call with ``_serving`` held."""
        if self._listening.is_set():
            self._server.shutdown()  # returns once serve_forever has stopped
        self._listening.clear()
        self._server.server_close()

    def _reopen(self) -> None:
        while not self._closing.is_set():
            with self._serving:
                left = self._refused_until - time.monotonic()
                if left <= 0:
                    if not self._closing.is_set():
                        self._server = self._bind(self.port)
                        self._serve()
                    return
            self._closing.wait(left)

    def _fault(self, method: str, path: str, *, body: bool = False) -> Fault | None:
        """The fault for a request as it arrives, or with ``body``, for a file body about to
        be sent or received: one that only cuts or stalls it (``drop_after``/``stall_after``,
        no status, no hang), which a redirect or an answer without a file body leaves for the
        next request."""
        now = time.monotonic()
        with self._lock:
            for fault in self.faults:
                cuts = fault.drop_after is not None or fault.stall_after is not None
                answers = not cuts or fault.status is not None or fault.hang is not None
                if (fault.path in path and method in fault.methods and answers != body
                        and fault._take(now)):  # fmt: skip
                    return fault
        return None

    def _assemble(self, info: xet.FileInfo) -> bytes:
        """A registered file's bytes from the stored xorbs; ``ValueError`` if a term names a
        xorb or chunks the CAS does not hold, or the bytes are not what the shard says. Call
        with ``_lock`` held."""
        parts = []
        for term in info.terms:
            stored = self.xorbs.get(term.xorb)
            if stored is None or not 0 <= term.start < term.end <= len(stored):
                raise ValueError(f"xorb {term.xorb} chunks {term.start}-{term.end}: not uploaded")
            data = b"".join(chunk.data for chunk in stored[term.start : term.end])
            if len(data) != term.size:
                raise ValueError(f"xorb {term.xorb}: {len(data)} bytes, the term says {term.size}")
            parts.append(data)
        data = b"".join(parts)
        if info.sha256 is None or hashlib.sha256(data).hexdigest() != info.sha256:
            raise ValueError(f"file {info.file_hash}: no sha256, or not the bytes' sha256")
        return data

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

            def _error(
                self, status: int, code: str | None, message: str = "", headers: dict | None = None
            ) -> None:
                headers = {**(headers or {}), **({"X-Error-Code": code} if code else {})}
                if message:
                    headers["X-Error-Message"] = message
                self._json(status, {"error": message or code or "error"}, headers)

            def _body(self) -> bytes:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hub._lock:
                    hub.received.append((unquote(self.path.split("?", 1)[0]), len(body)))
                return body

            def _authorized(self, repo: Repo) -> bool | None:
                """None: a bad token; False: no access (a gated repo's terms are never
                accepted here); True: access."""
                auth = self.headers.get("Authorization", "")
                if auth and auth not in (f"Bearer {GOOD_TOKEN}", f"Bearer {READ_TOKEN}"):
                    return None
                return not repo.gated and (bool(auth) or not repo.private)

            def _dispatch(self) -> None:
                try:
                    self._route()
                except (ConnectionError, TimeoutError):  # the client went away
                    self.close_connection = True

            def _route(self) -> None:
                path = unquote(self.path.split("?", 1)[0])
                with hub._lock:
                    hub.requests.append((self.command, path))
                fault = hub._fault(self.command, path)
                if fault and fault.hang:
                    hub._closing.wait(min(fault.hang, 86400.0))  # Event.wait refuses inf
                if fault and fault.status:
                    if self.command in ("POST", "PUT"):
                        self._body()
                    headers = {"Retry-After": "0"} if fault.status == 429 else {}
                    headers |= {"X-Error-Code": fault.error_code} if fault.error_code else {}
                    self._reply(fault.status, b"fault", headers)
                    return
                if match := RESOLVE.match(path):
                    self._resolve(*match.groups(), fault)
                elif match := XET_TOKEN.match(path):
                    self._xet_token(f"{match.group(1)}/{match.group(2)}", match.group(3))
                elif path.startswith("/cas/") or path == "/v1/telemetry":
                    self._cas(path.removeprefix("/cas"), fault)
                elif match := re.match(r"^/xet-bridge/([0-9a-f]{64})/", path):
                    self._bridge(match.group(1), path.split("/", 3)[3], fault)
                elif match := re.match(r"^/xorb-data/([0-9a-f]{64})$", path):
                    with hub._lock:
                        data = hub.xorb_bytes.get(match.group(1))
                    if data is None:
                        self._error(404, None, "no such xorb")
                    else:
                        self._serve_bytes(data, {}, None)
                elif match := re.match(r"^/api/(datasets|models)/(.+)/paths-info/([^/]+)$", path):
                    key = f"{match.group(1)}/{match.group(2)}"
                    self._paths_info(key, match.group(3), self._body())
                elif self.command == "GET" and (
                    match := re.match(
                        r"^/api/(datasets|models)/([^/]+/[^/]+)(?:/revision/(.+))?$", path
                    )
                ):
                    key, revision = f"{match.group(1)}/{match.group(2)}", match.group(3) or "main"
                    self._repo_info(key, revision, "blobs=true" in self.path.lower())
                elif self.command == "GET" and (
                    match := re.match(
                        r"^/api/(datasets|models)/([^/]+/[^/]+)/tree/([^/]+)/?(.*)$", path
                    )
                ):
                    key = f"{match.group(1)}/{match.group(2)}"
                    recursive = "recursive=true" in self.path.lower()
                    self._tree(key, match.group(3), match.group(4).strip("/"), recursive)
                elif path == "/api/validate-yaml" and self.command == "POST":
                    # A card's YAML, checked before push_to_hub or create_commit commits it
                    # (huggingface_hub 2.4.0 ``repocard.RepoCard.validate``,
                    # ``hf_api._validate_yaml``): a 400 carries the errors.
                    errors = card_errors(json.loads(self._body()).get("content", ""))
                    self._json(
                        400 if errors else 200,
                        {"errors": [{"message": e} for e in errors], "warnings": []},
                    )
                elif self.command in ("POST", "PUT") and not self._may_write():
                    self._body()
                elif path == "/api/repos/create":
                    self._create(json.loads(self._body()))
                elif match := re.match(r"^/api/(datasets|models)/(.+)/preupload/[^/]+$", path):
                    self._preupload(f"{match.group(1)}/{match.group(2)}", json.loads(self._body()))
                elif match := re.match(
                    r"^/(?:(datasets)/)?(.+)\.git/info/lfs/objects/batch$", path
                ):
                    self._lfs_batch(json.loads(self._body()))
                elif match := re.match(r"^/upload/([0-9a-f]{64})$", path):
                    if self._cut_upload(fault):
                        return
                    body = self._body()
                    if hashlib.sha256(body).hexdigest() == match.group(1):
                        hub.uploads[match.group(1)] = body
                    if hub.upload_rate:  # a slow uplink: the answer waits as the bytes would
                        time.sleep(len(body) / hub.upload_rate)
                    self._reply(200)
                elif match := re.match(r"^/api/(datasets|models)/(.+)/commit/([^/]+)$", path):
                    key = f"{match.group(1)}/{match.group(2)}"
                    self._commit(key, match.group(3), self._body())
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

            def _visible(self, repo: "Repo | None", *, listing: bool = False) -> bool:
                """Whether the caller may see ``repo``, else the Hub's refusal is sent. A gated
                repo's files are listed to anyone (``listing``); its bytes are not."""
                if repo is None:
                    self._error(404 if self.headers.get("Authorization") else 401, "RepoNotFound")
                    return False
                access = self._authorized(repo)
                if access is None:
                    self._error(401, None, "Invalid credentials in Authorization header")
                    return False
                if not access and not (listing and repo.gated):
                    self._error(
                        401 if repo.private else 403, "GatedRepo" if repo.gated else "RepoNotFound"
                    )
                    return False
                return True

            def _resolve(
                self, kind: str | None, repo_id: str, revision: str, name: str, fault: Fault | None
            ) -> None:
                repo = hub.repos.get(f"{kind or 'models'}/{repo_id}")
                if not self._visible(repo):
                    return
                if (found := self._at(repo, revision)) is None:
                    return
                commit, snapshot = found
                if name not in snapshot.files:
                    self._error(404, "EntryNotFound", headers={"X-Repo-Commit": commit})
                    return
                data = snapshot.files[name]
                if name not in snapshot.lfs:
                    headers = {"X-Repo-Commit": commit, "ETag": f'"{snapshot.blob_id(name)}"'}
                    self._serve_bytes(data, headers, Served(name, 0, commit), fault)
                    return
                sha = snapshot.sha256(name)
                with hub._lock:
                    hub.bridged[sha] = (data, commit)
                    xet_hash = hub.xet_hashes.get(sha)
                headers = {"Location": f"{hub.bridge_url}/xet-bridge/{sha}/{name}",
                           "X-Repo-Commit": commit, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"',
                           "X-Linked-Size": str(len(data))}  # fmt: skip
                if xet_hash:  # stored through Xet: the client may fetch it with the protocol
                    route = f"{hub.url}/api/{kind or 'models'}/{repo_id}/xet-read-token/{commit}"
                    headers |= {"X-Xet-Hash": xet_hash, "Link": f'<{route}>; rel="xet-auth"'}
                self._reply(302, b"", headers)

            def _serve_bytes(
                self, data: bytes, headers: dict, served: Served | None, fault: Fault | None = None
            ) -> None:
                """Answer a GET or HEAD for ``data`` (200, or 206 for a ``Range``), sending the
                body as ``_send`` does; ``served`` records a file body."""
                start, end, status = 0, len(data) - 1, 200
                if ranged := re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "")):
                    start, end, status = int(ranged.group(1)), int(ranged.group(2) or end), 206
                    end = min(end, len(data) - 1)
                headers = {"Content-Length": str(end - start + 1), "Accept-Ranges": "bytes",
                           **headers}  # fmt: skip
                if status == 206:
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                if self.command != "GET":
                    served = None
                if served is not None:
                    served.start = start
                    with hub._lock:
                        hub.served.append(served)
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if self.command == "GET":
                        self._send(memoryview(data)[start : end + 1], self._body_fault(fault),
                                   served)  # fmt: skip
                finally:
                    if served is not None:
                        served.ended, served.done = time.monotonic(), True

            def _body_fault(self, fault: Fault | None) -> Fault | None:
                """The fault that cuts or stalls this body: the answer's own, or the next one
                that only does that (``drop_after``/``stall_after``, no status, no hang)."""
                if fault and (fault.drop_after is not None or fault.stall_after is not None):
                    return fault
                return hub._fault(self.command, unquote(self.path.split("?", 1)[0]), body=True)

            def _cut_upload(self, fault: Fault | None) -> bool:
                """A ``drop_after`` fault on an upload: the connection is cut after that many
                bytes of the body, with no answer (the uplink breaks mid-upload)."""
                fault = self._body_fault(fault)
                if fault is None or fault.drop_after is None:
                    return False
                size = int(self.headers.get("Content-Length", 0))
                self.rfile.read(min(fault.drop_after, size))
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return True

            def _bridge(self, sha: str, name: str, fault: Fault | None) -> None:
                """The bytes of an LFS file, where ``/resolve/`` redirects: no Authorization
                needed (the real bridge URL is signed), ``Range`` served."""
                with hub._lock:
                    found = hub.bridged.get(sha)
                if found is None:
                    self._error(404, None, "no such object")
                    return
                data, commit = found
                with hub._lock:
                    hub.bridge_auth.append(bool(self.headers.get("Authorization")))
                self._serve_bytes(data, {"ETag": f'"{sha}"'}, Served(name, 0, commit), fault)

            def _xet_token(self, key: str, scope: str) -> None:
                """A Xet token for the CAS (hub-docs ``docs/xet/auth.md``): the JSON body and the
                ``X-Xet-*`` headers huggingface_hub reads (``utils/_xet.py``). Write needs the
                good token (read-only: 403, bad: 401), read any access to the repo; a mirror
                without Xet answers 404."""
                repo = hub.repos.get(key)
                if not hub.xet:
                    self._error(404, None, f"no route for GET {self.path}")
                    return
                if repo is None:
                    self._error(404, "RepoNotFound", "Repository not found")
                    return
                if scope == "write" and not self._may_write():
                    return
                if scope == "read" and not self._authorized(repo):
                    self._error(401, "RepoNotFound", "Repository not found")
                    return
                with hub._lock:
                    token = f"xet_{scope}_{len(hub.xet_tokens)}"
                    hub.xet_tokens[token] = scope
                expires = int(time.time()) + 3600
                self._json(200, {"accessToken": token, "exp": expires, "casUrl": f"{hub.url}/cas"},
                           {"X-Xet-Cas-Url": f"{hub.url}/cas", "X-Xet-Access-Token": token,
                            "X-Xet-Token-Expiration": str(expires)})  # fmt: skip

            def _cas(self, path: str, fault: Fault | None) -> None:
                """The CAS routes (hub-docs ``docs/xet/api.md``), with the token's scope."""
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                scope = hub.xet_tokens.get(token)
                writes = self.command == "POST" and re.match(r"^/v[12]/(xorbs|shards)", path)
                if scope is None or (writes and scope != "write"):
                    if self.command == "POST" and not self._cut_upload(fault):
                        self._body()
                    self._error(401 if scope is None else 403, None, "xet token refused")
                elif match := re.match(r"^/v1/xorbs/default/([0-9a-f]{64})$", path):
                    self._xorb(match.group(1), fault)
                elif re.match(r"^/v[12]/shards$", path) and self.command == "POST":
                    self._shard(path.startswith("/v2/"), fault)
                elif match := re.match(r"^/v([12])/reconstructions/([0-9a-f]{64})$", path):
                    self._reconstruction(match.group(2), match.group(1) == "2")
                elif path.endswith("/v1/telemetry"):
                    self._body()
                    self._json(200, {})
                else:  # global dedup (no chunk is known), xorb grants: "not here", go on
                    if self.command == "POST":
                        self._body()
                    self._error(404, None, f"no route for {self.command} /cas{path}")

            def _xorb(self, digest: str, fault: Fault | None) -> None:
                if self.command == "HEAD":
                    with hub._lock:
                        data = hub.xorb_bytes.get(digest)
                    self._reply(404 if data is None else 200, b"",
                                {"Content-Length": str(len(data or b""))})  # fmt: skip
                    return
                if self._cut_upload(fault):
                    return
                body = self._body()
                try:
                    parsed = xet.chunks(body)
                except ValueError as err:
                    self._error(400, None, f"xorb {digest}: {err}")
                    return
                with hub._lock:
                    inserted = digest not in hub.xorbs
                    hub.xorbs[digest], hub.xorb_bytes[digest] = parsed, body
                if hub.upload_rate:
                    time.sleep(len(body) / hub.upload_rate)
                self._json(200, {"was_inserted": inserted})

            def _shard(self, streamed: bool, fault: Fault | None) -> None:
                """Register a shard's files: every term must name chunks of a stored xorb, and
                the bytes they make must have the sha256 the shard claims. The file is then an
                uploaded LFS object, as a PUT makes one."""
                if self._cut_upload(fault):
                    return
                try:
                    infos = xet.files(self._body())
                    with hub._lock:
                        made = [(info, hub._assemble(info)) for info in infos]
                except ValueError as err:
                    self._error(400, None, f"shard refused: {err}")
                    return
                with hub._lock:
                    for info, data in made:
                        hub.xet_files[info.file_hash] = info
                        hub.uploads[info.sha256] = data
                        hub.xet_hashes[info.sha256] = info.file_hash
                if streamed:
                    self._reply(200, b'{"type":"result","result":1}\n',
                                {"Content-Type": "application/x-ndjson"})  # fmt: skip
                else:
                    self._json(200, {"result": 1})

            def _reconstruction(self, file_hash: str, v2: bool) -> None:
                """Which chunks of which xorbs make the file (``download-protocol.md``), each
                term fetched from its own URL with one byte range."""
                with hub._lock:
                    info = hub.xet_files.get(file_hash)
                if info is None:
                    self._error(404, None, "file not found")
                    return
                size = sum(t.size for t in info.terms)
                first, last = 0, size - 1
                if ranged := re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "")):
                    first, last = int(ranged.group(1)), min(int(ranged.group(2) or last), last)
                if first >= size:
                    self._error(416, None, "range start past the end of the file")
                    return
                terms, fetch, at, skip = [], {}, 0, None
                for term in info.terms:
                    if at + term.size > first and at <= last:
                        skip = first - at if skip is None else skip
                        with hub._lock:
                            stored = hub.xorbs[term.xorb]
                        span = {"start": stored[term.start].start,
                                "end": stored[term.end - 1].end - 1}  # fmt: skip
                        chunks = {"start": term.start, "end": term.end}
                        terms.append({"hash": term.xorb, "unpacked_length": term.size,
                                      "range": chunks})  # fmt: skip
                        where = f"{hub.bridge_url}/xorb-data/{term.xorb}"
                        fetch.setdefault(term.xorb, []).append(
                            {"url": where, "ranges": [{"chunks": chunks, "bytes": span}]} if v2
                            else {"url": where, "range": chunks, "url_range": span}
                        )  # fmt: skip
                    at += term.size
                self._json(200, {"offset_into_first_range": skip or 0, "terms": terms,
                                 "xorbs" if v2 else "fetch_info": fetch})  # fmt: skip

            def _send(self, body: memoryview, fault: Fault | None, served: Served | None) -> None:
                """Send ``body`` (throttled, or cut short by ``fault``), counting the bytes sent
                in ``served`` as they go."""
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
                        self.close_connection = True
                        return
                    sent += len(piece)
                    if served is not None:
                        served.sent = sent
                    if hub.rate:
                        ahead = sent / hub.rate - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)
                if sent == drop:
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif sent == stall:
                    hub._closing.wait(3600)  # a stuck server: the connection stays open, silent
                    self.close_connection = True

            def _create(self, spec: dict) -> None:
                kind = f"{spec.get('type', 'model')}s"
                repo_id = (
                    f"{spec['organization']}/{spec['name']}"
                    if spec.get("organization")
                    else spec["name"]
                )
                key = f"{kind}/{repo_id}"
                with hub._lock:
                    exists = key in hub.repos
                    if not exists:
                        hub.repos[key] = Repo(private=bool(spec.get("private")))
                        hub.repos[key].commit({})
                if exists:  # the real Hub names the existing repo in its 409
                    self._json(
                        409, {"error": "You already created this repo", "url": f"{hub.url}/{key}"}
                    )
                    return
                self._json(200, {"url": f"{hub.url}/{key}", "name": repo_id})

            def _at(self, repo: "Repo", revision: str) -> "tuple[str, Snapshot] | None":
                """``repo`` at ``revision`` (commit, snapshot), or None with the Hub's 404 sent."""
                with hub._lock:
                    found = repo.at(revision)
                if found is None:
                    self._error(404, "RevisionNotFound")
                return found

            def _paths_info(self, key: str, revision: str, body: bytes) -> None:
                """What the Hub holds at these paths at ``revision``: the git blob id, and for
                LFS files the sha256 and size."""
                repo = hub.repos.get(key)
                if repo is None or not self._authorized(repo):
                    self._error(404, "RepoNotFound")
                    return
                if (found := self._at(repo, revision)) is None:
                    return
                snapshot = found[1]
                entries = []
                for name in parse_qs(body.decode()).get("paths", []):
                    if (data := snapshot.files.get(name)) is None:
                        continue
                    entry = {"type": "file", "path": name, "size": len(data),
                             "oid": snapshot.blob_id(name)}  # fmt: skip
                    if lfs := snapshot.lfs_info(name, "oid"):
                        entry["lfs"] = lfs
                    entries.append(entry)
                self._json(200, entries)

            def _repo_info(self, key: str, revision: str, blobs: bool) -> None:
                """``GET /api/datasets/REPO/revision/REV`` (``HfApi.dataset_info``): the commit
                (``sha``) and the files (``siblings``, each ``rfilename``; with ``blobs=true``
                also ``size``, ``blobId`` and, for LFS files, ``lfs`` with ``sha256``, ``size``
                and ``pointerSize``: ``hf_api.py::DatasetInfo`` reads these, huggingface_hub
                2.4.0, 2026-12-05). The real answer carries more (card data, tags, dates),
                which trainbox does not read."""
                repo = hub.repos.get(key)
                if not self._visible(repo, listing=True):
                    return
                if (found := self._at(repo, revision)) is None:
                    return
                commit, snapshot = found
                siblings = []
                for name, data in sorted(snapshot.files.items()):
                    entry: dict = {"rfilename": name}
                    if blobs:
                        entry |= {"size": len(data), "blobId": snapshot.blob_id(name)}
                        if lfs := snapshot.lfs_info(name, "sha256"):
                            entry["lfs"] = lfs
                    siblings.append(entry)
                self._json(200, {"id": key.split("/", 1)[1], "sha": commit,
                                 "private": repo.private, "siblings": siblings})  # fmt: skip

            def _tree(self, key: str, revision: str, folder: str, recursive: bool) -> None:
                """``GET /api/datasets/REPO/tree/REV/PATH`` (``HfApi.list_repo_tree``, which
                ``HfFileSystem.ls`` uses): the files (``type``, ``path``, ``size``, ``oid``, and
                ``lfs`` with ``oid`` = sha256) and folders (``type``, ``path``, ``oid``) under
                PATH; a PATH that is neither is 404 ``EntryNotFound``. One page: the real Hub
                pages long listings with a ``Link`` header, which the client follows. A folder's
                ``oid`` here is a hash of its path, not its git tree id (nothing reads it)."""
                repo = hub.repos.get(key)
                if (
                    not self._visible(repo, listing=True)
                    or (found := self._at(repo, revision)) is None
                ):
                    return
                snapshot = found[1]
                prefix = f"{folder}/" if folder else ""
                entries, folders = [], set()
                for name in sorted(snapshot.files):
                    if not name.startswith(prefix):
                        continue
                    rest = name[len(prefix) :]
                    if "/" in rest and not recursive:
                        folders.add(prefix + rest.split("/", 1)[0])
                        continue
                    if recursive:
                        parts = rest.split("/")[:-1]
                        folders |= {prefix + "/".join(parts[: i + 1]) for i in range(len(parts))}
                    data = snapshot.files[name]
                    entry = {"type": "file", "path": name, "size": len(data),
                             "oid": snapshot.blob_id(name)}  # fmt: skip
                    if lfs := snapshot.lfs_info(name, "oid"):
                        entry["lfs"] = lfs
                    entries.append(entry)
                if folder and not entries and not folders:
                    self._error(404, "EntryNotFound", headers={"X-Repo-Commit": found[0]})
                    return
                tree_id = hashlib.sha1(folder.encode()).hexdigest()
                dirs = [{"type": "directory", "path": f, "oid": tree_id} for f in sorted(folders)]
                self._json(200, dirs + entries)

            def _preupload(self, key: str, spec: dict) -> None:
                if key not in hub.repos:
                    self._error(404, "RepoNotFound", "Repository not found")
                    return
                files = []
                for f in spec.get("files", []):
                    sample = base64.b64decode(f.get("sample", ""))
                    mode = upload_mode(f["path"], int(f.get("size", len(sample))), sample)
                    with hub._lock:
                        hub.upload_modes.append((key, f["path"], mode))
                    files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False})
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

            def _commit(self, key: str, revision: str, body: bytes) -> None:
                repo = hub.repos.get(key)
                if repo is None:
                    self._error(404, "RepoNotFound")
                    return
                if revision != "main":
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                    return
                files: dict[str, bytes] = {}
                lfs: set[str] = set()
                deleted: list[str] = []
                parent = None
                for line in body.decode().splitlines():
                    entry = json.loads(line)
                    value = entry.get("value", {})
                    if entry["key"] == "header":
                        parent = value.get("parentCommit")
                    elif entry["key"] == "lfsFile":
                        if value["oid"] not in hub.uploads:
                            self._error(400, None, f"LFS object {value['oid']} was not uploaded")
                            return
                        files[value["path"]] = hub.uploads[value["oid"]]
                        lfs.add(value["path"])
                    elif entry["key"] == "file":
                        data = base64.b64decode(value["content"])
                        if is_binary(data[:512]):
                            self._error(400, None, "Your push was rejected because it contains "
                                        "binary files.")  # fmt: skip
                            return
                        files[value["path"]] = data
                    elif entry["key"] == "deletedFile":
                        deleted.append(value["path"])
                    elif entry["key"] == "deletedFolder":
                        deleted.append(value["path"].rstrip("/") + "/")
                if "README.md" in files and (errors := card_errors(
                        files["README.md"].decode(errors="replace"))):  # fmt: skip
                    self._error(400, None, "Invalid metadata in README.md.\n"
                                + "\n".join(f"- {e}" for e in errors))  # fmt: skip
                    return
                with hub._lock:
                    head = repo.commits[-1] if repo.commits else None
                    stale = parent is not None and parent != head
                    oid = None if stale else repo.commit(files, lfs, tuple(deleted))
                if oid is None:
                    self._error(412, None, BRANCH_MOVED)
                    return
                self._json(200, {"commitUrl": f"{hub.url}/{key}/commit/{oid}", "commitOid": oid})

            do_GET = do_HEAD = do_POST = do_PUT = _dispatch

        return Handler
