"""trainbox status: the container's state on one screen, for people, scripts and
HEALTHCHECK.

Standard library only, so it answers in milliseconds, through docker exec or from a copy of
the volume (python3 -m entrypoint status --workspace COPY, from a checkout).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from entrypoint.settings import launchers
from entrypoint.settings.launchers import Volume
from entrypoint.state import cost, store
from entrypoint.state import status as state


def billed_line(bill: dict[str, Any]) -> str:
    return (f"billed {bill['before_training_s']} s before training, "
            f"{bill['after_training_s']} s after")  # fmt: skip


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _when(status: dict[str, Any], now: float | None) -> str:
    """How long the start has run; once it ended, how long it ran and how long ago."""
    phases = status.get("phases") or []
    if status.get("phase") in state.ACTIVE or not phases:
        return f"{_duration(store.age(status.get('started_at'), now))} since start"
    began, ended = store.moment(status.get("started_at")), store.moment(phases[-1][1])
    length = ended - began if began is not None and ended is not None else None
    return f"ran {_duration(length)}, ended {_duration(store.age(phases[-1][1], now))} ago"


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


def _memory(found: dict[str, Any]) -> str:
    """The container's memory: the peak against the limit, the kernel's kills."""
    peak, limit = found.get("peak_bytes"), found.get("limit_bytes")
    said = f"peak {peak / 1e9:.2f} GB" if peak else "peak unknown"
    said += f" of a {limit / 1e9:.2f} GB limit" if limit else ", no limit"
    kills = found.get("oom_kills")
    return said + (f", {kills} killed for memory" if kills else "")


def human(status: dict[str, Any], now: float | None = None) -> str:
    """One screen: phase, epoch and ETA, best metric, last upload, health, warnings."""
    lines = [f"run      {status.get('run', '?')}: {status.get('phase', '?')}, {_when(status, now)}"]
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
            f"{found['img_per_s']:.1f} img/s: {found['why']}"
        )
        if "per_1000_images" in found:
            lines.append(f"profile  ${found['per_1000_images']:.4f} per 1,000 images at this "
                         "price and speed")  # fmt: skip
        if found.get("advice"):
            lines.append(f"advice   {found['advice']}")
    if found := status.get("memory"):
        lines.append(f"memory   {_memory(found)}")
    for mend in status.get("mended", []):
        before, after = mend["workers"]
        lines.append(f"mended   a dataloader worker killed for memory: WORKERS {before} -> "
                     f"{after} from epoch {mend['epoch']}")  # fmt: skip
    if found := status.get("gpu_use"):
        last = found[-1]
        cpus = f", CPUs {last['cpu_busy']:.0%}" if "cpu_busy" in last else ""
        lines.append(f"gpu use  busy {last['busy']:.0%} of epoch {last['epoch']}{cpus}")
    for split, found in status.get("evaluation", {}).items():
        scores = ", ".join(f"{k.removeprefix('metrics/')} {v:.4f}" for k, v in found.items()
                           if k != "images")  # fmt: skip
        lines.append(f"{split:<8} {scores} on {found.get('images', '?')} images (best.pt)")
    if "upload" in status:
        lines += _upload_lines(status["upload"])
    if page := status.get("card"):
        lines.append(f"card     {page}")
    if waiting := status.get("waiting"):
        lines.append(f"waiting  {waiting}")
    if "exit_code" in status:
        lines.append(f"exit     {status['exit_code']}: {status.get('reason', status['phase'])}")
    if money := status.get("cost"):
        lines.append(f"cost     {cost.line(money)}")
    if bill := status.get("billed"):
        lines.append(f"idle     {billed_line(bill)}")
    problem = state.health(status, now)
    lines.append(f"health   {'unhealthy: ' + problem if problem else 'healthy'}")
    lines.extend(f"warning  {note}" for note in status.get("notes", []))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """trainbox status: the container's state, for people, scripts and HEALTHCHECK."""
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
    volume = Volume(args.workspace, launchers.node_rank(os.environ))  # this node's status
    while True:
        status = state.read(volume)
        if not status:
            print(
                f"no status at {store.status_path(volume)}: no container has run on "
                "this volume; point --workspace at the volume",
                file=sys.stderr,
            )
            return 1
        if args.health:
            problem = state.health(status)
            print(f"unhealthy: {problem}" if problem else f"healthy: {status['phase']}")
            return 1 if problem else 0
        if args.watch:
            print("\x1b[H\x1b[2J", end="")
        print(json.dumps(status, indent=2) if args.json else human(status), flush=True)
        if not args.watch or status.get("phase") not in state.ACTIVE:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
