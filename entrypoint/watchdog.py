"""Watchdogs: a run never bills forever.

``MAX_RUNTIME`` bounds the container's whole life; ``STALL_TIMEOUT`` ends a run that makes no
progress (no staging bytes, no finished epoch, no train.log line). Training then stops, the
final upload runs, and the container exits with its own code (8 or 9) and the reason in its
status file.

Until supervisord starts, a timer in the job's own process checks the status file (a signal
interrupts even a read blocked on a stuck network). Under supervisord, the ``watchdog``
program checks it, keeps its training and upload fields fresh, and stops supervisord the way
``docker stop`` does: train gets SIGINT, then the uploader pushes the last epoch.
"""

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import status
from .atomic import write_atomic
from .config import Config
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")

CHECK_SECONDS = 2


def verdict(cfg: Config, state: dict[str, Any], now: float | None = None) -> TrainboxError | None:
    """The error that ends the run, or None while it is within its limits."""
    phase = state.get("phase", "?")
    running = status.age(state.get("started_at"), now)
    if cfg.max_runtime and running is not None and running >= cfg.max_runtime:
        return TrainboxError(
            f"MAX_RUNTIME={cfg.max_runtime} s reached during {phase}: stopped after a final "
            "upload; raise MAX_RUNTIME (or set 0) to train longer, a restart resumes",
            ExitCode.TIME_LIMIT,
        )
    quiet = status.age(state.get("progress_at"), now)
    if cfg.stall_timeout and quiet is not None and quiet >= cfg.stall_timeout:
        return TrainboxError(
            f"no progress for {quiet:.0f} s during {phase} (STALL_TIMEOUT={cfg.stall_timeout}): "
            f"{_diagnosis(cfg, phase)}",
            ExitCode.STALLED,
        )
    return None


def _diagnosis(cfg: Config, phase: str) -> str:
    if phase == "staging":
        return (
            "the download received nothing: the Hub or the network is stuck; start again "
            "later, staging resumes at its last checkpoint"
        )
    if phase == "training":
        try:
            last = cfg.run_dir.joinpath("train.log").read_text().strip().splitlines()[-1]
        except (OSError, IndexError):
            last = "(train.log is empty)"
        return (
            "no epoch finished and train.log is silent: a hung dataloader, disk or GPU, or an "
            "epoch longer than STALL_TIMEOUT (raise it); last train.log line: " + last[-200:]
        )
    return f"stuck in {phase}; see the lines above"


@contextmanager
def guard(cfg: Config) -> Iterator[None]:
    """In the job's own process: raise the watchdog's error in the main thread."""
    if not (cfg.max_runtime or cfg.stall_timeout):
        yield
        return

    def check(_signum: int, _frame: object) -> None:
        if error := verdict(cfg, status.read(cfg.workspace)):
            raise error

    # The handler must import nothing: a handler that imports, run while the main thread is
    # inside another import, breaks CPython 3.11's import locks (KeyError in
    # _ModuleLock.acquire; seen in CI during `import numpy`). time.strptime imports _strptime
    # on its first call: make that call now.
    status.age(status.iso())
    previous = signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS, CHECK_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refresh(cfg: Config) -> dict[str, Any]:
    """Copy libreyolo's progress and the upload state into the container's status."""
    training, progress_at = status.training(cfg.run_dir)
    stamps = (status.read(cfg.workspace).get("progress_at"), progress_at)
    progress_at = max(filter(None, stamps), default=None)
    upload = (
        status.upload(cfg.workspace, cfg.output_repo, cfg.run_name) if cfg.output_repo else None
    )
    status.record(cfg.workspace, "training", training=training, upload=upload,
                  profile=status.profile(cfg.run_dir), progress_at=progress_at)  # fmt: skip
    return status.read(cfg.workspace)


def program(cfg: Config, result: Path) -> int:
    """The supervised ``watchdog``: refresh the status; past a limit, record the exit code in
    ``result`` and stop supervisord (its parent) as ``docker stop`` would."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status.for_node(cfg.node_rank)
    while True:
        state = refresh(cfg)
        if error := verdict(cfg, state):
            log.error("watchdog: %s", error)
            write_atomic(result, f"{int(error.code)}\n")
            status.record(cfg.workspace, "training", reason=str(error))
            os.kill(os.getppid(), signal.SIGTERM)
            return int(error.code)
        time.sleep(CHECK_SECONDS)
