"""The end of a start: record how it ended, then make sure nothing bills after it.

A platform decides what an exited container costs. RunPod starts it again (dstackai/dstack
#1142), so a finished run, or one that fails the same way each time
(exit 6 of a cu126 image on a Blackwell card), loops and bills until someone notices; vast.ai
keeps the instance, billed, as ``exited``. So on those two machines every start that ends for
good asks the provider to stop the machine (ON_EXIT, default ``auto``: stop there), early
failures included, and waits for the platform to stop it instead of exiting into a restart.

Which ends are for good (``final``): a completed run, a time limit, a budget reached; a failure
no restart can mend (settings, the dataset, the disk, the GPU check, the memory limit); any
other failure once it repeats (the same code as the start before, or the third failed start in
a row). On vast.ai every end is: nothing starts the container again by itself. A stop signal
is never acted on: whoever sent it is stopping the machine. At most stop after a failure, never
destroy; and where the run has published weights and an OUTPUT_REPO, only once the Hub holds
them (``upload.verify``): a stop keeps the volume, but the weights are taken off first.

On those machines each start's end is one entry in ``trainbox/starts.json`` on the volume
(node 0's; written here only, atomically): how a start knows what the starts before it did.
"""

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import provider
from entrypoint.runtime import notices
from entrypoint.settings import config
from entrypoint.settings.config import Config
from entrypoint.state import cost, snapshot, status, store

log = logging.getLogger("trainbox")

# Ends no restart can change: the run is over, or the same start would fail the same way.
FINAL = {ExitCode.OK, ExitCode.CONFIG, ExitCode.DATASET, ExitCode.DISK, ExitCode.PREFLIGHT,
         ExitCode.TIME_LIMIT, ExitCode.BUDGET, ExitCode.OUT_OF_MEMORY}  # fmt: skip
FAILED_STARTS = 3  # failed starts in a row, whatever their codes, that end the loop
KEPT = 50  # starts kept in the history
REPEAT_S = 600.0  # while a start waits to be stopped, its line again in the log this often


def history(workspace: Path) -> list[dict[str, Any]]:
    """The earlier starts' ends, oldest first: ``{"at": stamp, "code": int}``."""
    return [s for s in store.starts(workspace) if isinstance(s.get("code"), int)]


def remember(workspace: Path, code: int) -> list[dict[str, Any]]:
    """Add this start's end to the history; the history before it."""
    before = history(workspace)
    entry = {"at": store.stamp(), "code": int(code)}
    try:
        store.write_starts(workspace, [*before, entry][-KEPT:])
    except OSError as err:  # a full or read-only volume must not hide the run's own end
        log.warning("could not record this start's end on the volume: %s", err)
    return before


def final(code: int, before: list[dict[str, Any]]) -> bool:
    """Whether a start that ended with ``code`` would end the same way if started again."""
    if code in FINAL:
        return True
    if code == ExitCode.INTERRUPTED:
        return False
    codes = [s["code"] for s in before]
    recent = codes[-(FAILED_STARTS - 1) :]
    in_a_row = len(recent) == FAILED_STARTS - 1 and all(c not in (0, 130) for c in recent)
    return (bool(codes) and codes[-1] == code) or in_a_row


