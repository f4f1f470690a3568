"""The lifecycle under real supervisord: the container ends with training's exit code.

The ``train`` program is a stand-in here (a short Python command); the real trainer runs
in the container tests.
"""

import configparser
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from entrypoint.runtime import exits, supervise
from entrypoint.settings import config
from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume
from entrypoint.state import budget, status
from entrypoint.state import run as this
from tests.conftest import REPO

# supervisord with train alone, as the job runs it; with the watchdog beside it, as the job
# starts it (the status recorded first, as the job records it); the exit code as the job
# decides it.
ALONE = (
    "run = this.start(cfg)\n"
    "with supervise.running(run) as supervisor:\n"
    "    stopped = supervise.train(supervisor, cfg, {command!r})\n"
)
WATCHED = (
    "run = this.start(cfg)\n"
    "status.record(cfg.volume, 'training', fresh=True)\n"
    "with supervise.running(run) as supervisor, watchdog.watching(supervisor):\n"
    "    stopped = supervise.train(supervisor, cfg, {command!r})\n"
)
DECIDED = "sys.exit(exits.decide(exits.outcome(run.runtime, stopped=stopped)))"


def launch(
    train_command: str, workspace: Path | None = None, *, watched: bool = False, **env: str
) -> subprocess.Popen:
    script = (
        "import sys, tempfile\nfrom pathlib import Path\n"
        "from entrypoint.settings import config\n"
        "from entrypoint.runtime import exits, supervise, watchdog\n"
        "from entrypoint.state import run as this, status\n"
        "cfg = config.load()\n"
        + (WATCHED if watched else ALONE).format(command=train_command)
        + DECIDED
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "WORKSPACE": str(workspace or Path(tempfile.mkdtemp())),
            "MONITOR": "false",
            "OUTPUT_REPO": "",
            "TRAINBOX_CONFIG": "",
            **env,
        },
    )


def test_every_program_is_in_the_config_and_none_starts_by_itself(tmp_path: Path) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    sshd = ["/usr/sbin/sshd", "-D", "-f", "/run/x/sshd_config"]
    parser.read_string(supervise.render(tmp_path, Config(), sshd))
    parser.read_string(supervise.render_train("python -m entrypoint train", Config()))
    programs = {name.split(":")[1]: parser[name] for name in parser if name.startswith("program:")}
    assert sorted(programs) == ["monitor", "sshd", "train", "uploader", "watchdog"]
    assert all(program["autostart"] == "false" for program in programs.values())
    assert programs["sshd"]["command"] == "/usr/sbin/sshd -D -f /run/x/sshd_config"
    assert programs["train"]["command"] == "python -m entrypoint train"
    assert programs["train"]["stopsignal"] == "INT"
    assert programs["train"]["autorestart"] == "false"
    assert parser["include"]["files"] == f"{tmp_path}/train.conf"  # added once staging is done
    # Every program finds the start's runtime folder, where the store keeps their codes.
    assert parser["supervisord"]["environment"] == f'TRAINBOX_RUNTIME="{tmp_path}"'
    assert all(program["stdout_logfile"] == "/dev/stdout" for program in programs.values())
    # What is left at the end stops in reverse priority: train, monitor, the uploader's flush,
    # the watchdog, sshd last.
    priority = {name: int(program["priority"]) for name, program in programs.items()}
    assert sorted(priority, key=priority.get, reverse=True) == [
        "train", "monitor", "uploader", "watchdog", "sshd"
    ]  # fmt: skip
    waits = budget.split(Config().stop_grace)
    assert int(programs["train"]["stopwaitsecs"]) == waits["stop_wait_s"]
    assert int(programs["uploader"]["stopwaitsecs"]) == waits["stop_grace_s"]
    without = configparser.ConfigParser(interpolation=None)
    without.read_string(supervise.render(tmp_path, Config()))
    assert "program:sshd" not in without  # no key: nothing listens


