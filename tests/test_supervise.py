"""The lifecycle under real supervisord: the container ends with training's exit code.

The ``train`` program is a stand-in here (a short Python command); the real trainer runs
in the container tests.
"""

import configparser
import signal
import subprocess
import sys
import time
from pathlib import Path

from entrypoint import supervise
from entrypoint.errors import ExitCode
from tests.conftest import REPO


def launch(train_command: str) -> subprocess.Popen:
    script = (
        f"import sys; from entrypoint import supervise; sys.exit(supervise.run({train_command!r}))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_rendered_config_runs_train_and_the_listener(tmp_path: Path) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(supervise.render(tmp_path, "python -m entrypoint train"))
    assert parser["program:train"]["command"] == "python -m entrypoint train"
    assert parser["program:train"]["stopsignal"] == "INT"
    assert parser["program:train"]["autorestart"] == "false"
    assert str(tmp_path / "exit-status") in parser["eventlistener:lifecycle"]["command"]
    assert parser["program:train"]["stdout_logfile"] == "/dev/stdout"


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
