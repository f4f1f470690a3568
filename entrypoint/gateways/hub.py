"""The one gateway to the Hugging Face Hub: every Hub call of trainbox goes through here.

- One classification (``classify``): the Hub *said no* (``ABSENT``: the repo, revision or
  file is not there, by its ``X-Error-Code``; ``REFUSED``: any other definite 4xx, the token
  among them) against the Hub *could not be asked* (``UNREACHABLE``: no connection, a
  timeout, 408, 429, any 5xx, or the client's ``LocalEntryNotFoundError``, which
  huggingface_hub raises for all of those when nothing is cached: read in huggingface_hub
  2.4.0, ``file_download._raise_on_head_call_error``, 2026-11-30).
- One retry policy (``call``): what is unreachable is retried with exponential backoff (1 s
  doubling to 30 s) until a deadline (``HUB_WAIT`` seconds); a definite answer is never
  retried, except 412 on a commit (the branch moved). The client's own retries (5 for
  uploads' preupload, LFS batch and PUT) run inside each attempt.
- One mapping to exit codes and one-line messages (``refusal``, ``Unreachable``): a refusal
  of the dataset is exit 3, of OUTPUT_REPO exit 7; a Hub that cannot be asked is exit 5.
- Requests time out: huggingface_hub's own client has no timeout (``timeout=None`` in
  ``utils/_http.default_client_factory``), so a hanging Hub would hang a commit forever.

File bytes are streamed with urllib, which is several times faster than the client's own
HTTP stack for one large file, and a dropped connection is resumed with a Range request. A
file that another library loads by its Hub id (transformers: a DINOv2 teacher) is downloaded
by the client itself instead (``cache``), into its own cache, where that library looks.
"""

import errno
import functools
import http.client
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from entrypoint import __version__
from entrypoint.errors import ExitCode, TrainboxError

if TYPE_CHECKING:
    from huggingface_hub import CommitInfo, CommitOperationAdd, CommitOperationDelete, HfApi

log = logging.getLogger("trainbox")

CHUNK = 1 << 20
WAIT = 300  # seconds a step waits for an unreachable Hub, unless HUB_WAIT says otherwise
TIMEOUT = 120  # seconds a request waits for a byte: a hung Hub fails an attempt, not the run
ABSENT, REFUSED, UNREACHABLE = "absent", "refused", "unreachable"
T = TypeVar("T")
listeners: list[Callable[[str], None]] = []  # told of every wait (the job: the status file)


# hf_xet's own timeouts and retries (its defaults: connect 60 s, read 300 s, 5 retries from
# 3 s; it has no write timeout, and a shard upload no read timeout), shortened so that a
# transfer left behind by ``_bounded`` mostly ends within a minute. Durations need their unit:
# a bare "5" is ignored (hf_xet logs "cannot be parsed ... reverting to default" only in its
# own log file). A value already in the environment wins. The caps bound HF_HOME/xet on the
# volume (by default its shard cache may grow to 16 GB and its logs to 250 MB).
XET_SHARD_CACHE, XET_LOGS = 2 * 10**9, 50 * 10**6  # bytes HF_HOME/xet may hold, at most
XET_SETTINGS = {
    "HF_XET_CLIENT_CONNECT_TIMEOUT": "10s",
    "HF_XET_CLIENT_READ_TIMEOUT": "30s",
    "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "1",  # retries: 2 attempts in all
    "HF_XET_CLIENT_RETRY_BASE_DELAY": "1s",
    "HF_XET_CLIENT_RETRY_MAX_DURATION": "10s",  # the longest single wait between attempts
    "HF_XET_SHARD_CACHE_SIZE_LIMIT": f"{XET_SHARD_CACHE // 10**6}MB",
    "HF_XET_LOG_DIR_MAX_SIZE": f"{XET_LOGS // 10**6}MB",
}