def for_good(code: int, workspace: Path, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this start's end is the run's for now: ``final``, or a machine that never
    starts an exited container again by itself (a person must act either way)."""
    found = provider.machine(environ)
    return found is None or not found.restarts or final(code, history(workspace))


def failed(code: int, line: str) -> int:
    """The one line of a failure that ends this start; its exit code."""
    log.error("error: %s", line)
    return code


def refused(err: TrainboxError, environ: Mapping[str, str] = os.environ) -> int:
    """``trainbox run`` whose settings are refused: the error line, then its end settled with
    the settings that say where and how to act (those of them that parse)."""
    code = failed(int(err.code), str(err))
    keys = (
        "WORKSPACE",
        "ON_EXIT",
        "ON_EXIT_DRY_RUN",
        "ON_EXIT_WAIT",
        "VAST_API_URL",
        "RUNPOD_API_URL",
    )
    cfg = Config()
    for chosen in ({k: environ[k] for k in keys if k in environ}, {}):
        try:
            cfg = config.load(chosen)
            break
        except TrainboxError:
            continue
    return settle(cfg, code, environ, loaded=False)


def settle(
    cfg: Config, code: int, environ: Mapping[str, str] = os.environ, *, loaded: bool = True
) -> int:
    """Record the start's end; on a rented machine, stop it when a restart cannot help.
    ``loaded``: ``cfg`` is the run's own (not the fallback of a refused configuration)."""
    if cfg.node_rank != 0:  # node 0 speaks for the job
        return code
    found = provider.machine(environ)
    if found is None:  # a platform of its own restart policy (compose, Kubernetes): as is
        return code
    before = remember(cfg.workspace, code)
    if code == ExitCode.INTERRUPTED:
        return code
    how = provider.action(cfg.on_exit, found)
    if how == "none":
        if final(code, before):
            log.warning(found.left_running)
        return code
    if found.restarts and not final(code, before):  # else no next start comes by itself
        log.info("exit %d: %s %s; the next start may mend it, the same exit again stops it",
                 code, found.provider, found.exited)  # fmt: skip
        return code
    if code != ExitCode.OK:
        how = "stop"  # after a failure, the volume keeps the logs: never destroy it
    with Signal() as stop:  # from here a stop signal means the platform is stopping us
        return _act(cfg, code, found, how, stop, loaded, final(code, before))


def _act(
    cfg: Config,
    code: int,
    found: provider.Machine,
    how: str,
    stop: "Signal",
    loaded: bool,
    repeats: bool,
) -> int:
    """Ask the provider to stop (or destroy) this machine, then wait for its stop. On a
    platform that starts an exited container again, a start that cannot make it stop never
    exits by itself: it stays up, idle, saying what failed and how to stop the machine."""
    if not _weights_safe(cfg, loaded):
        unsafe = (f"ON_EXIT={how}: not done: the upload to {cfg.output_repo} is not verified, "
                  "so this machine stays up (and bills) to keep the only copy of the weights; "
                  f"copy them off, then {found.stop_hint}")  # fmt: skip
        return stop.stay(code, cfg, unsafe)
    if not found.key:
        keyless = (f"ON_EXIT={how}: {found.provider} gave this container no API key to ask "
                   f"with, and {found.exited}; this container waits instead of exiting into a "
                   f"loop: {found.stop_hint}")  # fmt: skip
        return stop.stay(code, cfg, keyless)
    if stop.received.is_set():
        return code  # stopped meanwhile: nothing to ask
    why = "a new start would end the same way" if repeats else f"{found.provider} {found.exited}"
    log.info("ON_EXIT=%s after exit %d: %s", how, code, why)
    for request in provider.requests(found, how, cfg.vast_api_url, cfg.runpod_api_url):
        if provider.ask(request, cfg.on_exit_dry_run):
            return _stopped(cfg, code, found, how, stop)
        if cfg.on_exit_dry_run:
            return code
    failed = f"ON_EXIT={how} failed: {found.provider} did not take the request: {found.stop_hint}"
    if found.restarts:  # an exit would be started again, and fail again
        return stop.stay(code, cfg, f"{failed}; this container waits, idle, instead of exiting")
    log.error(failed)
    return code


def _stopped(cfg: Config, code: int, found: provider.Machine, how: str, stop: "Signal") -> int:
    """The provider took the request: wait ON_EXIT_WAIT for the platform's stop signal
    (exiting at once could race it on RunPod: a restart before the stop lands)."""
    with contextlib.suppress(OSError):
        status.note(cfg.volume, waiting=f"for {found.provider} to stop this machine")
    if stop.within(cfg.on_exit_wait):
        return code
    late = (f"ON_EXIT={how}: {found.provider} took the request but has not stopped this "
            f"machine within ON_EXIT_WAIT={cfg.on_exit_wait} s")  # fmt: skip
    if not found.restarts:
        log.warning("%s: exiting (%s)", late, found.stop_hint)
        return code
    return stop.stay(code, cfg, f"{late}; this container waits, idle, instead of exiting: "
                                f"{found.stop_hint}")  # fmt: skip


def _weights_safe(cfg: Config, loaded: bool) -> bool:
    """True unless the run has published weights that the Hub is not shown to hold."""
    from entrypoint.upload import uploader as upload

    if not loaded or not cfg.output_repo:
        return True  # a stop keeps the volume; nothing would be uploaded anyway
    if not snapshot.read_index(cfg.run_dir).get("files"):
        return True  # nothing published yet: no weights to lose
    return upload.verify(upload.Uploads.of(cfg))


class Signal:
    """SIGTERM and SIGINT, caught while a start ends: the platform's stop, awaited."""

    def __init__(self) -> None:
        self.received = threading.Event()
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "Signal":
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, lambda *_: self.received.set())
        return self

    def __exit__(self, *_: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def within(self, seconds: float | None) -> bool:
        """Whether the stop signal came within ``seconds`` (None: however long it takes).
        Short waits: a signal handler then runs within a second, whatever the platform."""
        end = None if seconds is None else time.monotonic() + seconds
        while not self.received.wait(1.0):
            if end is not None and time.monotonic() > end:
                return False
        return True

    def stay(self, code: int, cfg: Config, line: str) -> int:
        """Stay up, idle, until the platform's stop, then end with ``code``: an exit would
        only be started again. ``line`` (what failed, what stops the machine) is logged,
        shown by ``trainbox status``, and logged again every REPEAT_S."""
        with contextlib.suppress(OSError):
            status.note(cfg.volume, waiting=line)
        log.error("%s", line)
        billing = notices.Billing(
            lambda said: notices.tell(cfg.volume, cfg.run_dir, cfg.notify_events, "billing",
                                      said, once=False),
            line, cost.price_now(cfg.volume), since=time.time())  # fmt: skip
        billing.tick()  # at once, then hourly
        while not self.within(REPEAT_S):
            log.error("%s", line)
            billing.tick()
        return code
