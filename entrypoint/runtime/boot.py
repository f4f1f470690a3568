"""The boot: the job's steps, in the order ``STEPS`` lists them, from the settings to training
and the evaluation of what it made.

Each step does one thing and records its own phase, and leaves its result in the ``Boot`` it
is handed for the steps after it. What a step holds for the rest of the job (the volume's
lock, supervisord and its sshd) goes into the boot's ``held`` stack, which the job closes once
it has ended; what watches the steps (the watchdog) into ``watched``, closed once training
has. A step that ends the job here raises ``Finished`` with its exit code, or its one-line
``TrainboxError``; ``exits.decide`` weighs them.

Nothing is downloaded before the start weights (none when the run goes on from a checkpoint),
a distillation teacher and a Hub dataset's listing are asked for and the whole run is known to
fit; the weights come during a Hub dataset's long download, after a local one's quick check.
"""

import contextlib
import logging
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrypoint.dataset import stage as dataset
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub, provider
from entrypoint.preflight import check as preflight
from entrypoint.preflight import limits
from entrypoint.runtime import memory, notices, pricing, processes, ssh, supervise, watchdog
from entrypoint.settings import options
from entrypoint.state import budget, snapshot, status, store
from entrypoint.state.run import Prepared, Run
from entrypoint.training import (
    distributed,
    evaluation,
    export,
    outputs,
    progress,
    publish,
    resume,
    weights,
)
from entrypoint.upload import results
from entrypoint.upload import uploader as upload

log = logging.getLogger("trainbox")

GB = 1e9


class Finished(Exception):
    """A step ended the job before training, with this exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Boot:
    """What the steps hand each other."""

    run: Run
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # till the end
    watched: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # till training's
    locked: bool = False  # the volume is this container's: its status is ours to write
    verdict: dict[str, Any] = field(default_factory=dict)  # the preflight's
    previous: dict[str, Any] | None = None  # the run's manifest on the Hub, resuming from it
    found: weights.Source | None = None  # the start weights (None: from a checkpoint)
    teacher: list[weights.Source] = field(default_factory=list)
    room: dict[str, int] = field(default_factory=dict)  # bytes the run writes, by what
    source: dataset.Source | None = None  # a Hub dataset still to download
    supervisor: supervise.Supervisor | None = None  # the programs' (from the lock on)
    stopped: bool = False  # a stop signal came during training
    interrupted: int | None = None  # the stop signal that came before training, if one did


def settings(boot: Boot) -> None:
    """What the config's own checks cannot see, before anything is touched: a memory limit
    trainbox cannot live in, LibreYOLO's options and export formats for this model, the image
    size for its family. (The Hub client's HF_XET_* settings are checked with the config, by
    ``cli.run``.)"""
    cfg = boot.run.settings
    preflight.enough_memory(limits.memory_limit())  # before LibreYOLO's classes load
    options.effective(cfg)
    export.check(cfg.export, cfg.model)
    weights.check_size(cfg.model, cfg.imgsz)


def lock(boot: Boot) -> None:
    """The volume, held for this container (another container's is refused before anything
    is written to it); supervisord, for every program from here to the job's end, sshd
    started in it; every wait for the Hub in the status, from here on; this start's status."""
    cfg, volume = boot.run.settings, boot.run.volume
    boot.held.enter_context(store.volume(cfg.workspace, cfg.node_rank))
    sshd = boot.held.enter_context(ssh.prepared(cfg))
    boot.supervisor = boot.held.enter_context(supervise.running(boot.run, sshd))
    boot.held.enter_context(hub.told(lambda waiting: status.note(volume, waiting=waiting)))
    boot.locked = True
    if cfg.nnodes > 1:
        log.info("node %d of %d, meeting at %s:%d", cfg.node_rank, cfg.nnodes, cfg.master_addr,
                 cfg.master_port)  # fmt: skip
    limits = {"max_runtime": cfg.max_runtime, "stall_timeout": cfg.stall_timeout}
    status.record(volume, "preflight", fresh=True, run=cfg.run_name, limits=limits)
    store.mark(volume, fresh=True, started=budget.process_started())


def watch(boot: Boot) -> None:
    """The watchdog, from here to the final upload; until training, a stop signal ends the
    job cleanly (every step cleans up on the way out: exit 130, or the watchdog's code when
    its stop is the signal)."""
    assert boot.supervisor is not None, "the lock step starts supervisord"
    boot.watched.enter_context(watchdog.watching(boot.supervisor))
    boot.watched.enter_context(_stoppable(boot))