@functools.cache
def _hf() -> Any:
    """huggingface_hub, imported on first use and set up once. Imported with the module, it and
    httpx2 took 0.13 s of the start of every trainbox process (python -X importtime), the
    training program's and those beside it included, which never talk to the Hub."""
    for key, value in XET_SETTINGS.items():  # read by hf_xet when its session starts
        os.environ.setdefault(key, value)
    import httpx2
    import huggingface_hub
    import huggingface_hub.errors
    import huggingface_hub.utils
    from huggingface_hub.utils._http import default_client_factory

    # huggingface_hub gives its logger a stderr handler of its own at import (utils/logging.py,
    # _configure_library_root_logger) and lets records propagate too: each of its lines, a
    # retry ("Retrying in 1s [Retry 1/5]"), reached the container's log twice. trainbox's
    # handler alone prints them now, prefixed like every other line.
    logging.getLogger("huggingface_hub").handlers.clear()

    def client() -> httpx2.Client:
        """huggingface_hub's own client, with timeouts."""
        made = default_client_factory()
        made.timeout = httpx2.Timeout(TIMEOUT, connect=10)
        return made

    huggingface_hub.set_client_factory(client)
    return huggingface_hub


def url(repo: str, name: str, revision: str, repo_type: str = "dataset") -> str:
    """The resolve URL of ``name`` in ``repo`` at ``revision``."""
    return _hf().hf_hub_url(repo, name, repo_type=repo_type, revision=revision)


@dataclass(frozen=True)
class Target:
    """What a call is about, for its error message: the setting that names the repo."""

    setting: str  # DATASET_REPO, OUTPUT_REPO or --repo
    repo: str
    name: str = ""
    revision: str = "main"
    repo_type: str = "dataset"

    @property
    def code(self) -> ExitCode:
        """The exit code when the Hub refuses this repo."""
        return ExitCode.UPLOAD if self.setting == "OUTPUT_REPO" else ExitCode.DATASET


