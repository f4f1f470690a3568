"""Process control: supervisord runs every long-running program, and the job tells it when.

The job (``trainbox run``) starts supervisord as it takes the volume and stops it at its
very end. Every program is in its config and none starts by itself: the job starts sshd
there and then, the watchdog for the steps it watches, and train, the uploader and the
dashboard once staging is done (train's command, known only then, in an included file). It
waits for train to end, or for a stop signal, which it keeps for itself (supervisord runs in a
session of its own, so a terminal's Ctrl-C reaches the job alone), and then stops the
programs one by one in the order the final upload needs: train (SIGINT, LibreYOLO's clean
interruption), the dashboard, the uploader (its final flush), the watchdog, sshd. Each wait is
a share of STOP_GRACE (``state.budget``), and supervisord kills what outlives its share.
"""

import contextlib
import http.client
import logging
import shlex
import signal
import socket
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from string import Template
from typing import Any

from supervisor.xmlrpc import SupervisorTransport

from entrypoint.errors import ExitCode
from entrypoint.settings.config import Config
from entrypoint.state import budget, store
from entrypoint.state.run import Run

log = logging.getLogger("trainbox")

DOCKER = Path(__file__).resolve().parents[2] / "docker"  # the config's templates
TRAIN = "train"
SERVING = ("uploader", "monitor")  # started before train, in this order; stopped after it
TRAINING = (TRAIN, *reversed(SERVING))  # how training's programs stop
ORDER = (*TRAINING, "watchdog", "sshd")  # how all stop at the end: by priority
WAKE_S = 0.1  # how often the job asks whether train has ended
READY_S = 30  # supervisord's start, a guard: it listens within a second
EXEC_S = 5  # a program's exec, a guard: supervisord's fork execs it within milliseconds
GONE = (OSError, http.client.HTTPException)  # what a call to a supervisord that went raises


