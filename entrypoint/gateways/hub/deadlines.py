"""How long a commit's bytes may take: a transfer runs within a deadline from its size, and
its owner (``Transfers``) can give up every one in flight; hf_xet's errors, told apart."""

import errno
import threading
import time
from collections.abc import Callable

from entrypoint.errors import TrainboxError
from entrypoint.gateways.hub.errors import TransferFailed, classify
from entrypoint.gateways.hub.session import Target, _hf

__all__ = ("Transfers",)


# A transfer is given up when slower than this on average, after a minute's slack: a slow
# uplink still gets its checkpoint out (a cycle's wait, UPLOAD_INTERVAL, is far shorter than
# the upload of a large checkpoint), a stuck one does not hold the cycles for good.
FLOOR_RATE, SLACK = 1e6, 60.0  # bytes per second, seconds


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


class Transfers:
    """The transfers of one owner (the uploader's, for its process's life; a one-off commit's
    own): when they were last given up, and until when each Xet write token holds."""

    def __init__(self) -> None:
        self.abandoned_at = 0.0  # transfers started up to this time.monotonic() are given up
        # (endpoint, repo, revision): the Xet write token's expiry, in time.time() seconds
        self.xet_until: dict[tuple[str, str, str], float] = {}

    def abandon(self) -> None:
        """Give up every transfer in flight: a stop's final upload starts afresh, not behind an
        upload cycle's transfer of an older snapshot."""
        self.abandoned_at = time.monotonic()

    def bounded(self, transfer: Callable[[], object], deadline: float, target: Target) -> None:
        """Run ``transfer`` (the file bytes of a commit), given up at ``deadline`` or by
        ``abandon``. hf_xet retries and times out on its own (one CAS answering 503 held a
        commit 427 s; a hung xorb upload 300 s), and a thread inside it cannot be interrupted:
        it runs in a thread of its own, left to end by hf_xet's own timeouts
        (``XET_SETTINGS``)."""
        failed: list[Exception] = []

        def run() -> None:
            try:
                transfer()
            except Exception as err:
                failed.append(err)

        started = time.monotonic()
        worker = threading.Thread(target=run, name="hub-transfer", daemon=True)
        worker.start()
        while worker.is_alive() and time.monotonic() < deadline and self.abandoned_at < started:
            worker.join(min(0.5, max(0.01, deadline - time.monotonic())))
        if worker.is_alive() and self.abandoned_at >= started:  # not retried: the stop's goes
            raise TrainboxError("upload given up for the final upload", target.code)
        if worker.is_alive():
            raise TransferFailed("the upload was given up, still going after "
                                 f"{time.monotonic() - started:.0f} s")  # fmt: skip
        if failed:
            raise _transfer_error(failed[0], target) from failed[0]
