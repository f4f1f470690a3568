"""The container's job, start to end: preflight, resume, dataset, training, uploads.

Each step is its own module; this one only puts them in order and records the phase in the
container's status file. Data flows one way: config -> preflight -> dataset -> training ->
upload.
"""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from entrypoint import __version__
from entrypoint.dataset import stage as dataset
from entrypoint.errors import MEANINGS, ExitCode, TrainboxError
from entrypoint.gateways import hub, provider
from entrypoint.preflight import check as preflight
from entrypoint.runtime import disk, ending, pricing, ssh, supervise, watchdog
from entrypoint.settings import options
from entrypoint.settings.config import Config
from entrypoint.state import budget, cost, prepared, status, store, view
from entrypoint.state.prepared import Prepared
from entrypoint.training import distributed, export, outputs, progress, publish, resume, weights
from entrypoint.upload import uploader as upload

log = logging.getLogger("trainbox")


def run(cfg: Config) -> int:
    """Run the job; return the container's exit code, recording how it ended and settling
    what the machine does next (``ending``). A volume another container is using is refused
    before anything is written to it."""
    log.info(
        "trainbox %s: %s run %r on %s",
        __version__,
        "demo" if cfg.is_demo else "dataset",
        cfg.run_name,
        cfg.device,
    )
    try:
        # LibreYOLO's options, export formats and image size, checked before anything is
        # touched.
        options.effective(cfg)
        export.check(cfg)
        weights.check_size(cfg)
        # sshd stays up while the end waits to be stopped.
        with store.volume(cfg.workspace, cfg.node_rank), ssh.serving(cfg):
            try:
                code = _run(cfg)
            except TrainboxError as err:
                code = ending.failed(err)
            return ending.settle(cfg, code)
    except TrainboxError as err:  # before the volume was ours: nothing of the run is there
        return ending.settle(cfg, ending.failed(err))


def _run(cfg: Config) -> int:
    store.for_node(cfg.node_rank)
    if cfg.nnodes > 1:
        log.info("node %d of %d, meeting at %s:%d", cfg.node_rank, cfg.nnodes, cfg.master_addr,
                 cfg.master_port)  # fmt: skip
    limits = {"max_runtime": cfg.max_runtime, "stall_timeout": cfg.stall_timeout}
    status.record(cfg.workspace, "preflight", fresh=True, run=cfg.run_name, limits=limits)
    store.mark(cfg.workspace, fresh=True, started=budget.process_started())
    hub.listeners[:] = [lambda waiting: status.note(cfg.workspace, waiting=waiting)]
    runtime = Path(tempfile.mkdtemp(prefix="trainbox-"))  # this start's, never the volume
    prepared.write_settings(runtime, cfg)
    try:
        code = _steps(cfg, runtime)
    except TrainboxError as err:
        status.record(cfg.workspace, status.ended(err.code), exit_code=int(err.code),
                      reason=str(err))  # fmt: skip
        raise
    reason = _reason(cfg, runtime, code)
    status.record(cfg.workspace, status.ended(code), exit_code=int(code),
                  **({"reason": reason} if reason else {}))  # fmt: skip
    _report_billing(cfg)  # what the machine cost without training; ON_EXIT acts after it
    _report_cost(cfg)
    if reason:  # the last line: why, and what to do
        log.error("exit %d: %s; %s", code, reason, MEANINGS.get(code, ("", "see the log"))[1])
    return code


def _reason(cfg: Config, runtime: Path, code: int) -> str:
    """Why the job ended with ``code`` (nothing for 0 and 130): the line of the program that
    decided it (the watchdog, the final upload, a training rank), else the one the status
    holds (the preflight's), else the code's meaning (docs/exit-codes.md)."""
    if code in (ExitCode.OK, ExitCode.INTERRUPTED):
        return ""
    for who in ("watchdog", "upload", "rank"):
        if store.code(runtime, who) == code and (line := store.reason(runtime, who)):
            return line
    recorded = store.status(cfg.workspace).get("reason")
    return recorded or MEANINGS.get(code, (f"exit code {code}", ""))[0]


