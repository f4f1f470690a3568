"""One container per volume (per node): a second ``trainbox run`` on the same volume refuses to
start, before it writes anything there.

The lock is ``flock`` on ``/workspace/trainbox/lock-nodeN``, held by ``trainbox run`` for its
whole life: the kernel drops it when the process ends, however it ends, so a crash or a kill
never leaves it stuck. It covers containers of one host (a local or bind-mounted volume);
on a network file system, flock is only as good as that file system's locking.
"""

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ExitCode, TrainboxError


@contextmanager
def volume(workspace: Path, node_rank: int) -> Iterator[None]:
    """Hold the volume for this container, or raise the one line that says who holds it."""
    path = workspace / "trainbox" / f"lock-node{node_rank}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # the preflight's words: this is the first write to the volume
        raise TrainboxError(
            f"{workspace} is not writable ({err.strerror}): mount a writable volume there",
            ExitCode.PREFLIGHT,
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise TrainboxError(
                f"{workspace} is in use by another trainbox container ({holder}): stop it, or "
                "give this container a volume of its own",
                ExitCode.VOLUME_IN_USE,
            ) from None
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(
            fd, f"host {socket.gethostname()}, pid {os.getpid()}, since {stamp}\n".encode(), 0
        )
        yield
    finally:
        os.close(fd)