def completed(boot: Boot) -> None:
    """A run the volume holds completed trains nothing; a final upload that failed last time
    is retried (completed is not yet safe)."""
    cfg = boot.run.settings
    provider.check(cfg.on_exit, cfg.output_repo)
    if progress.run_state(cfg.run_dir) != "completed":
        return
    log.info("run %s already completed: nothing to train (set RUN_NAME for a new run)",
             cfg.run_dir)  # fmt: skip
    finishing = cfg.output_repo and cfg.node_rank == 0
    raise Finished(
        upload.flush(upload.Uploads.of(cfg), runtime=boot.run.runtime) if finishing else ExitCode.OK
    )


def check(boot: Boot) -> None:
    """The preflight, in its own process; its verdict in the status."""
    cfg = boot.run.settings
    seen = memory.watch()
    if code := processes.preflight(boot.run):
        if seen.killed(code):
            status.note(cfg.volume, memory=memory.figures())
            raise memory.error("the preflight's process", None)
        if reason := preflight.read(cfg.workspace).get("error"):
            status.record(cfg.volume, "failed", reason=reason)
        raise Finished(code)
    boot.verdict = preflight.read(cfg.workspace)
    status.record(cfg.volume, "preflight", gpu=preflight.summary(boot.verdict),
                  notes=boot.verdict["notes"])  # fmt: skip


def resuming(boot: Boot) -> None:
    """With OUTPUT_REPO, the run as the Hub holds it; a new run proves it can write there
    before all else. Without, the warning that the weights stay on this volume."""
    cfg = boot.run.settings
    if not cfg.output_repo:
        log.warning("OUTPUT_REPO is not set: the weights stay on this volume only; if the "
                    "machine goes, they go with it")  # fmt: skip
        return
    status.record(cfg.volume, "resuming")
    boot.previous = resume.fetch(cfg)
    if boot.previous:  # what an earlier machine's containers told the person
        notices.remember(cfg.workspace, cfg.run_name, boot.previous.get("notified"))
    if progress.run_state(cfg.run_dir) == "completed":
        log.info("run %s already completed on %s: nothing to train (set RUN_NAME for a new "
                 "run)", cfg.run_name, cfg.output_repo)  # fmt: skip
        raise Finished(ExitCode.OK)
    if boot.previous is None and cfg.node_rank == 0:
        upload.prepare(upload.Uploads.of(cfg), publish.provenance(cfg, boot.verdict, None))


def within_budget(boot: Boot) -> None:
    """MAX_COST, before anything is staged: a run whose earlier containers spent it, or would
    with one more epoch (the rule at each epoch's end), ends here."""
    cfg = boot.run.settings
    if not cfg.max_cost:
        return
    spent, per_epoch = pricing.before_start(cfg.run_dir, boot.previous)
    if spent + per_epoch > cfg.max_cost:
        raise TrainboxError(
            f"MAX_COST=${cfg.max_cost:.2f} reached: the run has cost ${spent:.2f} in its earlier "
            f"containers"
            + (f" and an epoch costs ${per_epoch:.2f}" if per_epoch else "")
            + "; nothing was staged or trained; raise MAX_COST to train on",
            ExitCode.BUDGET,
        )


def start_weights(boot: Boot) -> None:
    """Which start weights and teacher the run needs, asked for and not yet downloaded; with
    what its checkpoints and exports will write, the room it needs besides the dataset's."""
    cfg = boot.run.settings
    boot.found = None if resume.has_checkpoint(cfg.run_dir) else weights.source(cfg)
    boot.teacher = weights.teacher(cfg)  # distill_model's, a resumed run's too
    start = weights.check(boot.found, cfg.hub_wait)
    boot.room = {
        "start weights": start,
        "teacher": sum(weights.check(each, cfg.hub_wait) for each in boot.teacher),
        "checkpoints and exports": outputs.left(cfg, boot.found, start),
    }


def finding(boot: Boot) -> None:
    """The dataset found: a Hub dataset by one listing of its repo (its route and what is
    still to download; nothing downloaded), a local one checked at once (DATA's data.yaml by
    the doctor, the demo written), before the Hub is asked for the start weights."""
    cfg = boot.run.settings
    wanted = dataset.Wanted.of(cfg)
    status.record(cfg.volume, "staging")
    boot.source = dataset.pending(wanted)
    if not boot.source:
        dataset.here(wanted, processes.doctor if cfg.doctor else None)


