"""Process control: supervisord runs the programs, and its end is the container's end.

``trainbox run`` starts supervisord in the foreground as its child, forwards SIGTERM and
SIGINT to it, and exits with the ``train`` program's exit code, which an event listener
records when training ends on its own and then shuts supervisord down.
"""

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from string import Template

from . import status
from .atomic import write_atomic
from .config import Config
from .errors import ExitCode

log = logging.getLogger("trainbox")

TEMPLATE = Path(__file__).resolve().parent.parent / "docker" / "supervisord.conf"
TRAIN_PROGRAM = "train"
STOP_WAIT_SECONDS = 60  # at most, for training to stop; never more than half of STOP_GRACE
STOP_FILE = "stop-at"  # when the stop signal came, for the uploader's final flush


def render(runtime: Path, train_command: str, cfg: Config) -> str:
    """The supervisord config for one container run."""
    return Template(TEMPLATE.read_text()).substitute(
        runtime=runtime,
        python=sys.executable,
        train_command=train_command,
        stop_wait=min(STOP_WAIT_SECONDS, cfg.stop_grace // 2),
        upload=str(bool(cfg.output_repo) and cfg.node_rank == 0).lower(),
        monitor=str(cfg.monitor and cfg.node_rank == 0).lower(),
        stop_grace=cfg.stop_grace,
        stop_file=STOP_FILE,
    )


def run(cfg: Config, train_command: str | None = None) -> int:
    """Run supervisord until training ends, a watchdog fires or a stop signal arrives; return
    the exit code: training's or the watchdog's, unless the final upload failed (then UPLOAD:
    the weights are not safe)."""
    runtime = Path(tempfile.mkdtemp(prefix="trainbox-"))
    command = train_command or f"{sys.executable} -m entrypoint train"
    conf = runtime / "supervisord.conf"
    conf.write_text(render(runtime, command, cfg))
    upload = bool(cfg.output_repo) and cfg.node_rank == 0
    supervisord = Path(sys.executable).with_name("supervisord")
    child = subprocess.Popen([str(supervisord), "--configuration", str(conf)])
    threading.Thread(target=_wake, args=(runtime / "supervisor.sock", child), daemon=True).start()
    stopped_by: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        log.info("%s received: stopping training", signal.Signals(signum).name)
        if not stopped_by:  # the final upload's budget counts from here
            status.write_time(runtime / STOP_FILE, time.time())
        stopped_by.append(signum)
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    child.wait()
    uploaded = runtime / "upload-status"
    if upload and (not uploaded.is_file() or int(uploaded.read_text()) != ExitCode.OK):
        return ExitCode.UPLOAD
    for name in ("watchdog-status", "exit-status"):  # a watchdog's stop outranks its effect
        if (runtime / name).is_file():
            return int((runtime / name).read_text())
    if stopped_by:
        return ExitCode.INTERRUPTED
    log.error("supervisord ended (code %s) before training did", child.returncode)
    return ExitCode.TRAINING_FAILED


def _wake(sock: Path, child: subprocess.Popen) -> None:
    """Connect once to supervisord's socket as soon as it listens. Its main loop polls its
    sockets before it starts any program, with a 1 s timeout (supervisor 4.3.0,
    ``supervisord.py``, ``runforever``: ``timeout = 1``, ``poll`` then ``transition``), so
    every program was spawned a full second after "supervisord started"; an event on the
    socket ends that first wait (measured: train spawned 1.0 s sooner)."""
    deadline = time.monotonic() + 10
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as connection:
                connection.connect(str(sock))
                return
        except OSError:
            time.sleep(0.01)


def listen(status_file: Path) -> None:
    """Event listener: when ``train`` exits by itself, record its code and stop supervisord."""
    from supervisor import childutils

    rpc = childutils.getRPCInterface(os.environ)  # supervisord passes its socket's URL
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        process, _ = childutils.eventdata(payload + "\n")
        if process.get("processname") == TRAIN_PROGRAM:
            exit_status = rpc.supervisor.getProcessInfo(TRAIN_PROGRAM)["exitstatus"]
            fatal = headers["eventname"] == "PROCESS_STATE_FATAL" or exit_status < 0
            code = ExitCode.TRAINING_FAILED if fatal else exit_status
            write_atomic(status_file, f"{int(code)}\n")
            rpc.supervisor.shutdown()
        childutils.listener.ok(sys.stdout)
