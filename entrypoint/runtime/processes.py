"""The processes trainbox starts for one-off work and for its supervised programs, started
here: the preflight's own process, ``libreyolo doctor``, torchrun and its ranks, the
dashboard. (supervisord, the watchdog and sshd are started by ``supervise``, ``watchdog`` and
``ssh``, in this folder too; a test keeps every process start inside ``runtime``.)

The stages above decide what a process's answer means (``dataset.stage.judge``,
``training.distributed``); this module only runs it.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.state import store
from entrypoint.state.run import Run
from entrypoint.training import distributed

# The stages a function judges with are imported inside it: the supervised programs start
# side by side with training (monitor, launch, elastic), and the dataset stage's imports (the
# Hub client among them) made `import entrypoint.runtime.processes` 0.25 s, against 0.07 s.

log = logging.getLogger("trainbox")


def preflight(run: Run) -> int:
    """``trainbox check`` in its own process, with this start's settings: the CUDA context it
    opens must not outlive the check. Its exit code."""
    command = [sys.executable, "-m", "entrypoint", "check"]
    return subprocess.run(command, env=run.environ, check=False).returncode


def evaluator(run: Run) -> int | None:
    """``trainbox evaluate`` in its own process (its memory and CUDA context go with it); its
    exit code, or None when a stop signal came before or during it (kept, as a stop during
    training is, for the final steps' budget)."""
    assert run.runtime is not None, "evaluate is started by trainbox run"
    runtime = run.runtime
    stopped: list[int] = []
    child: list[subprocess.Popen] = []

    def stop(signum: int, _frame: object) -> None:
        log.info("%s received: stopping the evaluation", signal.Signals(signum).name)
        if not stopped and store.stop(runtime) is None:
            store.write_stop(runtime, time.time())
        stopped.append(signum)
        for each in child:
            each.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if store.stop(runtime) is not None:  # it came once training had ended: none started
            return None
        child.append(subprocess.Popen([sys.executable, "-m", "entrypoint", "evaluate"],
                                      env=run.environ))  # fmt: skip
        if stopped:  # between the check and the start
            child[0].terminate()
        code = child[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return None if stopped else code


def doctor(data: Path) -> None:
    """``libreyolo doctor`` on a staged folder; ``stage.judge`` says what its report means."""
    from entrypoint.dataset import stage

    command = [str(Path(sys.executable).with_name("libreyolo")), "doctor", str(data), "--json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        report = json.loads(result.stdout)
    except (OSError, ValueError) as err:
        raise TrainboxError(
            f"libreyolo doctor could not check {data} ({err}); set DOCTOR=false to skip it",
            ExitCode.DATASET,
        ) from None
    stage.judge(report, result.returncode, result.stderr)


def dashboard(run: Run) -> None:
    """The ``monitor`` program: ``libreyolo monitor`` in this process, once the run folder is
    one to it.

    libreyolo's monitor exits 3 ("No training runs found") for a run folder without its
    markers (status.json, metrics.jsonl or results.csv: libreyolo/ui/train_monitor.py), and
    the folder exists before training writes them: supervisord restarted it in a loop, with an
    "exited: monitor (exit status 3; not expected)" line each time.
    """
    from entrypoint.training import publish

    cfg = run.settings
    while not any((cfg.run_dir / marker).is_file() for marker in publish.MONITOR_MARKERS):
        time.sleep(2)
    libreyolo = str(Path(sys.executable).with_name("libreyolo"))
    os.execv(libreyolo, [libreyolo, "monitor", str(cfg.run_dir), "--host", cfg.monitor_host,
                         "--port", str(cfg.monitor_port), "--no-browser"])  # fmt: skip


def launch(run: Run, procs: int) -> int:
    """The ``train`` program under torchrun: run it, then turn how it ended into one line and
    the job's exit code. A stop reaches torchrun and the ranks (the whole process group), so
    this waits for them.

    A rank that dies once the job finished (rank 0 published the last epoch and every rank
    heard it: ``Heartbeat.finish``) fails torchrun, not the run: the job ends 0, with a warning
    naming the rank and its signal."""
    cfg, runtime = run.settings, run.runtime
    assert runtime is not None, "launch is started by trainbox run"
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)
    meeting = distributed.Meeting.of(cfg)
    command = distributed.torchrun(meeting, procs)
    code = subprocess.run(command, env=distributed.environment(cfg.device), check=False).returncode
    return distributed.verdict(meeting, code, store.code(runtime, "rank"), store.failures(runtime),
                               store.started(runtime))  # fmt: skip


def elastic(argv: list[str], run: Run) -> int:
    """torchrun (``torch.distributed.run``'s own ``main``, as ``python -m torch.distributed.run``
    runs it), keeping each failed rank's exit code or signal for ``launch``: torchrun says them
    only in its printed report (``ChildFailedError.failures``)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(argv)
    except ChildFailedError as err:
        if run.runtime:
            failures = {rank: failure.exitcode for rank, failure in err.failures.items()}
            store.write_failures(run.runtime, failures)
        raise
    return ExitCode.OK
