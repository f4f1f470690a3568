"""Out of memory, named: a process the kernel killed at the container's memory limit is said to
be one, with the limit, the peak and the fix, never a bare "training failed" or a silent 137.

The job counts the cgroup's out-of-memory kills (``limits.oom_kills``) as a heavy process (the
preflight's, train, the evaluation's) starts and again once it has ended: a count that rose
while it failed is a kill. Where the kernel keeps no count (cgroup v1 before Linux 4.13), a
process the job started itself that died of a SIGKILL nobody in trainbox sent counts instead.
Which process the kernel chose: the trainer says when it lost a dataloader worker (PyTorch's
``DataLoader worker (pid N) is killed by signal``); otherwise it was the process itself, which
``limits.expendable`` made the kernel's first choice (the uploader its second), so that tini,
the job and supervisord live on to say it and to upload the last finished epoch.
"""

import re
import signal
from dataclasses import dataclass, field

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.preflight import limits

MENDS = 2  # resumes with WORKERS halved after dataloader workers were killed, before giving up
WORKER_DIED = re.compile(r"DataLoader worker \(pid")


@dataclass(frozen=True)
class Watch:
    """The kills the kernel had counted when a process started."""

    group: limits.Cgroup = field(default_factory=limits.Cgroup)
    before: int | None = None

    def killed(self, returncode: int | None = None) -> bool:
        """Whether the kernel killed a process in the container since: its count rose; without
        a count, the process ended of a SIGKILL (``returncode``, as subprocess gives it)."""
        now = limits.oom_kills(self.group)
        if self.before is None or now is None:
            return returncode == -signal.SIGKILL
        return now > self.before


def watch(group: limits.Cgroup | None = None) -> Watch:
    """Start counting, for a process about to start."""
    group = group or limits.Cgroup()
    return Watch(group, limits.oom_kills(group))


def worker_died(line: str) -> bool:
    """Whether the trainer's failure line is a lost dataloader worker."""
    return bool(WORKER_DIED.search(line))


def figures(group: limits.Cgroup | None = None) -> dict[str, int]:
    """The container's memory as the kernel counts it, for the status: its limit, this start's
    peak (page cache included) and the kills; a figure it does not give is left out."""
    group = group or limits.Cgroup()
    found = {"limit_bytes": limits.memory_limit(group), "peak_bytes": limits.memory_peak(group),
             "oom_kills": limits.oom_kills(group)}  # fmt: skip
    return {key: value for key, value in found.items() if value is not None}


def said(group: limits.Cgroup | None = None) -> str:
    """Where memory ran out, in words: the container's limit (or the machine's), the peak."""
    found = figures(group)
    where = (f"the container's memory limit of {_gb(found['limit_bytes'])}"
             if "limit_bytes" in found else "the machine's memory")  # fmt: skip
    return where + (f", peak {_gb(found['peak_bytes'])}" if "peak_bytes" in found else "")


def error(who: str, workers: int | None, group: limits.Cgroup | None = None) -> TrainboxError:
    """The one line of an out-of-memory kill of ``who``: the limit, the peak, the fix."""
    fewer = f"fewer WORKERS (now {workers}), " if workers else ""
    return TrainboxError(
        f"out of memory: the kernel killed {who} at {said(group)}: set {fewer}a smaller "
        "BATCH or IMGSZ, or use a machine with more memory; a restart resumes",
        ExitCode.OUT_OF_MEMORY,
    )


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"
