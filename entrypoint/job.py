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
import time
from collections.abc import Iterator

from . import (
    __version__,
    dataset,
    distributed,
    ending,
    export,
    hub,
    lock,
    options,
    preflight,
    provider,
    publish,
    resume,
    ssh,
    status,
    supervise,
    upload,
    watchdog,
    weights,
)
from .config import Config
from .errors import ExitCode, TrainboxError

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
        # LibreYOLO's options and export formats, checked before anything is touched.
        options.effective(cfg)
        export.check(cfg)
        with lock.volume(cfg.workspace, cfg.node_rank):
            # The resolved job shape, for every program, rank and SSH session started here.
            os.environ.update(
                NNODES=str(cfg.nnodes),
                NODE_RANK=str(cfg.node_rank),
                MASTER_ADDR=cfg.master_addr,
                MASTER_PORT=str(cfg.master_port),
            )
            with ssh.serving(cfg):  # sshd stays up while the end waits to be stopped
                try:
                    code = _run(cfg)
                except TrainboxError as err:
                    code = ending.failed(err)
                return ending.settle(cfg, code)
    except TrainboxError as err:  # before the volume was ours: nothing of the run is there
        return ending.settle(cfg, ending.failed(err))


def _run(cfg: Config) -> int:
    status.for_node(cfg.node_rank)
    if cfg.nnodes > 1:
        log.info("node %d of %d, meeting at %s:%d", cfg.node_rank, cfg.nnodes, cfg.master_addr,
                 cfg.master_port)  # fmt: skip
    limits = {"max_runtime": cfg.max_runtime, "stall_timeout": cfg.stall_timeout}
    status.record(cfg.workspace, "preflight", fresh=True, run=cfg.run_name, limits=limits)
    status.mark(cfg.workspace, fresh=True, started=status.process_started())
    hub.listeners[:] = [lambda waiting: status.note(cfg.workspace, waiting=waiting)]
    try:
        code = _steps(cfg)
    except TrainboxError as err:
        status.record(cfg.workspace, status.ended(err.code), exit_code=int(err.code),
                      reason=str(err))  # fmt: skip
        raise
    status.record(cfg.workspace, status.ended(code), exit_code=int(code))
    _report_billing(cfg)  # what the machine cost without training; ON_EXIT acts after it
    return code


def _report_billing(cfg: Config) -> None:
    """The seconds this container was billed without training, in the status and the log.
    With OUTPUT_REPO the manifest has them up to the final upload (``upload.flush``): the
    published folder stays what the Hub holds; without it, the volume's manifest has them."""
    if bill := status.billed(status.clock(cfg.workspace), time.time()):
        status.note(cfg.workspace, billed=bill)
        if not cfg.output_repo:
            publish.record_billing(cfg.run_dir, bill)
        log.info(status.billed_line(bill))


def _steps(cfg: Config) -> int:
    """The steps in order; each returns early with the exit code when the job ends there.
    The watchdogs guard them here, then as a supervisord program during training."""
    with watchdog.guard(cfg), _stoppable():
        ready = _prepare(cfg)
    if ready is not None:
        return ready
    status.record(cfg.workspace, "training")
    gpus = len(preflight.read(cfg)["gpus"])
    return supervise.run(cfg, distributed.command(cfg, gpus))


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """Until supervisord takes over, a stop signal ends the job cleanly: exit 130, the phase
    ``interrupted``, temporary files gone (every step cleans up on the way out)."""

    def stop(signum: int, _frame: object) -> None:
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


def _prepare(cfg: Config) -> int | None:
    """Everything before training; an exit code when the job ends here, None to train."""
    provider.check(cfg)
    if status.run_state(cfg.run_dir) == "completed":
        log.info(
            "run %s already completed: nothing to train (set RUN_NAME for a new run)", cfg.run_dir
        )
        # A final upload that failed last time is retried: completed is not yet safe.
        return upload.flush(cfg) if cfg.output_repo and cfg.node_rank == 0 else ExitCode.OK
    # Preflight in its own process: the CUDA context it opens must not outlive the check.
    checked = subprocess.run([sys.executable, "-m", "entrypoint", "check"], check=False)
    if checked.returncode:
        with contextlib.suppress(OSError, ValueError):
            status.record(cfg.workspace, "failed", reason=preflight.read(cfg)["error"])
        return checked.returncode
    verdict = preflight.read(cfg)
    status.record(cfg.workspace, "preflight", gpu=preflight.summary(verdict),
                  notes=verdict["notes"])  # fmt: skip
    previous = None
    if cfg.output_repo:
        status.record(cfg.workspace, "resuming")
        previous = resume.fetch(cfg)
        if status.run_state(cfg.run_dir) == "completed":
            log.info(
                "run %s already completed on %s: nothing to train (set RUN_NAME for a new run)",
                cfg.run_name,
                cfg.output_repo,
            )
            return ExitCode.OK
        if previous is None and cfg.node_rank == 0:  # a new run: can we write? before all else
            upload.prepare(cfg, publish.provenance(cfg, verdict, None))
    else:
        log.warning(
            "OUTPUT_REPO is not set: the weights stay on this volume only; if the "
            "machine goes, they go with it"
        )
    # The start weights (none when the run goes on from a checkpoint): asked for before a
    # Hub dataset's long download and fetched meanwhile; after a local one's quick check.
    found = None if resume.has_checkpoint(cfg) else weights.source(cfg)
    status.record(cfg.workspace, "staging")
    if cfg.dataset_repo:
        weights.check(cfg, found)
        start = weights.Background(cfg, found)
        dataset.stage(cfg)
        start.result()
    else:
        dataset.stage(cfg)
        weights.fetch(cfg, found)
    manifest = publish.provenance(cfg, verdict, dataset.identity(cfg))
    if previous:  # the Hub keeps the run's manifest until the resume is known to be right
        resume.check_dataset(cfg, previous, manifest)
        manifest["billed"] = previous.get("billed", [])  # the run's earlier containers
        if cfg.node_rank == 0:
            upload.prepare(cfg, manifest)  # writes it here too
    else:
        publish.write_manifest(cfg.run_dir, manifest)
    return None
