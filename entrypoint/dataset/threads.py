"""Work on several files at once, in threads that a stop does not wait for."""

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
GRACE = 5  # seconds the others get to stop, after the first failure (at their next chunk)


class Cancelled(Exception):
    """Another item failed, or the job is stopping: this one stops too."""


def each(items: Iterable[T], work: Callable[[T, threading.Event], None], count: int) -> None:
    """``work(item, stop)`` for every item, ``count`` at once. The threads are daemons: a stop
    signal must not wait for a read on a hung connection to time out. The first failure sets
    ``stop``, which ``work`` may watch (raising ``Cancelled``), and is raised once the others
    have stopped, or after ``GRACE`` seconds."""
    queue = list(items)
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                item = queue.pop(0)
            try:
                work(item, stop)
            except BaseException as err:
                errors.append(err)
                stop.set()

    workers = [threading.Thread(target=run, daemon=True) for _ in range(min(count, len(queue)))]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            worker.join()
    finally:
        stop.set()
        deadline = time.monotonic() + GRACE
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
    failures = [err for err in errors if not isinstance(err, Cancelled)]
    if failures:
        raise failures[0]
