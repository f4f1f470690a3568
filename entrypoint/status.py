"""Run state, readable from outside: libreyolo's own status, and the container's.

``/workspace/trainbox/status.json`` (atomic, a few hundred bytes) says what the container is
doing: ``phase`` (``preflight``, ``resuming``, ``staging``, ``training``, ``uploading``, then
``completed``, ``failed`` or ``interrupted``; ``phases`` lists each with the time it began),
the GPU verdict, staging bytes/rate/ETA, the training epoch/ETA/metrics (from libreyolo's
status.json), the upload state (from the uploader's ledger), ``progress_at`` (the last sign
of progress, for the watchdog and the health check), timestamps, and the exit code and
reason.

One writer at a time: the job before and after supervisord, the ``watchdog`` program while
it runs, the uploader's final flush last. In a job of several machines, node 0's is the
run's status, and every other node keeps its own, ``status-nodeN.json``, for its own
watchdog and health check. ``trainbox status`` reads it with the standard
library alone, so it answers in milliseconds, through ``docker exec`` or from a copy of the
volume (``python3 -m entrypoint status --workspace COPY`` from a checkout).
"""

import argparse
import json
import os
import sys
import time
from calendar import timegm
from pathlib import Path
from typing import Any

from . import launchers
from .atomic import write_atomic

ENDED = {0: "completed", 8: "interrupted", 130: "interrupted"}
ACTIVE = ("preflight", "resuming", "staging", "training", "uploading")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(seconds: float | None = None) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


def age(stamp: str | None, now: float | None = None) -> float | None:
    """Seconds since an ``iso`` time, or None."""
    if not stamp:
        return None
    return (now or time.time()) - timegm(time.strptime(stamp, TIME_FORMAT))


def run_state(run_dir: Path) -> str | None:
    """libreyolo's ``state`` (running, completed, failed) for a run, or None if it never started."""
    return _json(run_dir / "status.json").get("state")


