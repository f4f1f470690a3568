"""Watchdogs: a run never bills forever.

``MAX_RUNTIME`` bounds the container's whole life; ``STALL_TIMEOUT`` ends a run that makes no
progress (no staging bytes, no finished epoch, no train.log line); ``MAX_COST`` ends one whose
next epoch would pass its budget (``runtime.pricing`` reads the price, ``state.cost`` adds it
up). Training then stops, the final upload runs, and the container exits with its own code
(8, 9 or 12) and the reason in its status file.

One watchdog, from the preflight to the final upload: a supervisord program the job starts,
that checks the status file every 2 s, keeps its training and upload fields fresh, and past a
limit stops the job with SIGTERM, the way ``docker stop`` does. Before training the job's
handler raises the watchdog's error in its main thread (a signal interrupts even a read
blocked on a stuck network); during training the job stops its programs in order: train gets
SIGINT, then the uploader pushes the last epoch.
"""

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.preflight import limits
from entrypoint.runtime import memory, notices, pricing, utilisation
from entrypoint.settings.config import Config
from entrypoint.state import cost, status, store
from entrypoint.training import progress

if TYPE_CHECKING:  # the watchdog program itself does without supervisor's client
    from entrypoint.runtime.supervise import Supervisor

log = logging.getLogger("trainbox")

CHECK_SECONDS = 2


def verdict(cfg: Config, state: dict[str, Any], now: float | None = None) -> TrainboxError | None:
    """The error that ends the run, or None while it is within its limits."""
    phase = state.get("phase", "?")
    if phase not in status.ACTIVE:
        return None  # ended: the job settles it
    over = _over_budget(cfg, state) if cfg.max_cost else None
    running, quiet = (
        store.age(state.get("started_at"), now),
        store.age(state.get("progress_at"), now),
    )
    if cfg.max_runtime and running is not None and running >= cfg.max_runtime:
        return TrainboxError(
            f"MAX_RUNTIME={cfg.max_runtime} s reached during {phase}: stopped{_kept(cfg, phase)};"
            " raise MAX_RUNTIME (or set 0) to train longer, a restart resumes",
            ExitCode.TIME_LIMIT,
        )
    if over:
        return over
    if cfg.stall_timeout and quiet is not None and quiet >= cfg.stall_timeout:
        return TrainboxError(
            f"no progress for {quiet:.0f} s during {phase} (STALL_TIMEOUT={cfg.stall_timeout}): "
            f"{_diagnosis(cfg, phase)}",
            ExitCode.STALLED,
        )
    return None


def _over_budget(cfg: Config, state: dict[str, Any]) -> TrainboxError | None:
    """MAX_COST: in training, once an epoch has ended whose spend plus one more epoch passes
    the budget (the same answer until the next epoch ends); before training, once the spend
    has reached it."""
    money, phase = state.get("cost") or {}, state.get("phase", "?")
    if "spent" not in money:
        return None
    budget = f"MAX_COST=${cfg.max_cost:.2f}"
    if phase != "training":
        if money["spent"] < cfg.max_cost:
            return None
        return TrainboxError(f"{budget} reached during {phase} (${money['spent']:.2f} spent): "
                             f"stopped{_kept(cfg, phase)}; raise MAX_COST to train on",
                             ExitCode.BUDGET)  # fmt: skip
    training = state.get("training") or {}
    done, total = training.get("completed_epochs", 0), training.get("total_epochs", 0)
    if "per_epoch" not in money or "at_epoch_end" not in money or not 0 < done < total:
        return None
    if money["at_epoch_end"] + money["per_epoch"] <= cfg.max_cost:
        return None
    return TrainboxError(
        f"{budget}: ${money['at_epoch_end']:.2f} spent when epoch {done} ended, and epoch "
        f"{done + 1} would cost ${money['per_epoch']:.2f} more: stopped after epoch {done}"
        f"{_kept(cfg, phase)}; raise MAX_COST to train on, a restart resumes",
        ExitCode.BUDGET,
    )


def _kept(cfg: Config, phase: str) -> str:
    """What a stop in ``phase`` keeps of the run: a final upload only runs during training."""
    if phase != "training":
        return " before training: nothing was trained"
    if not cfg.output_repo:
        return ", the last finished epoch on this volume (OUTPUT_REPO is not set)"
    return ", the last finished epoch goes to OUTPUT_REPO first (exit 7 if it cannot)"


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
def watching(supervisor: "Supervisor") -> Iterator[None]:
    """The watchdog, a supervisord program, for as long as the block runs: from the preflight
    to the final upload. Its settings are the job's (in its runtime folder)."""
    supervisor.start("watchdog")
    try:
        yield
    finally:
        supervisor.stop("watchdog")