class Supervisor:
    """The job's handle on its supervisord: start and stop a program, ask after one."""

    def __init__(self, child: subprocess.Popen, runtime: Path) -> None:
        self.child, self.runtime = child, runtime

    @property
    def rpc(self) -> Any:
        """supervisord's XML-RPC interface, over a connection of its own for each call: a call
        a signal cut short leaves nothing half-sent for the next (a kept connection would
        refuse every later call with ``CannotSendRequest``)."""
        transport = SupervisorTransport(None, None, f"unix://{self.runtime / 'supervisor.sock'}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def start(self, name: str) -> bool:
        """Start a program; False when it could not be (its command is missing, or
        supervisord is gone)."""
        try:
            self.rpc.startProcess(name, False)
        except xmlrpc.client.Fault as fault:
            log.error("supervisord could not start %s: %s", name, fault.faultString)
            return False
        except GONE as err:
            log.error("supervisord is gone (%s): %s not started", err, name)
            return False
        return True

    def stop(self, name: str) -> None:
        """Stop a program, if it runs, within its share of STOP_GRACE."""
        try:
            self._execed(name)
            self.rpc.stopProcess(name, True)
        except xmlrpc.client.Fault:
            pass  # not running: it ended by itself, or never started
        except GONE:
            pass  # supervisord is gone

    def _execed(self, name: str) -> None:
        """Wait until a program just spawned runs its own command. supervisord forks, then
        execs it (supervisor 4.3.0's ``_spawn_as_child``): a stop signal in between reaches
        the fork's copy of supervisord's handler and is lost at the exec, and the program ran
        on until its stop wait ended in SIGKILL (7 of 30 watchdogs stopped at once: 10 s
        each, their wait). A fork still shows supervisord's command line."""
        pid = self.rpc.getProcessInfo(name)["pid"]
        forked = _command_line(self.child.pid)
        deadline = time.monotonic() + EXEC_S
        while pid and forked and _command_line(pid) == forked and time.monotonic() < deadline:
            time.sleep(0.002)

    def ended(self, name: str) -> int | None:
        """A program's exit code once it has ended by itself (killed or never up: 1)."""
        info = self.rpc.getProcessInfo(name)
        if info["statename"] == "FATAL":
            return ExitCode.TRAINING_FAILED
        if info["statename"] != "EXITED":
            return None
        return ExitCode.TRAINING_FAILED if info["exitstatus"] < 0 else info["exitstatus"]


def _command_line(pid: int) -> bytes | None:
    """A process's command line (Linux's /proc); None when it is gone or /proc is missing."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def render(runtime: Path, cfg: Config, sshd: list[str] | None = None) -> str:
    """The supervisord config for one container run, sshd's program with its command (train's
    program comes later: ``render_train``)."""
    waits = budget.split(cfg.stop_grace)
    text = _template("supervisord.conf").substitute(
        runtime=runtime,
        python=sys.executable,
        stop_grace=waits["stop_grace_s"],
        monitor_stop=waits["monitor_stop_s"],
    )
    if sshd:
        text += "\n" + _template("supervisord-sshd.conf").substitute(sshd=shlex.join(sshd))
    return text


def render_train(train_command: str, cfg: Config) -> str:
    """The train program, once its command is known."""
    wait = budget.split(cfg.stop_grace)["stop_wait_s"]
    return _template("supervisord-train.conf").substitute(train_command=train_command,
                                                          stop_wait=wait)  # fmt: skip


def _template(name: str) -> Template:
    return Template(DOCKER.joinpath(name).read_text())


@contextmanager
def running(run: Run, sshd: list[str] | None = None) -> Iterator[Supervisor]:
    """supervisord for as long as the block runs, sshd started in it when its command is given
    (``ssh.prepared``); at the end, what still runs stops in reverse priority."""
    assert run.runtime is not None, "only the job supervises"
    runtime = run.runtime
    (runtime / "supervisord.conf").write_text(render(runtime, run.settings, sshd))
    (runtime / "train.conf").write_text("; train's program comes once staging is done\n")
    store.write_job(runtime)  # who the watchdog stops
    supervisord = Path(sys.executable).with_name("supervisord")
    command = [str(supervisord), "--configuration", str(runtime / "supervisord.conf")]
    child = subprocess.Popen(command, start_new_session=True)
    supervisor = Supervisor(child, runtime)
    try:
        _ready(runtime / "supervisor.sock", child)
        if sshd:
            supervisor.start("sshd")
        yield supervisor
    finally:
        _shutdown(supervisor)


def _ready(sock: Path, child: subprocess.Popen) -> None:
    """Wait until supervisord answers on its socket."""
    deadline = time.monotonic() + READY_S
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as connection:
                connection.connect(str(sock))
                return
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"supervisord did not start (exit code {child.poll()})")


def _shutdown(supervisor: Supervisor) -> None:
    """Stop what still runs, one by one in ``ORDER``, then supervisord. (supervisord's own
    shutdown stops one program group per pass of its loop, and an idle pass lasts 1 s.)"""
    for name in ORDER:
        supervisor.stop(name)
    if supervisor.child.poll() is None:
        try:
            supervisor.rpc.shutdown()
        except (*GONE, xmlrpc.client.Fault):
            supervisor.child.terminate()
    try:
        supervisor.child.wait(timeout=30)  # a guard: what still runs got its stop already
    except subprocess.TimeoutExpired:
        supervisor.child.kill()
        supervisor.child.wait()


def train(supervisor: Supervisor, cfg: Config, train_command: str | None = None) -> bool:
    """Run train (the uploader and the dashboard beside it, as the settings ask) until it ends
    by itself, or a stop signal or the watchdog ends it; then stop them in order. Whether a
    stop signal came; train's own code, when it ended by itself, is in the runtime folder."""
    runtime = supervisor.runtime
    command = train_command or f"{sys.executable} -m entrypoint train"
    (runtime / "train.conf").write_text(render_train(command, cfg))
    try:
        supervisor.rpc.reloadConfig()
        with contextlib.suppress(xmlrpc.client.Fault):  # BAD_NAME: none yet
            supervisor.rpc.removeProcessGroup(TRAIN)  # training again: it ended (``boot``)
        supervisor.rpc.addProcessGroup(TRAIN)
    except GONE:
        log.error("supervisord is gone: training cannot start")
        return False  # nothing trained: exits.decide says supervisord ended first
    stopped_by: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        log.info("%s received: stopping training", signal.Signals(signum).name)
        if not stopped_by:  # the final upload's budget counts from here
            store.write_stop(runtime, time.time())
        stopped_by.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    serving = [name for name in SERVING if _wanted(name, cfg)]
    for name in serving:
        supervisor.start(name)
    code = _wait(supervisor, stopped_by) if supervisor.start(TRAIN) else ExitCode.TRAINING_FAILED
    if code is not None:
        store.write_code(runtime, "train", code)
    for name in TRAINING:  # each only if it runs
        supervisor.stop(name)
    return bool(stopped_by)


def _wanted(name: str, cfg: Config) -> bool:
    """The uploader with OUTPUT_REPO, the dashboard with MONITOR: on the first node only."""
    wanted = {"uploader": bool(cfg.output_repo), "monitor": cfg.monitor}[name]
    return wanted and cfg.node_rank == 0


def _wait(supervisor: Supervisor, stopped_by: list[int]) -> int | None:
    """train's code once it ends by itself; None when a stop came first or supervisord went."""
    while not stopped_by and supervisor.child.poll() is None:
        try:
            if (code := supervisor.ended(TRAIN)) is not None:
                return code
        except GONE:
            return None  # supervisord is gone
        time.sleep(WAKE_S)
    return None