@pytest.mark.parametrize(
    ("limits", "code", "reason"),
    [
        ({"STALL_TIMEOUT": "3"}, ExitCode.STALLED, "no progress for"),
        ({"MAX_RUNTIME": "3", "STALL_TIMEOUT": "0"}, ExitCode.TIME_LIMIT, "MAX_RUNTIME=3 s"),
    ],
    ids=["stall", "max-runtime"],
)
def test_the_watchdog_ends_a_run_past_its_limit(
    tmp_path: Path, limits: dict, code: int, reason: str
) -> None:
    """A trainer that never finishes (a stand-in that sleeps 600 s) is stopped, with the
    watchdog's exit code and reason."""
    proc = launch("sleep 600", tmp_path, watched=True, **limits)
    out, _ = proc.communicate(timeout=120)  # a guard: the stop itself comes at 3 s
    assert proc.returncode == code, out
    assert reason in out
    written = status.read(Volume(tmp_path))
    assert reason in written["reason"] and written["phase"] == "training"


def test_exit_code_of_training_is_the_exit_code_of_the_run() -> None:
    proc = launch(f"{sys.executable} -c 'print(\"training\"); raise SystemExit(7)'")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 7, out
    assert "training" in out  # program output reaches the container's stdout


def test_success_ends_supervisord_with_zero() -> None:
    proc = launch(f"{sys.executable} -c 'pass'")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out


def test_a_trainer_killed_by_a_signal_is_a_failure() -> None:
    proc = launch(f"{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.TRAINING_FAILED, out


def test_sigterm_interrupts_training_with_sigint(tmp_path: Path) -> None:
    marker = tmp_path / "got-sigint"
    trainer = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(marker)!r}, 'w').close(); sys.exit(130)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    script = tmp_path / "trainer.py"
    script.write_text(trainer)
    proc = launch(f"{sys.executable} {script}")
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        if "ready" in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, out
    assert marker.exists()


@pytest.mark.parametrize("how", ["shut down", "killed"])
def test_a_supervisord_gone_before_the_end_still_lets_the_job_end(tmp_path: Path, how: str) -> None:
    """What the job asks of a supervisord that has gone (shut down, or killed) fails quietly:
    the end goes on, to its own exit code, instead of a traceback."""
    run = this.start(config.load({"WORKSPACE": str(tmp_path), "TRAINBOX_CONFIG": ""}))
    began = time.monotonic()
    with supervise.running(run) as supervisor:
        if how == "shut down":
            supervisor.rpc.shutdown()
        else:
            supervisor.child.kill()
        supervisor.child.wait(timeout=30)
        assert not supervisor.start("watchdog")
        supervisor.stop("watchdog")
        assert supervise.train(supervisor, run.settings, "sleep 600") is False
    assert time.monotonic() - began < 10  # nothing waited for what is not there
    happened = exits.outcome(run.runtime)
    assert happened.train is None and exits.decide(happened) == ExitCode.TRAINING_FAILED


def test_a_program_stopped_as_soon_as_it_starts_gets_its_stop_signal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """supervisord forks, then execs the program: a stop signal sent in between reaches the
    fork's copy of supervisord's own handler and is lost at the exec, and the program ran on
    until its stop wait ended in SIGKILL (10 s for a watchdog that a bad setting stopped at
    once). The job's stop waits for the exec, so the signal reaches the program itself."""
    run = this.start(config.load({"WORKSPACE": str(tmp_path), "TRAINBOX_CONFIG": ""}))
    tries = 30
    with supervise.running(run) as supervisor:
        for _ in range(tries):
            assert supervisor.start("watchdog")
            supervisor.stop("watchdog")
    log = capfd.readouterr().out  # supervisord's own log: how each program ended
    assert log.count("stopped: watchdog (terminated by SIGTERM)") == tries, log
    assert "SIGKILL" not in log
