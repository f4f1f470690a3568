"""The run's time budget, in one place: how ``STOP_GRACE`` is split between stopping
training and the final upload (handed to supervisord's template and the uploader), and the
seconds the container was billed without training.

In ``state``, below every program that needs it: the uploader and the job alike.
"""

import os
import time
from pathlib import Path
from typing import Any

from entrypoint.settings.launchers import Volume
from entrypoint.state import store

STOP_WAIT_SECONDS = 60  # at most, for training to stop; never more than half of STOP_GRACE
FLUSH_MARGIN_SECONDS = 5  # the uploader ends its final flush this long before the grace ends
MONITOR_STOP_SECONDS = 5  # supervisord's wait for the dashboard


def split(stop_grace: int) -> dict[str, int]:
    """STOP_GRACE, split: ``stop_wait_s`` for training to stop after a stop signal (at most
    half), ``flush_s`` for the final upload from the stop (the processes' exit gets the
    margin), ``monitor_stop_s`` for the dashboard."""
    return {
        "stop_grace_s": stop_grace,
        "stop_wait_s": min(STOP_WAIT_SECONDS, stop_grace // 2),
        "flush_s": max(0, stop_grace - FLUSH_MARGIN_SECONDS),
        "monitor_stop_s": MONITOR_STOP_SECONDS,
    }


def flush_left(stop_grace: int, stopped_at: float | None, now: float | None = None) -> float:
    """Seconds left for the final upload: ``flush_s`` from the stop signal, or from now when
    training ended on its own."""
    now = time.time() if now is None else now
    return (stopped_at or now) + split(stop_grace)["flush_s"] - now


def process_started() -> float:
    """When this process started, from /proc (``trainbox run`` is exec'd by the image's
    entrypoint as the container starts); now, where /proc cannot tell."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
        return min(time.time(), boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def billed(volume: Volume, end: float) -> dict[str, Any] | None:
    """The seconds this container was billed without training: from its start to the first
    training step, and from the end of the last one to ``end``; None if it never trained.
    Computed here alone: by the uploader up to its final upload, else by the job at its end."""
    moments = {name: store.moment(at) for name, at in store.clock(volume).items()}
    started, first, last = (moments.get(k) for k in ("started", "first_step", "last_step"))
    if started is None or first is None or last is None:
        return None
    return {
        "container_started": store.stamp(started),
        "before_training_s": round(first - started),
        "after_training_s": round(max(0.0, end - last)),
    }
