"""The exit code's one decision, as a table: every way a start can end, and the code it gets;
then the job's last line for each failed exit."""

from pathlib import Path

import pytest

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.runtime import exits
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from tests.conftest import settings

BUDGET = TrainboxError("MAX_COST=$1.00 reached", ExitCode.BUDGET)
STOP = TrainboxError("SIGTERM received before training", ExitCode.INTERRUPTED)
Outcome = exits.Outcome


@pytest.mark.parametrize(
    ("happened", "code"),
    [
        # before training: a step's error, a stop, or a step that ends the job early
        (Outcome(error=BUDGET), ExitCode.BUDGET),
        (Outcome(error=STOP), ExitCode.INTERRUPTED),
        (Outcome(error=STOP, watchdog=ExitCode.STALLED), ExitCode.STALLED),  # the watchdog's stop
        (Outcome(early=ExitCode.PREFLIGHT), ExitCode.PREFLIGHT),
        (Outcome(early=ExitCode.OK), ExitCode.OK),  # a run already completed
        (Outcome(early=ExitCode.OK, upload=ExitCode.OK), ExitCode.OK),  # ... its upload retried
        (Outcome(early=ExitCode.OK, upload=ExitCode.UPLOAD), ExitCode.UPLOAD),  # ... and failed
        # training under supervisord
        (Outcome(train=ExitCode.OK), ExitCode.OK),
        (Outcome(train=ExitCode.OK, upload=ExitCode.OK), ExitCode.OK),
        (Outcome(train=ExitCode.OK, upload=ExitCode.UPLOAD), ExitCode.UPLOAD),
        (Outcome(train=ExitCode.TRAINING_FAILED), ExitCode.TRAINING_FAILED),
        (Outcome(train=ExitCode.NODE_LOST, upload=ExitCode.OK), ExitCode.NODE_LOST),
        (Outcome(train=ExitCode.INTERRUPTED, watchdog=ExitCode.TIME_LIMIT), ExitCode.TIME_LIMIT),
        (Outcome(train=ExitCode.INTERRUPTED, watchdog=ExitCode.BUDGET, upload=ExitCode.UPLOAD),
         ExitCode.UPLOAD),  # the weights are not safe: that outranks the limit
        (Outcome(train=ExitCode.INTERRUPTED, stopped=True), ExitCode.INTERRUPTED),
        (Outcome(stopped=True), ExitCode.INTERRUPTED),  # supervisord stopped before train ended
        (Outcome(), ExitCode.TRAINING_FAILED),  # supervisord ended before training did
    ],
)  # fmt: skip
def test_the_exit_code_of_every_end(happened: exits.Outcome, code: int) -> None:
    assert exits.decide(happened) == code


def test_the_outcome_reads_the_programs_codes(tmp_path: Path) -> None:
    store.write_code(tmp_path, "train", ExitCode.OK)
    assert exits.outcome(tmp_path, stopped=False) == Outcome(train=ExitCode.OK)
    # a final upload was due and none recorded its end: the weights are not shown safe
    assert exits.decide(exits.outcome(tmp_path, uploading=True)) == ExitCode.UPLOAD
    store.write_code(tmp_path, "upload", ExitCode.OK)
    assert exits.decide(exits.outcome(tmp_path, uploading=True)) == ExitCode.OK
    assert exits.outcome(None, early=ExitCode.PREFLIGHT) == Outcome(early=ExitCode.PREFLIGHT)


@pytest.mark.parametrize(
    ("code", "decided", "expected"),
    [
        (ExitCode.TRAINING_FAILED, ("rank", "training failed: RuntimeError: CUDA error"),
         "training failed: RuntimeError: CUDA error"),
        (ExitCode.NODE_LOST, ("rank", "training stopped on rank 0: rank 1 (node 1) stopped"),
         "training stopped on rank 0: rank 1 (node 1) stopped"),
        (ExitCode.UPLOAD, None, "`OUTPUT_REPO` cannot be written"),
        (ExitCode.TRAINING_FAILED, None, "training failed"),
        (ExitCode.TIME_LIMIT, ("watchdog", "MAX_RUNTIME=60 s reached"), "MAX_RUNTIME=60 s reached"),
        (ExitCode.OK, None, ""),
        (ExitCode.INTERRUPTED, None, ""),
    ],
)  # fmt: skip
def test_every_failed_exit_has_a_reason(
    tmp_path: Path, code: int, decided: tuple[str, str] | None, expected: str
) -> None:
    """Exits 1, 7 and 10 included: the deciding program's line, else the code's meaning."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    if decided:
        store.write_code(runtime, decided[0], code, decided[1])
    volume = settings(tmp_path).volume
    reason = exits.reason(runtime, volume, code, exits.outcome(runtime))
    assert reason.startswith(expected) and bool(reason) == bool(expected)


def test_a_steps_error_is_its_own_reason_unless_the_watchdog_stopped_it(tmp_path: Path) -> None:
    volume = Volume(tmp_path)
    assert exits.reason(None, volume, ExitCode.BUDGET, Outcome(error=BUDGET)) == str(BUDGET)
    assert exits.reason(None, volume, ExitCode.INTERRUPTED, Outcome(error=STOP)) == str(STOP)
    store.write_code(tmp_path, "watchdog", ExitCode.STALLED, reason="no progress for 60 s")
    happened = exits.outcome(tmp_path, error=STOP)
    code = exits.decide(happened)
    assert exits.reason(tmp_path, volume, code, happened) == "no progress for 60 s"