def refresh(cfg: Config, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy libreyolo's progress and the upload state into the container's status, the phase
    staying as the job set it, with what the last check ``measured`` (``Use``), in one write."""
    training, progress_at = progress.training(cfg.run_dir)
    stamps = (status.read(cfg.volume).get("progress_at"), progress_at)
    progress_at = max(filter(None, stamps), default=None)
    upload = (
        store.ledger(cfg.workspace, cfg.output_repo, cfg.run_name).get("state", {})
        if cfg.output_repo
        else None
    )
    fields: dict[str, Any] = {"upload": upload, "progress_at": progress_at, **(measured or {})}
    state = status.read(cfg.volume)
    if state.get("phase") == "training":
        found = progress.profile(cfg.run_dir)
        fields.update(training=training, profile=found and cost.advice(
            found, cost.price_now(cfg.volume)))  # fmt: skip
    if money := pricing.figures(cfg, {**state, **fields}):
        fields["cost"] = money
    if found := memory.figures():
        fields["memory"] = found
    status.note(cfg.volume, **fields)
    return status.read(cfg.volume)


class Use:
    """The GPUs' busy share per epoch (``utilisation``), in the status's ``gpu_use``, and the
    training's energy in its ``gpu_energy``; the first epoch whose GPUs waited, said once with
    its dollars. Nothing without NVML."""

    def __init__(self, cfg: Config, runtime: Path, nvml: Any = None) -> None:
        self.volume, self.runtime = cfg.volume, runtime
        self.sampler = utilisation.Sampler.open(nvml)  # ``nvml``: pynvml, unless a stand-in
        self.group = limits.Cgroup()
        self.epochs = utilisation.Epochs(limits.cpus(self.group)[0])
        kept = status.read(self.volume).get("gpu_energy") or {}
        self.energy = utilisation.Energy(float(kept.get("joules", 0)))
        self.said = False

    def check(self, state: dict[str, Any]) -> dict[str, Any]:
        """One check during training (``state``: the status now): the fields it measured, for
        the status's next write (``refresh``)."""
        if self.sampler is None:
            return {}
        found: dict[str, Any] = {}
        if (joules := self.energy.add(self.sampler.energy())) is not None:
            found["gpu_energy"] = {"joules": round(joules, 1), "gpus": len(self.sampler.handles)}
        done = (state.get("training") or {}).get("completed_epochs", 0)
        record = self.epochs.add(done, self.sampler.sample(), time.monotonic(),
                                 limits.cpu_seconds(self.group))  # fmt: skip
        if record is None:
            return found
        found["gpu_use"] = [*(state.get("gpu_use") or []), record][-utilisation.KEPT :]
        workers = int(store.prepared(self.runtime).get("workers", 0))
        line = utilisation.waiting(record, cost.price_now(self.volume), workers)
        if line and not self.said:
            self.said = True
            log.warning("%s", line)
        return found


def program(cfg: Config, runtime: Path) -> int:
    """The ``watchdog`` program: refresh the status; past a limit, record the exit code and
    the reason in the runtime folder and stop the job as ``docker stop`` would: before
    training it ends there, during training it stops train, then the uploader pushes the last
    epoch."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    price = pricing.Pricing(cfg)
    told = False  # the first finished epoch's notice (at most once per run: notices)
    gpus, measured = Use(cfg, runtime), {}
    while True:
        price.read(time.time())
        state = refresh(cfg, measured)
        training = state.get("training") or {}
        measured = gpus.check(state) if state.get("phase") == "training" else {}
        if not told and 1 <= training.get("completed_epochs", 0) < training.get("total_epochs", 0):
            told = True  # in a thread: a slow service never delays a limit's check
            notices.aside(lambda: notices.tell(cfg.volume, cfg.run_dir, cfg.notify_events,
                                               "started"))  # fmt: skip
        if error := verdict(cfg, state):
            log.error("watchdog: %s", error)
            store.write_code(runtime, "watchdog", error.code, reason=str(error))
            status.note(cfg.volume, reason=str(error))
            # the job (supervise.running names it before any program starts); else
            # supervisord, our parent, whose end also ends the job's wait
            os.kill(store.job(runtime) or os.getppid(), signal.SIGTERM)
            return int(error.code)
        time.sleep(CHECK_SECONDS)