def staging(boot: Boot) -> None:
    """Once the whole run is known to fit on the volume, a Hub dataset staged by its route
    while the start weights and the teacher download."""
    cfg = boot.run.settings
    wanted = dataset.Wanted.of(cfg)
    fits(cfg.workspace, {"dataset": dataset.needs(wanted, boot.source), **boot.room})
    fetching = weights.Background(cfg.hub_wait, boot.found, *boot.teacher)
    if boot.source:
        boot.source.stage(wanted, processes.doctor if cfg.doctor else None)
    fetching.result()


def provenance(boot: Boot) -> None:
    """The run's manifest: what trains on what, with its earlier containers' bills. A resume
    is checked to go on with the same data; the Hub keeps the run's manifest until then."""
    cfg = boot.run.settings
    manifest = publish.provenance(cfg, boot.verdict, dataset.identity(dataset.Wanted.of(cfg)))
    kept = boot.previous or store.manifest(snapshot.folder(cfg.run_dir))
    for key in ("billed", "costs"):  # the run's earlier containers
        manifest[key] = kept.get(key, [])
    if told := store.notified(cfg.workspace, cfg.run_name):
        manifest["notified"] = told
    if boot.previous:
        resume.check_dataset(cfg.run_name, cfg.allow_dataset_change, boot.previous, manifest)
        if cfg.node_rank == 0:
            upload.prepare(upload.Uploads.of(cfg), manifest)  # writes it here too
    else:
        snapshot.write_manifest(cfg.run_dir, manifest)


def supervision(boot: Boot) -> None:
    """Training: the run, prepared for its programs, and supervisord running them (train,
    the uploader, the dashboard) until training ends, the watchdog fires or a stop comes.
    When the kernel killed dataloader workers for memory, training resumes with half of them,
    ``memory.MENDS`` times at most; any other out-of-memory kill ends it (exit 13)."""
    run, verdict = boot.run, boot.verdict
    assert boot.supervisor is not None and run.runtime, "the lock step starts supervisord"
    command = distributed.command(distributed.Meeting.of(run.settings), len(verdict["gpus"]))
    workers, data = verdict["workers"], dataset.data_yaml(dataset.Wanted.of(run.settings))
    start, teacher = weights.local(boot.found), weights.local_teacher(boot.teacher)
    for mend in range(memory.MENDS + 1):
        status.record(run.volume, "training")  # again after a mend: the flush said uploading
        boot.run = run.with_prepared(Prepared(len(verdict["gpus"]), workers, data, start, teacher))
        seen = memory.watch()
        boot.stopped = supervise.train(boot.supervisor, run.settings, command)
        ended = store.code(run.runtime, "train")
        if boot.stopped or ended in (None, ExitCode.OK) or not seen.killed():
            break
        worker = memory.worker_died(store.reason(run.runtime, "rank"))
        if not (worker and workers and mend < memory.MENDS):
            who = "a dataloader worker" if worker else "the trainer"
            store.write_code(run.runtime, "train", ExitCode.OUT_OF_MEMORY,
                             str(memory.error(who, workers)))  # fmt: skip
            status.note(run.volume, memory=memory.figures())  # the kill counted
            break
        workers = _mended(boot, workers, mend + 1)
    if report := store.export_report(run.settings.workspace):  # the train program's own file
        status.note(run.volume, export=report)


def _mended(boot: Boot, workers: int, mend: int) -> int:
    """After the kernel killed dataloader workers: half as many, and training resumes."""
    fewer, volume = workers // 2, boot.run.volume
    state = status.read(volume)
    epochs = (state.get("training") or {}).get("completed_epochs", 0)
    log.warning("out of memory: the kernel killed a dataloader worker (%s); resuming from epoch "
                "%d with WORKERS %d -> %d (mend %d of %d)", memory.said(), epochs, workers,
                fewer, mend, memory.MENDS)  # fmt: skip
    mended = [*state.get("mended", []),
              {"epoch": epochs, "workers": [workers, fewer], "at": store.stamp()}]  # fmt: skip
    status.note(volume, mended=mended, memory=memory.figures())
    store.clear_codes(boot.run.runtime, "train", "rank", "upload")  # the next attempt's own
    return fewer


