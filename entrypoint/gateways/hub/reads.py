"""Reading from the Hub: a file's metadata, its bytes, a repo's listing, the client's cache.

File bytes are streamed with urllib, which is several times faster than the client's own
HTTP stack for one large file, and a dropped connection is resumed with a Range request. A
file that another library loads by its Hub id (transformers: a DINOv2 teacher) is downloaded
by the client itself instead (``cache``), into its own cache, where that library looks.
"""

import http.client
import logging
import os
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from entrypoint import __version__
from entrypoint.gateways.hub import session
from entrypoint.gateways.hub.errors import WAIT, T, Unreachable, absent_as_none, call, unreachable
from entrypoint.gateways.hub.session import Target, _hf, api, token, url

__all__ = (
    "Listing",
    "RemoteFile",
    "cache",
    "content",
    "download",
    "fetch",
    "find",
    "in_cache",
    "listing",
    "locate",
    "read",
    "read_remote",
    "remote_file",
    "stream",
)


log = logging.getLogger("trainbox")

CHUNK = 1 << 20


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
    return urllib.request.urlopen(request, timeout=session.TIMEOUT)  # the client's too


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
