"""A process that grows until the kernel's OOM killer kills it, for tests/container/test_memory.py.

The test runs the container with Docker's own ``--memory`` limit, mounts this folder on /faults
and ``memory_hog.pth`` into the image's site-packages, so every Python process in the container
runs this at its start; it acts only in the train program (``python -m entrypoint train``), as
``TRAINBOX_TEST_HOG`` says:

- ``start``: the trainer grows at once, before it trains (a limit too low for it to start);
- ``training``: the trainer grows once the run's metrics.jsonl holds a finished epoch;
- ``workers``: each process the trainer forks (its dataloader workers: nothing else in it
  forks) grows as it starts, before it serves a batch, so the trainer waits for it and the
  kill comes whatever an epoch's length; with WORKERS=0 nothing is forked, nothing grows.

Growing is real: 32 MB at a time, every byte written, so the pages are the process's own; the
kernel then kills the largest process among those trainbox made expendable (oom_score_adj).
"""

import os
import threading
import time
from pathlib import Path

METRICS = Path("/workspace/runs/run/metrics.jsonl")
HELD: list[bytearray] = []


def _grow() -> None:
    while True:
        HELD.append(bytearray(b"\x01") * (32 << 20))
        time.sleep(0.02)


def _after_an_epoch() -> None:
    while not (METRICS.is_file() and METRICS.read_text().strip()):
        time.sleep(0.05)
    _grow()


def arm() -> None:
    command = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    if command[1:4] != [b"-m", b"entrypoint", b"train"]:
        return
    when = os.environ.get("TRAINBOX_TEST_HOG")
    if when == "start":
        _grow()
    elif when == "training":
        threading.Thread(target=_after_an_epoch, daemon=True).start()
    elif when == "workers":  # a forked worker runs no .pth: it grows from its fork on
        os.register_at_fork(after_in_child=_grow)


arm()
