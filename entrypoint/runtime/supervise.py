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

from entrypoint.errors import ExitCode
from entrypoint.settings.config import Config
from entrypoint.state import budget, store

log = logging.getLogger("trainbox")

TEMPLATE = Path(__file__).resolve().parents[2] / "docker" / "supervisord.conf"
TRAIN_PROGRAM = "train"


def render(runtime: Path, train_command: str, cfg: Config) -> str:
    """The supervisord config for one container run."""
    waits = budget.split(cfg.stop_grace)
    return Template(TEMPLATE.read_text()).substitute(
        runtime=runtime,
        python=sys.executable,
        train_command=train_command,
        stop_wait=waits["stop_wait_s"],
        upload=str(bool(cfg.output_repo) and cfg.node_rank == 0).lower(),
        monitor=str(cfg.monitor and cfg.node_rank == 0).lower(),
        stop_grace=waits["stop_grace_s"],
        monitor_stop=waits["monitor_stop_s"],
    )


def run(cfg: Config, train_command: str | None = None, runtime: Path | None = None) -> int:
    """Run supervisord until training ends, the watchdog fires or a stop signal arrives;
    return the exit code: training's or the watchdog's, unless the final upload failed (then
    UPLOAD: the weights are not safe). ``runtime``: the start's runtime folder, where the job
    wrote what the programs read (a new one by default)."""
    runtime = runtime or Path(tempfile.mkdtemp(prefix="trainbox-"))
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
            store.write_stop(runtime, time.time())
        stopped_by.append(signum)
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    child.wait()
    if upload and store.code(runtime, "upload") != ExitCode.OK:
        return ExitCode.UPLOAD
    for who in ("watchdog", "train"):  # a watchdog's stop outranks its effect
        if (found := store.code(runtime, who)) is not None:
            return found
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


def listen(runtime: Path) -> None:
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
            store.write_code(runtime, "train", code)
            rpc.supervisor.shutdown()
        childutils.listener.ok(sys.stdout)
