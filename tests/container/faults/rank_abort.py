"""A torchrun rank that dies of SIGABRT, for tests/container/test_distributed.py.

The test mounts this folder on /faults and ``rank_abort.pth`` into the image's site-packages,
so every Python process in the container runs this at its start; it acts only in the rank
named by ``TRAINBOX_TEST_ABORT_RANK`` (torchrun's RANK), and only as
``TRAINBOX_TEST_ABORT`` says:

- ``exit``: at the rank's exit, after its ``main`` returned (``atexit``), as the C++ abort
  of #41 did;
- ``training``: as soon as the run's metrics.jsonl holds a finished epoch (rank 0 writes it),
  while the next epoch trains.
"""

import atexit
import os
import threading
import time
from pathlib import Path

METRICS = Path("/workspace/runs/run/metrics.jsonl")


def _after_an_epoch() -> None:
    while not (METRICS.is_file() and METRICS.read_text().strip()):
        time.sleep(0.05)
    os.abort()


def arm() -> None:
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # torchrun's ranks only
        return
    if os.environ.get("RANK") != os.environ.get("TRAINBOX_TEST_ABORT_RANK"):
        return
    when = os.environ.get("TRAINBOX_TEST_ABORT")
    if when == "exit":
        atexit.register(os.abort)
    elif when == "training":
        threading.Thread(target=_after_an_epoch, daemon=True).start()


arm()