class Unreachable(TrainboxError):
    """The Hub could not be asked, for HUB_WAIT seconds: exit 5, nothing lost."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.HUB)


def token() -> str | None:
    """HF_TOKEN, else the content of the file HF_TOKEN_FILE names (docker secrets)."""
    if value := os.environ.get("HF_TOKEN", "").strip():
        return value
    if path := os.environ.get("HF_TOKEN_FILE", "").strip():
        try:
            return Path(path).read_text().strip() or None
        except OSError as err:
            raise TrainboxError(
                f"HF_TOKEN_FILE={path}: cannot read it ({err.strerror}); mount the secret there",
                ExitCode.CONFIG,
            ) from None
    return None


def api() -> "HfApi":
    """The client, with the token; no progress bars (one per file per epoch would drown the
    container's log)."""
    hf = _hf()
    hf.utils.disable_progress_bars()
    return hf.HfApi(token=token(), library_name="trainbox", library_version=__version__)


def status_of(err: BaseException) -> int | None:
    """The HTTP status of a client (``response.status_code``) or urllib (``code``) error."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    if status is None and isinstance(err, urllib.error.HTTPError):
        status = err.code
    return status if isinstance(status, int) else None


@functools.cache
def _no_answer() -> tuple[type[BaseException], ...]:
    """What a Hub that could not be asked raises."""
    import httpx2

    return (
        ConnectionError,
        TimeoutError,
        socket.gaierror,
        urllib.error.URLError,
        http.client.HTTPException,
        httpx2.TransportError,
        _hf().errors.LocalEntryNotFoundError,
    )  # fmt: skip  (the client's "nothing cached")


def classify(err: BaseException) -> str | None:
    """ABSENT, REFUSED or UNREACHABLE for a Hub failure; None for anything else (a bug, a
    local file error), which the caller lets through."""
    errors = _hf().errors
    if isinstance(err, errors.LocalEntryNotFoundError):
        return UNREACHABLE
    status = status_of(err)
    if status is not None:
        if status in (408, 429) or status >= 500:
            return UNREACHABLE
        if isinstance(err, errors.RevisionNotFoundError | errors.RemoteEntryNotFoundError):
            return ABSENT
        if isinstance(err, errors.RepositoryNotFoundError) and not isinstance(
            err, errors.GatedRepoError
        ):
            return ABSENT if status == 404 else REFUSED
        return REFUSED
    return UNREACHABLE if isinstance(err, _no_answer()) else None


def _why(err: BaseException) -> str:
    if isinstance(err, TransferFailed):
        return str(err)[:200]
    return str(status_of(err) or type(err).__name__)


def refusal(err: BaseException, target: Target) -> TrainboxError:
    """The one line for a definite no from the Hub, and its exit code."""
    setting, repo, code = target.setting, target.repo, target.code
    errors = _hf().errors
    if isinstance(err, errors.GatedRepoError):
        return TrainboxError(
            f"{setting}={repo}: gated; accept its conditions on the Hub with the account "
            "whose token is HF_TOKEN",
            code,
        )
    if isinstance(err, errors.RevisionNotFoundError):
        return TrainboxError(
            f"DATASET_REVISION={target.revision}: no such branch, tag or commit in {repo}", code
        )
    if isinstance(err, errors.RemoteEntryNotFoundError):
        return TrainboxError(
            f"DATASET_FILE={target.name}: not in {repo} at {target.revision}; set DATASET_FILE "
            "to the tar's name",
            code,
        )
    if isinstance(err, errors.RepositoryNotFoundError):
        return TrainboxError(
            f"{setting}={repo}: not found, or private and HF_TOKEN cannot read it; check the "
            "name, or set HF_TOKEN (or HF_TOKEN_FILE)",
            code,
        )
    access = "write" if setting == "OUTPUT_REPO" else "read"
    if status_of(err) in (401, 403):
        return TrainboxError(
            f"the Hub refused HF_TOKEN for {setting}={repo} ({status_of(err)}): it is invalid, "
            f"expired or cannot {access} it; make a token with {access} access at "
            "https://huggingface.co/settings/tokens",
            code,
        )
    return TrainboxError(f"the Hub refused a request for {setting}={repo}: {err}", code)


def unreachable(target: Target, what: str, why: str, waited: float) -> Unreachable:
    return Unreachable(
        f"cannot ask the Hub for {target.setting}={target.repo} ({what}: {why}, for "
        f"{waited:.0f} s): it may be down; start again later (HUB_WAIT sets how long to wait), "
        "nothing on the volume or the Hub was changed"
    )


def call(
    action: Callable[[], T],
    what: str,
    target: Target,
    *,
    wait: float = WAIT,
    retry_status: frozenset[int] = frozenset(),
) -> T:
    """Run ``action``: an unreachable Hub is retried with backoff for ``wait`` seconds, then
    ``Unreachable``; a refusal raises its one line. ``retry_status`` are definite answers worth
    another try (412 on a commit). Every wait is logged and told to ``listeners``."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return action()
        except Exception as err:
            kind = classify(err)
            if kind is None:
                raise
            if kind != UNREACHABLE and status_of(err) not in retry_status:
                raise refusal(err, target) from None
            waited = time.monotonic() - started
            if waited >= wait:
                raise unreachable(target, what, _why(err), waited) from None
            delay = min(2**attempt, 30, wait - waited)
            message = f"{what}: {_why(err)} from the Hub; retrying in {delay:.0f} s"
            log.warning("%s", message)
            for listener in listeners:
                listener(message)
            time.sleep(delay)
            attempt += 1


def absent_as_none(action: Callable[[], T]) -> Callable[[], T | None]:
    """``action``, answering None when the Hub says definitely that the thing is not there."""

    def run() -> T | None:
        try:
            return action()
        except Exception as err:
            if classify(err) == ABSENT:
                return None
            raise

    return run


@dataclass(frozen=True)
class RemoteFile:
    """One file of a Hub repo at a resolved commit."""

    repo: str
    name: str
    revision: str
    commit: str
    size: int
    etag: str
    url: str

    @property
    def sha256(self) -> str | None:
        """The file's sha256 when the Hub states it (LFS and xet files: the ETag)."""
        return self.etag if re.fullmatch(r"[0-9a-f]{64}", self.etag) else None


def _metadata(target: Target) -> RemoteFile:
    where = url(target.repo, target.name, target.revision, target.repo_type)
    meta = _hf().get_hf_file_metadata(
        where, token=token(), library_name="trainbox", library_version=__version__
    )
    return RemoteFile(target.repo, target.name, target.revision, meta.commit_hash or "",
                      meta.size or 0, (meta.etag or "").strip('"'), where)  # fmt: skip


def remote_file(target: Target, *, wait: float = WAIT) -> RemoteFile:
    """Resolve a file's commit, size and hash with one metadata request (no download)."""
    return call(lambda: _metadata(target), f"metadata of {target.name}", target, wait=wait)


def locate(target: Target, *, wait: float = WAIT) -> RemoteFile | None:
    """A file's metadata; None when the Hub says definitely that it (or its repo) is not
    there."""
    return call(absent_as_none(lambda: _metadata(target)), f"ask for {target.name}", target,
                wait=wait)  # fmt: skip


def find(target: Target, *, wait: float = WAIT) -> RemoteFile | None:
    """A file's metadata; None when the Hub says that this file is not in the repo at that
    revision. A missing repo or revision is refused as by ``remote_file``."""

    def metadata() -> RemoteFile | None:
        try:
            return _metadata(target)
        except _hf().errors.RemoteEntryNotFoundError:
            return None

    return call(metadata, f"ask for {target.name}", target, wait=wait)


def read(target: Target, *, wait: float = WAIT) -> tuple[bytes, str] | None:
    """A small file's bytes and the commit they are from; None when the Hub says it (or its
    repo) is not there. Anything but a definite answer waits, then raises."""
    remote = locate(target, wait=wait)
    if remote is None:
        return None
    return content(remote, wait=wait, target=target), remote.commit


def content(remote: RemoteFile, *, wait: float = WAIT, target: Target | None = None) -> bytes:
    """A small file's bytes at the commit ``remote`` was resolved to, even if its branch has
    moved on since."""
    where = url(remote.repo, remote.name, remote.commit, target.repo_type if target else "dataset")
    return b"".join(stream(replace(remote, url=where), wait=wait, target=target))


def download(target: Target, path: Path, *, wait: float = WAIT) -> str | None:
    """Download a file to ``path`` (atomically: a ``.part`` file renamed); return its commit,
    or None when the Hub says it is not there."""
    remote = locate(target, wait=wait)
    if remote is None:
        return None
    part = path.with_name(f".{path.name}.part")
    with open(part, "wb") as out:
        for chunk in stream(remote, wait=wait, target=target):
            out.write(chunk)
    os.replace(part, path)
    return remote.commit


def in_cache(target: Target) -> Path | None:
    """The file the Hub client's own cache (HF_HOME) holds for ``target``; asks nothing."""
    found = _hf().try_to_load_from_cache(
        target.repo, target.name, revision=target.revision, repo_type=target.repo_type
    )
    return Path(found) if isinstance(found, str) else None


def cache(target: Target, *, wait: float = WAIT) -> Path | None:
    """Download a file into the Hub client's own cache (HF_HOME), by the client itself (through
    Xet where the Hub stores it so), for a library that loads it from there by its Hub id; None
    when the Hub says it is not there. The client writes each file to an ``.incomplete`` file
    of its own and renames it; a failed attempt deletes that file, so the next starts over
    (huggingface_hub 2.4.0, ``file_download._download_to_tmp_and_move``, read 2026-12-03)."""

    def download() -> Path:
        return Path(
            _hf().hf_hub_download(
                target.repo, target.name, repo_type=target.repo_type,
                revision=target.revision, token=token(), library_name="trainbox",
                library_version=__version__,
            )
        )  # fmt: skip

    return call(absent_as_none(download), f"download {target.name}", target, wait=wait)


@dataclass(frozen=True)
class Listing:
    """Every file of a repo at one commit, with its size and (LFS, Xet) sha256."""

    repo: str
    revision: str
    commit: str
    files: tuple[RemoteFile, ...]


def listing(target: Target, *, wait: float = WAIT) -> Listing:
    """The repo's files at ``target.revision``, resolved to one commit, from one request
    (``dataset_info`` with ``files_metadata``: the Hub's ``/revision/REV?blobs=true``); nothing
    is downloaded."""

    def ask() -> Listing:
        info = api().dataset_info(target.repo, revision=target.revision, files_metadata=True)
        commit = info.sha or ""
        files = tuple(
            RemoteFile(
                target.repo,
                s.rfilename,
                target.revision,
                commit,
                s.size or 0,
                s.lfs.sha256 if s.lfs else (s.blob_id or ""),
                url(target.repo, s.rfilename, commit),
            )
            for s in info.siblings or ()
        )
        return Listing(target.repo, target.revision, commit, files)

    return call(ask, f"list the files of {target.repo}", target, wait=wait)


def fetch(remote: RemoteFile, into: Path, *, wait: float = WAIT) -> Path:
    """Download one file of a listing, at its commit, to ``into/NAME`` by the Hub client
    itself (Xet where the Hub stores it so). The client keeps what it fetched in ``into``'s
    ``.cache/huggingface`` and downloads a file again only if it changed, so a cut staging
    does not fetch the finished files twice (huggingface_hub 2.4.0,
    ``file_download._hf_hub_download_to_local_dir``, read 2026-12-05)."""
    target = Target("DATASET_REPO", remote.repo, remote.name, remote.revision)

    def download() -> Path:
        return Path(
            _hf().hf_hub_download(
                remote.repo, remote.name, repo_type="dataset", revision=remote.commit,
                local_dir=into, token=token(), library_name="trainbox",
                library_version=__version__,
            )
        )  # fmt: skip

    return call(download, f"download {remote.name}", target, wait=wait)


def read_remote(remote: RemoteFile, reader: Callable[[IO[bytes]], T], *, wait: float = WAIT) -> T:
    """``reader``'s answer on a file of a listing, opened at its commit and fetched by ranges
    as it is read (the Hub client's ``HfFileSystem``): a parquet footer costs a request or two,
    not the file. The Hub's errors while it reads are this gateway's."""
    target = Target("DATASET_REPO", remote.repo, remote.name, remote.revision)

    def read() -> T:
        files = _hf().HfFileSystem(token=token())
        with files.open(f"datasets/{remote.repo}@{remote.commit}/{remote.name}", "rb") as handle:
            return reader(handle)

    return call(read, f"read {remote.name}", target, wait=wait)


def _open(url: str, offset: int) -> http.client.HTTPResponse:
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"})
    for key, value in _hf().utils.build_hf_headers(token=token(), library_name="trainbox").items():
        # Unredirected: the token never follows a redirect to a CDN.
        request.add_unredirected_header(key, value)
    return urllib.request.urlopen(request, timeout=TIMEOUT)


def stream(
    remote: RemoteFile, offset: int = 0, *, wait: float = WAIT, target: Target | None = None
) -> Iterator[bytes]:
    """The file's bytes from ``offset``, resuming where a dropped connection stopped; it gives
    up when no byte arrived for ``wait`` seconds. ``target``: a dataset file by default."""
    target = target or Target("DATASET_REPO", remote.repo, remote.name, remote.revision)
    progress_at = time.monotonic()
    while offset < remote.size:

        def attempt(start: int = offset) -> http.client.HTTPResponse:
            response = _open(remote.url, start)
            if start and response.status != 206:
                response.close()
                raise Unreachable(f"{remote.url}: the server ignored a Range request")
            return response

        left = wait - (time.monotonic() - progress_at)
        with call(attempt, f"download of {remote.name}", target, wait=left) as response:
            try:
                while chunk := response.read(CHUNK):
                    offset += len(chunk)
                    progress_at = time.monotonic()
                    yield chunk
            except (OSError, http.client.HTTPException) as err:
                log.warning("download of %s: %s; resuming", remote.name, err or type(err).__name__)
        if offset < remote.size:
            if time.monotonic() - progress_at > wait:
                raise unreachable(target, f"download of {remote.name}", "no bytes",
                                  time.monotonic() - progress_at)  # fmt: skip
            time.sleep(1)  # closed early: don't spin


def ensure_repo(target: Target, *, private: bool, wait: float = WAIT) -> None:
    """Create the repo unless it exists (private if asked)."""
    client = api()
    call(
        lambda: client.create_repo(
            target.repo, repo_type=target.repo_type, private=private, exist_ok=True
        ),
        f"create {target.repo}",
        target,
        wait=wait,
    )


class BranchMoved(Exception):
    """A commit on top of a given parent found the branch elsewhere: look again, retry."""


# huggingface_hub documents only that such a commit fails (hf_api.create_commit,
# ``parent_commit``); the Hub answers 412 (and 409 has been reported): both mean "moved".
MOVED_STATUS = (409, 412)


class TransferFailed(ConnectionError):
    """hf_xet failed a transfer without a status to tell why: the Hub could not be asked, as
    far as trainbox can tell (waited out)."""


# What an unwritable or full disk looks like when hf_xet writes its cache (HF_HOME/xet).
LOCAL_DISK = (errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EROFS, errno.EDQUOT)


def _transfer_error(err: Exception, target: Target) -> Exception:
    """What an upload's transfer raised, as the gateway tells it. hf_xet 1.8.0 raises
    ``ConnectionError`` for every HTTP status and network error, ``TimeoutError``, ``OSError``
    for its own file I/O, ``ValueError``/``RuntimeError`` for the rest, and two classes of its
    own: ``XetAuthenticationError`` (a ``PermissionError``) and ``XetObjectNotFoundError`` (a
    ``FileNotFoundError``) (xet-core ``xet_pkg/src/error.rs``, checked in the wheel,
    2026-12-01). A Hub answer or a network error stays as it is; a refused Xet token is the
    token's line; the local disk its own line (both exit 7); anything else ``TransferFailed``."""
    try:
        import hf_xet
    except ImportError:  # an install without it uploads through LFS only
        hf_xet = None
    if classify(err) is not None:
        return err
    if isinstance(err, getattr(hf_xet, "XetAuthenticationError", ())):
        return TrainboxError(
            f"the Hub's Xet storage refused HF_TOKEN for {target.setting}={target.repo} ({err}); "
            "make a token with write access at https://huggingface.co/settings/tokens",
            target.code,
        )
    theirs = isinstance(err, getattr(hf_xet, "XetObjectNotFoundError", ()))
    if (
        not theirs
        and isinstance(err, OSError)
        and (type(err) in (OSError, PermissionError, FileNotFoundError) or err.errno in LOCAL_DISK)
    ):
        cache = _hf().constants.HF_XET_CACHE
        return TrainboxError(
            f"upload to {target.setting}={target.repo}: a local file or the xet cache {cache} "
            f"cannot be written or read ({err}); free space on the volume or make it writable",
            target.code,
        )
    return TransferFailed(f"{type(err).__name__}: {err}")


# A transfer is given up when slower than this on average, after a minute's slack: a slow
# uplink still gets its checkpoint out (a cycle's wait, UPLOAD_INTERVAL, is far shorter than
# the upload of a large checkpoint), a stuck one does not hold the cycles for good.
FLOOR_RATE, SLACK = 1e6, 60.0  # bytes per second, seconds
_abandoned_at = [0.0]  # transfers started up to this time.monotonic() are given up


def abandon() -> None:
    """Give up every transfer in flight: a stop's final upload starts afresh, not behind an
    upload cycle's transfer of an older snapshot."""
    _abandoned_at[0] = time.monotonic()


def _bounded(transfer: Callable[[], object], deadline: float, target: Target) -> None:
    """Run ``transfer`` (the file bytes of a commit), given up at ``deadline`` or by
    ``abandon``. hf_xet retries and times out on its own (one CAS answering 503 held a commit
    427 s; a hung xorb upload 300 s), and a thread inside it cannot be interrupted: it runs in
    a thread of its own, left to end by hf_xet's own timeouts (``XET_SETTINGS``)."""
    failed: list[Exception] = []

    def run() -> None:
        try:
            transfer()
        except Exception as err:
            failed.append(err)

    started = time.monotonic()
    worker = threading.Thread(target=run, name="hub-transfer", daemon=True)
    worker.start()
    while worker.is_alive() and time.monotonic() < deadline and _abandoned_at[0] < started:
        worker.join(min(0.5, max(0.01, deadline - time.monotonic())))
    if worker.is_alive() and _abandoned_at[0] >= started:  # not retried: the stop's upload goes
        raise TrainboxError("upload given up for the final upload", target.code)
    if worker.is_alive():
        raise TransferFailed("the upload was given up, still going after "
                             f"{time.monotonic() - started:.0f} s")  # fmt: skip
    if failed:
        raise _transfer_error(failed[0], target) from failed[0]


_xet_until: dict[tuple[str, str, str], float] = {}  # (endpoint, repo, revision): token expiry


def _xet_route(target: Target) -> None:
    """Ask the Hub for the Xet write token huggingface_hub will use (once per token lifetime):
    a refusal (401/403) is the token's line, a Hub-compatible mirror without Xet (a 404 that
    names no repo or revision) makes the uploads use LFS from now on, said once. hf_xet asks
    the same route itself, but reports a refusal as a bare ConnectionError."""
    hf = _hf()
    key = (hf.constants.ENDPOINT, target.repo, target.revision)
    if not hf.utils._runtime.is_xet_available() or _xet_until.get(key, 0) > time.time():
        return
    where = (f"{hf.constants.ENDPOINT}/api/{target.repo_type}s/{target.repo}/xet-write-token/"
             f"{target.revision}")  # fmt: skip
    headers = hf.utils.build_hf_headers(token=token(), library_name="trainbox",
                                        library_version=__version__)  # fmt: skip
    response = hf.utils.get_session().get(where, headers=headers)
    if response.status_code == 404 and "X-Error-Code" not in response.headers:
        log.warning("the Hub at HF_ENDPOINT=%s has no Xet storage (xet-write-token: 404): "
                    "uploads go through LFS", hf.constants.ENDPOINT)  # fmt: skip
        hf.constants.HF_HUB_DISABLE_XET = True
        return
    hf.utils.hf_raise_for_status(response)
    expires = response.json().get("exp") if response.content else None
    _xet_until[key] = (expires if isinstance(expires, int | float) else time.time() + 600) - 60


def commit(
    target: Target,
    operations: "list[CommitOperationAdd | CommitOperationDelete]",
    message: str,
    *,
    parent: str | None = None,
    wait: float = WAIT,
) -> "CommitInfo":
    """One commit of ``operations``. With ``parent``, only on top of that commit: when the
    branch moved, ``BranchMoved`` is raised (the caller looks again); without, a 412 is retried."""
    client = api()

    additions = [op for op in operations if isinstance(op, _hf().CommitOperationAdd)]
    budget = SLACK + sum(op.upload_info.size for op in additions) / FLOOR_RATE  # per attempt

    def transfer() -> None:
        """The bytes first, apart from the commit: hf_xet's errors are told from its."""
        _xet_route(target)
        client.preupload_lfs_files(target.repo, additions, repo_type=target.repo_type,
                                   revision=target.revision)  # fmt: skip

    def attempt() -> "CommitInfo":
        _bounded(transfer, time.monotonic() + budget, target)
        try:
            return client.create_commit(
                target.repo,
                operations,
                commit_message=message,
                repo_type=target.repo_type,
                parent_commit=parent,
            )
        except _hf().errors.HfHubHTTPError as err:
            if parent and status_of(err) in MOVED_STATUS:
                raise BranchMoved(f"{target.repo} moved past {parent[:12]}") from None
            raise

    return call(attempt, message, target, wait=wait,
                retry_status=frozenset() if parent else frozenset({412}))  # fmt: skip


def paths_info(target: Target, paths: list[str], *, wait: float = WAIT) -> dict[str, Any]:
    """What the Hub holds at ``paths``: {path: RepoFile}."""
    client = api()
    found = call(lambda: client.get_paths_info(target.repo, paths, repo_type=target.repo_type),
                 "paths-info", target, wait=wait)  # fmt: skip
    return {item.path: item for item in found}


def operations(
    files: dict[str, Path | bytes], delete: tuple[str, ...] = ()
) -> "list[CommitOperationAdd | CommitOperationDelete]":
    """A commit's operations: add ``files`` (a local path or bytes each, by their path in the
    repo), delete the paths in ``delete``."""
    hf = _hf()
    added = [hf.CommitOperationAdd(name, str(data) if isinstance(data, Path) else data)
             for name, data in files.items()]  # fmt: skip
    return [*added, *(hf.CommitOperationDelete(name) for name in delete)]


def put(
    target: Target,
    files: dict[str, Path | bytes],
    message: str,
    *,
    delete: tuple[str, ...] = (),
    wait: float = WAIT,
) -> str:
    """One commit that adds ``files`` and deletes the paths in ``delete`` (only paths it holds:
    what the Hub answers for a missing one is not documented); return the commit."""
    return commit(target, operations(files, delete), message, wait=wait).oid