def _report_billing(cfg: Config) -> None:
    """The seconds this container was billed without training, in the status and the log.
    Computed once: with OUTPUT_REPO by the final upload (``upload.flush``), up to its start,
    into the manifest the Hub gets; without, here, into the volume's manifest."""
    if cfg.output_repo:  # the published folder stays what the Hub holds
        bill = _uploaded_bill(cfg) or budget.billed(cfg.workspace, time.time())
    elif bill := budget.billed(cfg.workspace, time.time()):
        publish.record_billing(cfg.run_dir, bill)
    if bill:
        status.note(cfg.workspace, billed=bill)
        log.info(view.billed_line(bill))


def _within_budget(cfg: Config, previous: dict | None) -> None:
    """MAX_COST, before anything is staged: a run whose earlier containers spent it, or would
    with one more epoch (the rule at each epoch's end), ends here."""
    if not cfg.max_cost:
        return
    spent, per_epoch = pricing.before_start(cfg.run_dir, previous)
    if spent + per_epoch > cfg.max_cost:
        raise TrainboxError(
            f"MAX_COST=${cfg.max_cost:.2f} reached: the run has cost ${spent:.2f} in its earlier "
            f"containers"
            + (f" and an epoch costs ${per_epoch:.2f}" if per_epoch else "")
            + "; nothing was staged or trained; raise MAX_COST to train on",
            ExitCode.BUDGET,
        )


def _report_cost(cfg: Config) -> None:
    """What the run has cost, in the status and the last lines; without OUTPUT_REPO into the
    volume's manifest (with it, the final upload recorded it, up to its start)."""
    now = time.time()
    if cfg.output_repo:
        mine = cost.container(cfg.workspace, now, training_over=True)
    else:
        mine = publish.record_final_cost(cfg.workspace, cfg.run_dir)
    if mine is None:
        return
    state = status.read(cfg.workspace)  # LibreYOLO's last fields over the watchdog's copy
    state["training"] = {**state.get("training", {}), **progress.training(cfg.run_dir)[0]}
    if not (money := pricing.figures(cfg, state, now)) or "spent" not in money:
        return
    # with the training fields it was computed from (LibreYOLO's last), so that it adds up
    fresh = {"training": state["training"]} if state["training"] else {}
    status.note(cfg.workspace, cost=money, **fresh)
    log.info("cost: the run has cost $%.2f (%s of it idle: before and after training), this "
             "container $%.2f at $%.3f/h (%s)", money["spent"], f"${money['idle']:.2f}",
             mine["usd"], mine["per_hour"], mine["source"])  # fmt: skip
    if cfg.max_cost and money["spent"] > cfg.max_cost:
        log.info("cost: MAX_COST=$%.2f passed by $%.2f (the epoch in progress and the end)",
                 cfg.max_cost, money["spent"] - cfg.max_cost)  # fmt: skip


def _uploaded_bill(cfg: Config) -> dict | None:
    """This container's bill as the final upload recorded it, if it ran."""
    started = store.clock(cfg.workspace).get("started")
    bills = store.manifest(publish.folder(cfg.run_dir)).get("billed", [])
    return next((b for b in bills if b.get("container_started") == started), None)


def _steps(cfg: Config, runtime: Path) -> int:
    """The steps in order; each returns early with the exit code when the job ends there.
    The watchdog watches them all, from the preflight to the final upload."""
    with watchdog.watching(runtime):
        with _stoppable(runtime):
            ready = _prepare(cfg, runtime)
        if not isinstance(ready, Prepared):
            return ready
        prepared.write(runtime, ready)  # once, for the programs supervisord starts
        status.record(cfg.workspace, "training")
        code = supervise.run(cfg, distributed.command(cfg, ready.gpus), runtime)
    if report := store.export_report(cfg.workspace):  # the train program's own file
        status.note(cfg.workspace, export=report)
    return code


