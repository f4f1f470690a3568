"""The Hugging Face Hub: the token, file metadata, byte streams and uploads, with clear errors.

huggingface_hub does auth, metadata and error decoding. File bytes are streamed with urllib,
which is several times faster than the client's own HTTP stack for one large file, and a
dropped connection is resumed with a Range request where it stopped.
"""

import http.client
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub import errors as hub_errors
from huggingface_hub.utils import build_hf_headers

from . import __version__
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")

CHUNK = 1 << 20
RETRIES = 6
RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}
T = TypeVar("T")


class HubUnreachable(TrainboxError):
    """The Hub could not be reached, or kept failing, after every retry."""

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


def status_of(err: BaseException) -> int | None:
    """The HTTP status of a client (``response.status_code``) or urllib (``code``) error."""
    status = getattr(getattr(err, "response", None), "status_code", None) or getattr(
        err, "code", None
    )
    return status if isinstance(status, int) else None


def is_network_error(err: BaseException) -> bool:
    """A failure to talk to the Hub at all (no HTTP answer): transport or OS errors."""
    if status_of(err) is not None or isinstance(err, hub_errors.HfHubHTTPError):
        return False  # an answer, even if an error (the client's errors are OSErrors too)
    return isinstance(err, OSError) or any(
        c.__name__ == "TransportError" for c in type(err).__mro__
    )


def is_hub_failure(err: BaseException) -> bool:
    """The Hub answered with an error, or could not be reached: not a bug of ours."""
    return isinstance(err, hub_errors.HfHubHTTPError) or is_network_error(err)


def is_transient(err: BaseException, extra_status: frozenset[int] = frozenset()) -> bool:
    """Worth retrying: 408, 429, 5xx (and ``extra_status``), or a network failure."""
    status = status_of(err)
    if status is not None:
        return status in RETRYABLE_STATUS or status in extra_status
    return is_network_error(err)


def explain(
    err: Exception, repo: str, name: str = "", revision: str = "", setting: str = "DATASET_REPO"
) -> TrainboxError:
    """One line that says what a Hub error means for the user, and what to do."""
    if isinstance(err, hub_errors.GatedRepoError):
        return TrainboxError(
            f"{setting}={repo}: gated; accept its conditions on the Hub with the account "
            "whose token is HF_TOKEN",
            ExitCode.DATASET,
        )
    if isinstance(err, hub_errors.RevisionNotFoundError):
        return TrainboxError(
            f"DATASET_REVISION={revision}: no such branch, tag or commit in {repo}",
            ExitCode.DATASET,
        )
    if isinstance(err, hub_errors.RemoteEntryNotFoundError):
        return TrainboxError(
            f"DATASET_FILE={name}: not in {repo} at {revision}; set DATASET_FILE to the tar's name",
            ExitCode.DATASET,
        )
    if isinstance(err, hub_errors.RepositoryNotFoundError):
        return TrainboxError(
            f"{setting}={repo}: not found, or private and HF_TOKEN cannot read it; "
            "check the name, or set HF_TOKEN (or HF_TOKEN_FILE)",
            ExitCode.DATASET,
        )
    status = status_of(err)
    if status in (401, 403):
        return TrainboxError(
            f"the Hub refused HF_TOKEN ({status}): it is invalid, expired or lacks access; "
            "make a new token at https://huggingface.co/settings/tokens",
            ExitCode.DATASET,
        )
    return HubUnreachable(
        f"the Hub failed for {repo} ({status or type(err).__name__}): it may be down; "
        "start again later, nothing already staged is lost"
    )


def retrying(
    action: Callable[[], T],
    what: str,
    retries: int = RETRIES,
    extra_status: frozenset[int] = frozenset(),
) -> T:
    """Run ``action``, retrying connection errors, 429 and 5xx with exponential backoff."""
    for attempt in range(retries + 1):
        try:
            return action()
        except Exception as err:
            if not is_transient(err, extra_status) or attempt == retries:
                raise
            delay = min(2**attempt, 30)
            log.warning(
                "%s: %s; retrying in %ss", what, status_of(err) or type(err).__name__, delay
            )
            time.sleep(delay)
    raise AssertionError("unreachable")


def remote_file(
    repo: str, name: str, revision: str, *, repo_type: str = "dataset", retries: int = RETRIES
) -> RemoteFile:
    """Resolve a file's commit, size and hash with one metadata request (no download)."""
    url = hf_hub_url(repo, name, repo_type=repo_type, revision=revision)
    try:
        meta = retrying(
            lambda: get_hf_file_metadata(
                url, token=token(), library_name="trainbox", library_version=__version__
            ),
            f"metadata of {repo}/{name}",
            retries,
        )
    except Exception as err:
        if not is_hub_failure(err):
            raise
        raise explain(err, repo, name, revision) from None
    return RemoteFile(
        repo,
        name,
        revision,
        meta.commit_hash or "",
        meta.size or 0,
        (meta.etag or "").strip('"'),
        url,
    )


def _open(url: str, offset: int) -> http.client.HTTPResponse:
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"})
    for key, value in build_hf_headers(token=token(), library_name="trainbox").items():
        # Unredirected: the token never follows a redirect to a CDN.
        request.add_unredirected_header(key, value)
    return urllib.request.urlopen(request, timeout=60)


def stream(remote: RemoteFile, offset: int = 0) -> Iterator[bytes]:
    """The file's bytes from ``offset``, resuming where a dropped connection stopped."""
    failures = 0
    while offset < remote.size:
        try:
            with _open(remote.url, offset) as response:
                if offset and response.status != 206:
                    raise HubUnreachable(f"{remote.url}: the server ignored a Range request")
                while chunk := response.read(CHUNK):
                    offset += len(chunk)
                    failures = 0
                    yield chunk
            if offset < remote.size:
                raise ConnectionError(f"connection closed at byte {offset} of {remote.size}")
        except urllib.error.HTTPError as err:
            if err.code not in RETRYABLE_STATUS:
                raise explain(err, remote.repo, remote.name, remote.revision) from None
            failures = _backoff(failures, f"HTTP {err.code}", remote)
        except (OSError, http.client.HTTPException) as err:
            failures = _backoff(failures, str(err) or type(err).__name__, remote)


def _backoff(failures: int, reason: str, remote: RemoteFile) -> int:
    if failures >= RETRIES:
        raise HubUnreachable(
            f"downloading {remote.repo}/{remote.name} failed {failures + 1} times ({reason}); "
            "start again later"
        )
    delay = min(2**failures, 30)
    log.warning("download of %s: %s; resuming in %ss", remote.name, reason, delay)
    time.sleep(delay)
    return failures + 1


def upload(repo: str, local: Path, name: str, *, private: bool, repo_type: str = "dataset") -> str:
    """Create the repo if missing (private if asked) and commit one file; return the commit."""
    api = HfApi(token=token(), library_name="trainbox", library_version=__version__)
    try:
        retrying(
            lambda: api.create_repo(repo, repo_type=repo_type, private=private, exist_ok=True),
            f"create {repo}",
        )
        info = retrying(
            lambda: api.upload_file(
                path_or_fileobj=str(local),
                path_in_repo=name,
                repo_id=repo,
                repo_type=repo_type,
                commit_message=f"trainbox: {name}",
            ),
            f"upload {name}",
        )
    except Exception as err:
        if not is_hub_failure(err):
            raise
        raise explain(err, repo, setting="--repo") from None
    return info.oid
