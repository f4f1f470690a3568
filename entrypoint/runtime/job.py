"""The container's job, start to end: the boot's steps in order (``boot.STEPS``: settings,
lock, watch, a completed run, the preflight, the resume, the budget, the start weights,
staging, the manifest, supervision, the evaluation), then the ending: the exit code
(``exits``), how it ended in the status, what the machine cost, the model card, and what it
does next (``ending``).

Data flows one way: config -> preflight -> dataset -> training -> upload.
"""

import logging
import threading

from entrypoint import __version__
from entrypoint.errors import MEANINGS, ExitCode, TrainboxError
from entrypoint.gateways import notify
from entrypoint.runtime import boot, ending, exits, notices, pricing
from entrypoint.settings.config import Config
from entrypoint.state import budget, status, store
from entrypoint.state import run as this
from entrypoint.training import progress
from entrypoint.upload import results

log = logging.getLogger("trainbox")


def run(cfg: Config) -> int:
    """Run the job; return the container's exit code, recording how it ended and settling
    what the machine does next."""
    log.info("trainbox %s: %s run %r on %s", __version__, "demo" if cfg.is_demo else "dataset",
             cfg.run_name, cfg.device)  # fmt: skip
    started = boot.Boot(this.start(cfg))
    with started.held:
        with started.watched:
            happened = _steps(started)
        return ending.settle(started.run.settings, _ended(started, happened))


def _steps(started: boot.Boot) -> exits.Outcome:
    """Every step, in order, until one ends the job or training has; what happened."""
    runtime = started.run.runtime
    try:
        for step in boot.STEPS:
            step(started)
            boot.heed(started)
    except boot.Finished as early:
        return exits.outcome(runtime, early=early.code)
    except TrainboxError as err:
        return exits.outcome(runtime, error=err)
    cfg = started.run.settings
    uploading = bool(cfg.output_repo) and cfg.node_rank == 0
    return exits.outcome(runtime, stopped=started.stopped, uploading=uploading)


CARD_S = 30  # the longest the end waits for a Hub that cannot be asked, for the card


def _card(run: this.Run, code: int, *, notified: dict[str, str] | None = None) -> str | None:
    """The model card, at every end of a run that has trained (completed, stopped, budget,
    failed), on node 0 with OUTPUT_REPO; within what is left of STOP_GRACE after a stop. Its
    page, also in the status. Not after a final upload the Hub failed: a card cannot mend it,
    and its wait for that Hub would bill (a test's run ended 60 s later). ``notified``: the
    NOTIFY record, in the same commit (the end's own event is in it)."""
    cfg = run.settings
    if not cfg.output_repo or cfg.node_rank != 0 or not progress.run_state(cfg.run_dir):
        return None
    if run.runtime and store.code(run.runtime, "upload") not in (None, ExitCode.OK):
        log.warning("the model card was not written: the final upload failed")
        return None
    wait = _left(run, min(cfg.hub_wait, CARD_S))
    if wait < 1:
        log.warning("the model card was not written: no time left of STOP_GRACE")
        return None
    pushed: list[str | None] = []
    # In a thread joined for ``wait`` at most: a request to a hung Hub never holds the exit.
    pushing = threading.Thread(target=lambda: pushed.append(results.push_run_card(
        cfg.output_repo, cfg.run_dir, run.volume, wait=wait, ended=status.ended(code),
        notified=notified)),
        daemon=True)  # fmt: skip
    pushing.start()
    pushing.join(wait)
    if not pushed:
        log.warning("the model card was not written within %.0f s", wait)
    elif page := pushed[0]:
        status.note(run.volume, card=page)
        return page
    return None


def _ended(started: boot.Boot, happened: exits.Outcome) -> int:
    """The exit code; once the volume is this container's, how the start ended in its status
    and what the machine cost; the last line."""
    run, code = started.run, exits.decide(happened)
    if not started.locked:  # before the volume was ours: nothing of the run is there
        return ending.failed(code, str(happened.error))
    why = exits.reason(run.runtime, run.volume, code, happened)
    status.record(run.volume, status.ended(code), exit_code=int(code),
                  **({"reason": why} if why else {}))  # fmt: skip
    if happened.error is None:
        pricing.report(run.settings)  # what the machine cost; ON_EXIT acts after it
    event = _event(run, code, already=happened.early == ExitCode.OK)
    told = store.notified(run.settings.workspace, run.settings.run_name) if event else None
    if page := _card(run, code, notified=told):
        log.info("the model card: %s", page)
    last = _last_line(code, why, error=happened.error is not None)
    if event:
        _tell(run, event, last)
    if happened.error is not None:
        return ending.failed(code, why)
    if why:  # the last line: why, and what to do
        log.error("%s", last)
    return code


def _last_line(code: int, why: str, *, error: bool) -> str:
    """The last line's words: why, and what to do (a budget's reason and an out-of-memory
    kill's say what to do)."""
    if error:
        return f"exit {code}: {why}"
    said = code in (ExitCode.BUDGET, ExitCode.OUT_OF_MEMORY)
    advice = "" if said else MEANINGS.get(code, ("", "see the log"))[1]
    return f"exit {code}: {why}" + (f"; {advice}" if advice else "")


EVENTS = {ExitCode.OK: "completed", ExitCode.BUDGET: "budget", ExitCode.TIME_LIMIT: "watchdog",
          ExitCode.STALLED: "watchdog", ExitCode.INTERRUPTED: "stopped"}  # fmt: skip


def _event(run: this.Run, code: int, *, already: bool) -> str | None:
    """The NOTIFY event of how the start ended, if it is due: completed (unless the run had
    completed before this start), a budget, a watchdog, a stop, or a failure for good. Recorded
    as had at once; the card's commit takes the record to the Hub."""
    cfg = run.settings
    event = EVENTS.get(code) or ("failed" if ending.for_good(code, cfg.workspace) else None)
    if event is None or (event == "completed" and already):
        return None
    return event if notices.due(run.volume, cfg.run_name, cfg.notify_events, event) else None


def _tell(run: this.Run, event: str, line: str) -> None:
    """The person hears how the start ended, within what is left of STOP_GRACE after a stop,
    NOTIFY's timeout at most."""
    cfg = run.settings
    hours = float(store.libreyolo_status(cfg.run_dir).get("total_seconds") or 0) / 3600
    notices.send(run.volume, cfg.run_name, event, line,
                 timeout=max(1.0, min(notify.TIMEOUT_S, _left(run, notify.TIMEOUT_S))),
                 training_hours=hours or None)  # fmt: skip


def _left(run: this.Run, otherwise: float) -> float:
    """Seconds the end may still spend: what is left of STOP_GRACE after a stop signal, else
    ``otherwise``."""
    stopped_at = store.stop(run.runtime) if run.runtime else None
    return budget.flush_left(run.settings.stop_grace, stopped_at) if stopped_at else otherwise