@contextlib.contextmanager
def _stoppable(runtime: Path) -> Iterator[None]:
    """Until supervisord takes over, a stop signal ends the job cleanly: exit 130, the phase
    ``interrupted``, temporary files gone (every step cleans up on the way out); the
    watchdog's stop, with its own code and reason."""

    def stop(signum: int, _frame: object) -> None:
        if error := watchdog.fired(runtime):
            raise error
        raise TrainboxError(
            f"{signal.Signals(signum).name} received before training: stopped; a restart goes "
            "on from here",
            ExitCode.INTERRUPTED,
        )

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prepare(cfg: Config, runtime: Path | None = None) -> "int | Prepared":
    """Everything before training, done once; an exit code when the job ends here, else what
    the programs train with (``state.prepared``)."""
    provider.check(cfg)
    if progress.run_state(cfg.run_dir) == "completed":
        log.info(
            "run %s already completed: nothing to train (set RUN_NAME for a new run)", cfg.run_dir
        )
        # A final upload that failed last time is retried: completed is not yet safe.
        finishing = cfg.output_repo and cfg.node_rank == 0
        return upload.flush(cfg, runtime=runtime) if finishing else ExitCode.OK
    # Preflight in its own process: the CUDA context it opens must not outlive the check.
    # (with this start's runtime folder: it reads the job's settings, as every program does)
    env = {**os.environ, **({store.RUNTIME: str(runtime)} if runtime else {})}
    checked = subprocess.run([sys.executable, "-m", "entrypoint", "check"], env=env, check=False)
    if checked.returncode:
        if reason := preflight.read(cfg).get("error"):
            status.record(cfg.workspace, "failed", reason=reason)
        return checked.returncode
    verdict = preflight.read(cfg)
    status.record(cfg.workspace, "preflight", gpu=preflight.summary(verdict),
                  notes=verdict["notes"])  # fmt: skip
    previous = None
    if cfg.output_repo:
        status.record(cfg.workspace, "resuming")
        previous = resume.fetch(cfg)
        if progress.run_state(cfg.run_dir) == "completed":
            log.info(
                "run %s already completed on %s: nothing to train (set RUN_NAME for a new run)",
                cfg.run_name,
                cfg.output_repo,
            )
            return ExitCode.OK
        if previous is None and cfg.node_rank == 0:  # a new run: can we write? before all else
            upload.prepare(cfg, publish.provenance(cfg, verdict, None))
        _within_budget(cfg, previous)
    else:
        _within_budget(cfg, None)
        log.warning(
            "OUTPUT_REPO is not set: the weights stay on this volume only; if the "
            "machine goes, they go with it"
        )
    # Nothing is downloaded before the start weights (none when the run goes on from a
    # checkpoint), a distillation teacher and a Hub dataset's listing are asked for and the
    # whole run is known to fit; the weights come during a Hub dataset's long download, after
    # a local one's quick check.
    found = None if resume.has_checkpoint(cfg) else weights.source(cfg)
    teacher = weights.teacher(cfg)  # distill_model's, a resumed run's too
    status.record(cfg.workspace, "staging")
    source = dataset.pending(cfg)
    if not source:
        dataset.stage(cfg, source)
    start = weights.check(cfg, found)
    disk.check(cfg.workspace, {
        "dataset": dataset.left(cfg, source),
        "start weights": start,
        "teacher": sum(weights.check(cfg, each) for each in teacher),
        "checkpoints and exports": outputs.left(cfg, found, start),
    })  # fmt: skip
    fetching = weights.Background(cfg, found, *teacher)
    if source:
        dataset.stage(cfg, source)
    fetching.result()
    manifest = publish.provenance(cfg, verdict, dataset.identity(cfg))
    kept = previous or store.manifest(publish.folder(cfg.run_dir))
    for key in ("billed", "costs"):  # the run's earlier containers
        manifest[key] = kept.get(key, [])
    if previous:  # the Hub keeps the run's manifest until the resume is known to be right
        resume.check_dataset(cfg, previous, manifest)
        if cfg.node_rank == 0:
            upload.prepare(cfg, manifest)  # writes it here too
    else:
        publish.write_manifest(cfg.run_dir, manifest)
    gpus = len(verdict["gpus"])
    return Prepared(cfg, gpus=gpus, workers=verdict["workers"], data_yaml=dataset.data_yaml(cfg))
