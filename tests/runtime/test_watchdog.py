"""The one watchdog: its verdict, its refresh of the status, and how it ends a job that is
stuck before training (the job's stop handler raises its error: exit 9 with the reason)."""

import subprocess
import sys
from pathlib import Path

from entrypoint.errors import ExitCode
from entrypoint.runtime import watchdog
from entrypoint.settings.launchers import Volume
from entrypoint.state import status, store
from tests.conftest import REPO, settings

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def state(phase: str, started: float, progress: float) -> dict:
    return {
        "phase": phase,
        "started_at": store.stamp(started),
        "progress_at": store.stamp(progress),
    }


def test_past_a_limit_the_verdict_names_it_and_an_ended_run_has_none(tmp_path: Path) -> None:
    cfg = settings(tmp_path, MAX_RUNTIME="60", STALL_TIMEOUT="30")
    assert watchdog.verdict(cfg, state("training", T0, T0 + 50), now=T0 + 59) is None
    over = watchdog.verdict(cfg, state("training", T0, T0 + 50), now=T0 + 60)
    assert over.code == ExitCode.TIME_LIMIT
    assert "MAX_RUNTIME=60 s reached during training" in str(over)
    stalled = watchdog.verdict(cfg, state("staging", T0, T0), now=T0 + 30)
    assert stalled.code == ExitCode.STALLED and "the download received nothing" in str(stalled)
    # The job settles an ended run: no limit fires while it reports and stops the machine.
    assert watchdog.verdict(cfg, state("completed", T0, T0), now=T0 + 600) is None
    assert watchdog.verdict(settings(tmp_path), state("training", T0, T0), now=T0 + 3600) is None


def test_a_refresh_keeps_the_jobs_phase_and_copies_training_only_while_it_trains(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path)
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "status.json").write_text('{"state": "running", "completed_epochs": 2}')
    status.record(Volume(tmp_path), "staging", fresh=True)
    assert watchdog.refresh(cfg)["phase"] == "staging"
    assert "training" not in status.read(Volume(tmp_path))
    status.record(Volume(tmp_path), "training")
    refreshed = watchdog.refresh(cfg)
    assert refreshed["phase"] == "training" and refreshed["training"]["completed_epochs"] == 2


JOB = """
import sys, tempfile, time
from pathlib import Path
from entrypoint.errors import TrainboxError
from entrypoint.runtime import boot, supervise, watchdog
from entrypoint.settings import config
from entrypoint.runtime import exits
from entrypoint.state import run as this, status
cfg = config.load()
run = this.start(cfg)
status.record(cfg.volume, "staging", fresh=True)
try:
    with supervise.running(run) as supervisor:
        with watchdog.watching(supervisor), boot._stoppable(boot.Boot(run)):
            time.sleep(120)  # a download that never moves
except TrainboxError as err:
    happened = exits.outcome(run.runtime, error=err)
    code = exits.decide(happened)
    print(code, exits.reason(run.runtime, cfg.volume, code, happened), flush=True)
"""


def test_a_job_stuck_before_training_ends_with_the_watchdogs_code_and_reason(
    tmp_path: Path,
) -> None:
    env = {"WORKSPACE": str(tmp_path), "STALL_TIMEOUT": "2", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", JOB], cwd=REPO, env=env, capture_output=True, text=True, timeout=90
    )  # fmt: skip  (a guard: the limit is 2 s)
    # The job's line is the last: the watchdog's own lines, a program's, come first.
    code, _, reason = done.stdout.strip().splitlines()[-1].partition(" ")
    assert int(code) == ExitCode.STALLED, done.stderr[-2000:]
    assert reason.startswith("no progress for") and "during staging" in reason
    assert "no progress for" in status.read(Volume(tmp_path))["reason"]


def test_max_runtime_says_what_a_stop_in_its_phase_keeps(tmp_path: Path) -> None:
    """A final upload only runs during training, and only with OUTPUT_REPO."""
    said = {
        (phase, repo): str(watchdog.verdict(settings(tmp_path, MAX_RUNTIME="60", OUTPUT_REPO=repo),
                                            state(phase, T0, T0 + 50), now=T0 + 60))
        for phase in ("staging", "training") for repo in ("", "org/weights")
    }  # fmt: skip
    assert "stopped before training: nothing was trained;" in said["staging", "org/weights"]
    assert "stopped before training" in said["staging", ""]
    assert "the last finished epoch goes to OUTPUT_REPO first" in said["training", "org/weights"]
    assert "on this volume (OUTPUT_REPO is not set)" in said["training", ""]
    assert not any("after a final upload" in line for line in said.values())


def test_each_epochs_gpu_use_is_kept_and_the_first_waiting_one_said_once(
    tmp_path: Path, caplog
) -> None:
    from tests.runtime.test_utilisation import StandInNVML

    cfg = settings(tmp_path)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    store.write_prepared(runtime, {"gpus": 1, "workers": 3, "data_yaml": "d.yaml"})
    status.record(cfg.volume, "training", fresh=True, run="run")
    nvml = StandInNVML(busy=[[10, 30, 30, 50, 50, 95, 95, 95]], used=[[5, 6, 7, 8, 9, 9, 9, 9]])
    use = watchdog.Use(cfg, runtime, nvml)
    measured: dict = {}
    for done in (0, 1, 1, 2, 2, 3, 3, 4):  # epochs 2 and 3 seen whole, then 4's start
        state = watchdog.refresh(cfg, measured)  # the program's one write per check
        measured = use.check({**state, "training": {"completed_epochs": done}})
    watchdog.refresh(cfg, measured)
    kept = status.read(cfg.volume)["gpu_use"]
    assert [(r["epoch"], r["busy"], r["gpus"][0]["memory_peak_bytes"]) for r in kept] == [
        (2, 0.3, 7), (3, 0.5, 9), (4, 0.95, 9)]  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "the GPUs were busy" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("epoch 2: the GPUs were busy 30% of its ")
    assert "raise WORKERS (now 3)" in said[0]
    # 8 checks, each card 1 kJ more between them: 7 kJ counted since the first reading
    assert status.read(cfg.volume)["gpu_energy"] == {"joules": 7000.0, "gpus": 1}
    # Without NVML: nothing at all, never made-up figures.
    blind = watchdog.Use(cfg, runtime, StandInNVML([[0]], [[0]], init_fails=True))
    assert all(blind.check({"training": {"completed_epochs": done}}) == {} for done in (0, 1, 2))