def _json(file: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


_node: int | None = None  # this machine's node rank; None: resolved from the environment


def for_node(rank: int) -> None:
    """Use node ``rank``'s status file (the job and its programs know their rank)."""
    global _node
    _node = rank


def path(workspace: Path) -> Path:
    """This node's status file: node 0's is the run's, every other node keeps its own (for its
    watchdog and health check), so that nodes sharing a volume never write each other's."""
    rank = launchers.node_rank(os.environ) if _node is None else _node
    return workspace / "trainbox" / ("status.json" if rank == 0 else f"status-node{rank}.json")


def ledger_path(workspace: Path, repo: str, run: str) -> Path:
    """The uploader's record of what a repo holds of a run (written by ``upload``): one per
    repo and run, so that a new OUTPUT_REPO gets every file, changed or not."""
    return workspace / "trainbox" / f"ledger-{repo.replace('/', '--')}--{run}.json"


def read_time(file: Path) -> float | None:
    """A time (seconds since the epoch) written to ``file`` by ``write_time``, or None."""
    try:
        return float(file.read_text())
    except (OSError, ValueError):
        return None


def write_time(file: Path, seconds: float) -> None:
    write_atomic(file, f"{seconds}\n")


def read(workspace: Path) -> dict[str, Any]:
    return _json(path(workspace))


# The container's clock: when it started, when training's first step began and its last one
# ended. Written by the job (``started``) and the train program (the steps), one at a time,
# in a file of its own: the train program is never a writer of the status file.
def clock_path(workspace: Path) -> Path:
    mine = path(workspace)  # this node's: clock.json, clock-nodeN.json
    return mine.with_name(mine.name.replace("status", "clock"))


def mark(workspace: Path, *, fresh: bool = False, **moments: float) -> None:
    """Record moments (seconds since the epoch); ``fresh`` starts this container's clock."""
    kept = {} if fresh else clock(workspace)
    write_atomic(clock_path(workspace), json.dumps({**kept, **moments}) + "\n")


def clock(workspace: Path) -> dict[str, float]:
    return _json(clock_path(workspace))


def process_started() -> float:
    """When this process started, from /proc (``trainbox run`` is exec'd by the image's
    entrypoint as the container starts); now, where /proc cannot tell."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
        return min(time.time(), boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def billed(moments: dict[str, float], end: float) -> dict[str, Any] | None:
    """The seconds this container was billed without training: from its start to the first
    training step, and from the end of the last one to ``end``; None if it never trained."""
    if not {"started", "first_step", "last_step"} <= moments.keys():
        return None
    return {
        "container_started": iso(moments["started"]),
        "before_training_s": round(moments["first_step"] - moments["started"]),
        "after_training_s": round(max(0.0, end - moments["last_step"])),
    }


def billed_line(bill: dict[str, Any]) -> str:
    return (f"billed {bill['before_training_s']} s before training, "
            f"{bill['after_training_s']} s after")  # fmt: skip


def record(workspace: Path, phase: str, *, fresh: bool = False, **fields: Any) -> None:
    """Set the container's phase and fields; ``fresh`` starts a new status (a new start).
    A new phase counts as progress."""
    now = iso()
    kept = {} if fresh else read(workspace)
    if kept.get("phase") != phase:
        fields["phases"] = [*kept.get("phases", []), [phase, now]]  # the run's timeline
        fields["progress_at"] = fields.get("progress_at") or now
        kept.pop("waiting", None)  # a wait for the Hub belongs to the phase it happened in
    status = {"started_at": now, **kept, **fields, "phase": phase, "updated_at": now}
    write_atomic(path(workspace), json.dumps(status, indent=2) + "\n")


def note(workspace: Path, **fields: Any) -> None:
    """Set fields, the phase staying as it is (e.g. ``waiting``: why a step waits)."""
    record(workspace, read(workspace).get("phase", "preflight"), **fields)


def ended(code: int) -> str:
    """The final phase for an exit code."""
    return ENDED.get(code, "failed")


class Meter:
    """The staging download's bytes, rate and ETA, recorded at most every 2 seconds while
    the container's phase is ``staging`` (not by a lone ``trainbox dataset stage``)."""

    def __init__(self, workspace: Path, total: int, done: int = 0) -> None:
        self.workspace, self.total, self.done, self.first = workspace, total, done, done
        self.started = time.monotonic()
        self.last = 0.0
        self.on = read(workspace).get("phase") == "staging"

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if not self.on or (now - self.last < 2 and self.done < self.total):
            return
        self.last = now
        rate = (self.done - self.first) / max(now - self.started, 1e-3)
        eta = round((self.total - self.done) / rate) if rate else None
        staging = {"bytes": self.done, "total": self.total, "rate": round(rate), "eta_s": eta}
        record(self.workspace, "staging", staging=staging, progress_at=iso())


def training(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The training fields, from libreyolo's status.json, and the time of the last sign of
    progress in the run folder (status.json, metrics.jsonl or train.log written)."""
    theirs = _json(run_dir / "status.json")
    keys = ("state", "completed_epochs", "total_epochs", "eta_seconds", "train_loss",
            "current_metric_name", "current_metric", "best_metric_name", "best_metric",
            "best_epoch", "error")  # fmt: skip
    fields = {key: theirs[key] for key in keys if theirs.get(key) is not None}
    files = (run_dir / name for name in ("status.json", "metrics.jsonl", "train.log"))
    times = [file.stat().st_mtime for file in files if file.exists()]
    return fields, iso(max(times)) if times else None


def profile(run_dir: Path) -> dict[str, Any] | None:
    """The PROFILE_STEPS verdict, from libreyolo's profile_summary.json, or None."""
    summary = _json(run_dir / "profile" / "profile_summary.json")
    if not summary:
        return None
    real = summary.get("real", {})
    return {"bound": summary.get("bound"), "why": summary.get("bound_why"),
            "step_ms": real.get("step_ms"), "img_per_s": real.get("img_per_s"),
            "dataload_frac": real.get("dataload_frac")}  # fmt: skip


def read_ledger(workspace: Path, repo: str, run: str) -> dict[str, Any]:
    """The uploader's ledger: ``files`` ({path: {sha256, commit}}) and ``state``."""
    return {"repo": repo, "files": {}, **_json(ledger_path(workspace, repo, run))}


def upload(workspace: Path, repo: str, run: str) -> dict[str, Any]:
    """The upload state the uploader keeps in its ledger."""
    return read_ledger(workspace, repo, run).get("state", {})


def health(status: dict[str, Any], now: float | None = None) -> str | None:
    """Why the container is unhealthy, or None: a failed run, or no progress for half of
    STALL_TIMEOUT (the watchdog stops it at the whole)."""
    if status.get("phase") == "failed":
        return f"failed: {status.get('reason') or 'exit code ' + str(status.get('exit_code'))}"
    stall = status.get("limits", {}).get("stall_timeout", 0)
    quiet = age(status.get("progress_at"), now)
    if stall and status.get("phase") in ACTIVE and quiet is not None and quiet > stall / 2:
        return f"no progress for {quiet:.0f} s in {status['phase']} (STALL_TIMEOUT={stall})"
    return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _upload_lines(up: dict[str, Any] | None) -> list[str]:
    if up is None:
        return ["upload   off: OUTPUT_REPO is not set, the weights stay on this volume"]
    lines = ["upload   nothing uploaded yet"]
    if up.get("epoch"):
        lines = [f"upload   epoch {up['epoch']} at {up.get('at', '?')}, "
                 f"{up.get('pending', 0)} file(s) pending"]  # fmt: skip
    if up.get("retrying"):
        lines.append(f"upload   retrying: {up['retrying']}")
    if up.get("last_error"):
        lines.append(f"warning  last upload failed: {up['last_error']}")
    return lines


def human(status: dict[str, Any], now: float | None = None) -> str:
    """One screen: phase, epoch and ETA, best metric, last upload, health, warnings."""
    lines = [
        f"run      {status.get('run', '?')}: {status.get('phase', '?')}, "
        f"{_duration(age(status.get('started_at'), now))} since start"
    ]
    if gpu := status.get("gpu"):
        lines.append(f"gpu      {gpu}")
    if staging := status.get("staging"):
        done, total = staging.get("bytes", 0), staging.get("total") or 1
        lines.append(
            f"staging  {done / 1e9:.2f}/{total / 1e9:.2f} GB ({100 * done / total:.0f}%), "
            f"{staging.get('rate', 0) / 1e6:.0f} MB/s, ETA {_duration(staging.get('eta_s'))}"
        )
    if train := status.get("training"):
        line = f"epoch    {train.get('completed_epochs', 0)}/{train.get('total_epochs', '?')}"
        if "eta_seconds" in train:
            line += f", ETA {_duration(train['eta_seconds'])}"
        if "train_loss" in train:
            line += f", loss {train['train_loss']:.4f}"
        lines.append(line)
        if "best_metric" in train:
            lines.append(
                f"best     {train.get('best_metric_name', 'metric')} {train['best_metric']:.4f} "
                f"at epoch {train.get('best_epoch', '?')}"
            )
    if found := status.get("profile"):
        lines.append(
            f"profile  {found['bound']} bound, {found['step_ms']:.0f} ms/step, "
            f"{found['img_per_s']:.0f} img/s: {found['why']}"
        )
        if found["bound"] in ("dataloader", "host / launch"):
            lines.append(
                "warning  a faster GPU would not help this run: more WORKERS (dataloader) or a "
                "bigger BATCH (host/launch) would"
            )
    if "upload" in status:
        lines += _upload_lines(status["upload"])
    if waiting := status.get("waiting"):
        lines.append(f"waiting  {waiting}")
    if "exit_code" in status:
        lines.append(f"exit     {status['exit_code']}: {status.get('reason', status['phase'])}")
    if bill := status.get("billed"):
        lines.append(f"idle     {billed_line(bill)}")
    problem = health(status, now)
    lines.append(f"health   {'unhealthy: ' + problem if problem else 'healthy'}")
    lines.extend(f"warning  {note}" for note in status.get("notes", []))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``trainbox status``: the container's state, for people, scripts and HEALTHCHECK."""
    parser = argparse.ArgumentParser(prog="trainbox status", description=main.__doc__)
    parser.add_argument("--json", action="store_true", help="print the status file's JSON")
    parser.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=float,
        metavar="SECONDS",
        help="refresh every SECONDS (2) until the run ends",
    )
    parser.add_argument(
        "--health", action="store_true", help="exit 1 if the run failed or stalled (HEALTHCHECK)"
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        default=Path(os.environ.get("WORKSPACE") or "/workspace"),
        help="the volume, or a copy of it [$WORKSPACE or /workspace]",
    )
    args = parser.parse_args(argv)
    while True:
        status = read(args.workspace)
        if not status:
            print(
                f"no status at {path(args.workspace)}: no container has run on this volume; "
                "point --workspace at the volume",
                file=sys.stderr,
            )
            return 1
        if args.health:
            problem = health(status)
            print(f"unhealthy: {problem}" if problem else f"healthy: {status['phase']}")
            return 1 if problem else 0
        if args.watch:
            print("\x1b[H\x1b[2J", end="")
        print(json.dumps(status, indent=2) if args.json else human(status), flush=True)
        if not args.watch or status.get("phase") not in ACTIVE:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
