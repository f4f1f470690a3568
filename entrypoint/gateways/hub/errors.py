"""What a Hub failure means, and what is done about it.

- One classification (``classify``): the Hub *said no* (``ABSENT``: the repo, revision or
  file is not there, by its ``X-Error-Code``; ``REFUSED``: any other definite 4xx, the token
  among them) against the Hub *could not be asked* (``UNREACHABLE``: no connection, a
  timeout, 408, 429, any 5xx, or the client's ``LocalEntryNotFoundError``, which
  huggingface_hub raises for all of those when nothing is cached: read in huggingface_hub
  2.4.0, ``file_download._raise_on_head_call_error``, 2026-11-30).
- One retry policy (``call``): what is unreachable is retried with exponential backoff (1 s
  doubling to 30 s) until a deadline (``HUB_WAIT`` seconds); a definite answer is never
  retried, except 412 on a commit (the branch moved). The client's own retries (5 for
  uploads' preupload, LFS batch and PUT) run inside each attempt. Every wait is logged on
  ``trainbox.hub`` with its text as the record's ``waiting``: ``told`` hands it to a callback.
- One mapping to exit codes and one-line messages (``refusal``, ``Unreachable``): a refusal
  of the dataset is exit 3, of OUTPUT_REPO exit 7; a Hub that cannot be asked is exit 5.
"""

import functools
import http.client
import logging
import socket
import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways.hub.session import Target, _hf

__all__ = (
    "ABSENT",
    "REFUSED",
    "UNREACHABLE",
    "WAIT",
    "Unreachable",
    "Waits",
    "absent_as_none",
    "call",
    "classify",
    "refusal",
    "told",
)


waits = logging.getLogger("trainbox.hub")  # each wait for the Hub: its text as ``waiting``

WAIT = 300  # seconds a step waits for an unreachable Hub, unless HUB_WAIT says otherwise
ABSENT, REFUSED, UNREACHABLE = "absent", "refused", "unreachable"
T = TypeVar("T")


class Unreachable(TrainboxError):
    """The Hub could not be asked, for HUB_WAIT seconds: exit 5, nothing lost."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.HUB)


def status_of(err: BaseException) -> int | None:
    """The HTTP status of a client (``response.status_code``) or urllib (``code``) error, or
    of the answer the client raised it from (huggingface_hub's ``ValueError`` "Invalid metadata
    in README.md" comes from the Hub's 400 to ``/api/validate-yaml``)."""
    if isinstance(err, ValueError) and err.__cause__ is not None:
        return status_of(err.__cause__)
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


class TransferFailed(ConnectionError):
    """hf_xet failed a transfer without a status to tell why: the Hub could not be asked, as
    far as trainbox can tell (waited out; ``deadlines``)."""


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
    said = " ".join(str(err).split())  # one line: the client's can span several
    return TrainboxError(f"the Hub refused a request for {setting}={repo}: {said}", code)


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
    another try (412 on a commit). Every wait is logged on ``trainbox.hub`` (``told``)."""
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
            waits.warning("%s", message, extra={"waiting": message})
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


class Waits(logging.Handler):
    """Hands ``callback`` the text of each wait for the Hub that ``call`` logs (the job: its
    status file; the uploader: its ledger, for ``trainbox status``)."""

    def __init__(self, callback: Callable[[str], None]) -> None:
        super().__init__()
        self.callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        if (waiting := getattr(record, "waiting", None)) is not None:
            self.callback(waiting)


@contextmanager
def told(callback: Callable[[str], None]) -> Iterator[None]:
    """``callback`` is told of every wait for the Hub, in any thread, while the block runs."""
    handler = Waits(callback)
    waits.addHandler(handler)
    try:
        yield
    finally:
        waits.removeHandler(handler)