def final_upload(boot: Boot) -> None:
    """The final upload made by the job, when the uploader (OUTPUT_REPO, node 0) left no word
    of one: it died before or during its flush (in a test's run the kernel killed it for
    memory right after the trainer, and supervisord's new one was stopped while it was still
    starting), so what it left is pushed now, within what a stop left of STOP_GRACE."""
    run = boot.run
    cfg = run.settings
    assert run.runtime is not None, "the job's runtime folder"
    if not cfg.output_repo or cfg.node_rank != 0 or store.code(run.runtime, "upload") is not None:
        return
    log.warning("the uploader ended before its final upload: the job makes it")
    upload.flush(upload.Uploads.of(cfg), stopped_at=store.stop(run.runtime), runtime=run.runtime)


def evaluating(boot: Boot) -> None:
    """A completed run's best.pt scored on data it never chose by (EVALUATE), once its final
    weights are on the Hub (they never wait for it), in a process of its own; its files then
    uploaded in a commit of their own. A failure or a stop here is one line, and the run's
    outcome stays as it was."""
    run = boot.run
    cfg = run.settings
    if (boot.stopped or cfg.node_rank != 0 or cfg.evaluate == "none"
            or store.code(run.runtime, "train") != ExitCode.OK
            or progress.run_state(cfg.run_dir) != "completed"):  # fmt: skip
        return
    status.record(cfg.volume, "evaluating")
    code = processes.evaluator(run)
    if code is None:
        log.warning("evaluation stopped: the run's outcome stands; a restart does not evaluate")
        return
    if found := store.evaluations(cfg.run_dir / evaluation.FOLDER):
        status.note(cfg.volume, evaluation={
            split: {"images": each["images"], **{k: each["metrics"][k]
                                                 for k in evaluation.HEADLINE
                                                 if k in each["metrics"]}}
            for split, each in found.items()})  # fmt: skip
    uploaded = store.code(run.runtime, "upload") == ExitCode.OK
    if code == ExitCode.OK and cfg.output_repo and uploaded:
        results.push_evaluation(cfg.output_repo, cfg.run_dir, wait=min(cfg.hub_wait, 60))


STEPS: tuple[Callable[[Boot], None], ...] = (
    settings, lock, watch, completed, check, resuming, within_budget, finding, start_weights,
    staging, provenance, supervision, final_upload, evaluating,
)  # fmt: skip


def heed(boot: Boot) -> None:
    """After each step: a stop signal that came during it ends the job (exit 130), even when
    a library caught the error its handler raised. (torch's import wraps its CUDA preload in
    ``except Exception: pass``: a SIGTERM there, in ``start_weights``, went unheard in a
    container test; training started, and docker's SIGKILL came 60 s later.)"""
    if boot.interrupted is not None:
        raise _interrupted(boot.interrupted)


def _interrupted(signum: int) -> TrainboxError:
    return TrainboxError(
        f"{signal.Signals(signum).name} received before training: stopped; a restart goes on "
        "from here",
        ExitCode.INTERRUPTED,
    )


@contextlib.contextmanager
def _stoppable(boot: Boot) -> Iterator[None]:
    """Until training (``supervise.train``'s handlers replace these), a stop signal raises
    the one line of an interrupted start, and is kept for ``heed``."""

    def stop(signum: int, _frame: object) -> None:
        boot.interrupted = signum
        raise _interrupted(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def fits(workspace: Path, parts: dict[str, int]) -> None:
    """Stop when the volume's free space cannot hold what the run will still write
    (``parts``: what, bytes). No margin: only a run that cannot fit is refused (``trainbox
    plan disk`` adds one to choose a disk); the xet cache's caps are not counted."""
    need = sum(parts.values())
    free = shutil.disk_usage(workspace).free
    shown = ", ".join(f"{what} {size / GB:.2f} GB" for what, size in parts.items() if size)
    if need > free:
        raise TrainboxError(
            f"not enough space on {workspace} for the whole run: it will still write about "
            f"{need / GB:.2f} GB ({shown}) and {free / GB:.2f} GB is free; give the volume at "
            f"least {(need - free) / GB:.2f} GB more (trainbox plan disk shows the sum)",
            ExitCode.DISK,
        )
    log.info("disk: the run will still write about %.2f GB%s; %.2f GB free", need / GB,
             f" ({shown})" if shown else "", free / GB)  # fmt: skip
