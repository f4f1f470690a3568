"""The container's exit code, decided in one place: what happened goes in, one code comes out.

What can decide it, strongest first:
1. the final upload failed (``upload``): the weights are not safe, whatever else happened;
2. the watchdog enforced a limit (``watchdog``): its own code, also when its stop signal is
   what ended a step or training;
3. a step raised its one-line error (``error``);
4. training ended by itself (``train``, as supervisord saw it end);
5. a stop signal arrived (``stopped``): 130;
6. a step ended the job early (``early``: a run already completed, a failed preflight);
7. otherwise supervisord ended before training did: 1.

The programs write their codes, and why, into the start's runtime folder (``state.store``);
``outcome`` reads them there, ``decide`` is the table (tests/runtime/test_exits.py), and
``reason`` gives the job's last line.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from entrypoint.errors import MEANINGS, ExitCode, TrainboxError
from entrypoint.settings.launchers import Volume
from entrypoint.state import store

log = logging.getLogger("trainbox")


@dataclass(frozen=True)
class Outcome:
    """What happened, as far as the exit code is concerned."""

    upload: int | None = None  # the final upload's code, when one ran
    watchdog: int | None = None  # the limit the watchdog enforced
    error: TrainboxError | None = None  # a step's one-line failure
    train: int | None = None  # how the train program ended by itself
    stopped: bool = False  # a stop signal arrived
    early: int | None = None  # a step ended the job before training


def outcome(
    runtime: Path | None,
    *,
    error: TrainboxError | None = None,
    stopped: bool = False,
    early: int | None = None,
    uploading: bool = False,
) -> Outcome:
    """What happened (``error``, ``stopped``, ``early``), with the codes the programs wrote in
    ``runtime``. ``uploading``: a final upload was due, so none recorded is a failed one."""
    codes = {who: store.code(runtime, who) if runtime else None
             for who in ("upload", "watchdog", "train")}  # fmt: skip
    if uploading and codes["upload"] is None:
        codes["upload"] = ExitCode.UPLOAD
    return Outcome(**codes, error=error, stopped=stopped, early=early)


def decide(happened: Outcome) -> int:
    """The exit code (the order is the module's list)."""
    if happened.upload not in (None, ExitCode.OK):
        return ExitCode.UPLOAD
    if happened.watchdog is not None:
        return happened.watchdog
    if happened.error is not None:
        return int(happened.error.code)
    if happened.train is not None:
        return happened.train
    if happened.stopped:
        return ExitCode.INTERRUPTED
    if happened.early is not None:
        return happened.early
    log.error("supervisord ended before training did")
    return ExitCode.TRAINING_FAILED


def reason(runtime: Path | None, volume: Volume, code: int, happened: Outcome) -> str:
    """Why the job ended with ``code`` (nothing for 0 and 130): the line of what decided it
    (the watchdog, the final upload, the job's verdict on train, a training rank, a step's
    error), else the one the status holds (the preflight's), else the code's meaning
    (docs/exit-codes.md)."""
    if happened.error is not None and happened.error.code == code:
        return str(happened.error)
    if code in (ExitCode.OK, ExitCode.INTERRUPTED):
        return ""
    for who in ("watchdog", "upload", "train", "rank"):
        if runtime and store.code(runtime, who) == code and (line := store.reason(runtime, who)):
            return line
    recorded = store.status(volume).get("reason")
    return recorded or MEANINGS.get(code, (f"exit code {code}", ""))[0]
