"""What this container may use of the machine: its memory limit, its CPUs, and what the kernel
says of its memory as it runs (the peak, the out-of-memory kills).

Rented machines are slices: vast.ai and RunPod give a container a cgroup CPU quota (while
``nproc`` and the affinity mask still show the whole host) and a memory limit in proportion to
the GPUs rented. Both cgroup versions are read: v2's unified files (``memory.max``,
``memory.peak``, ``memory.events``, ``cpu.max``, ``cpu.stat``) and v1's controllers
(``memory.limit_in_bytes``, ``memory.max_usage_in_bytes``, ``memory.oom_control``,
``cpu.cfs_quota_us``, ``cpuacct.usage``). The container's own cgroup is found from
``/proc/self/cgroup`` under the mount (Docker's private cgroup namespace shows it at the mount's
root, a host namespace at its path); a limit set on a cgroup above it counts too. A file that
cannot be read is a figure left out (None), never a guess.
"""

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
MEMINFO = Path("/proc/meminfo")
UNLIMITED = 1 << 62  # v1 writes "no limit" as the page counter's largest value, ~9.2e18


@dataclass(frozen=True)
class Cgroup:
    """Where this process's cgroup files are: v2's one folder, or v1's per controller."""

    root: Path = CGROUP
    proc: Path = PROC_CGROUP

    @property
    def v2(self) -> bool:
        return (self.root / "cgroup.controllers").is_file()

    def folders(self, controller: str) -> list[Path]:
        """The cgroup's folders for ``controller``, its own first, then up to the mount's root
        (v1: that controller's mount; v2: the unified one)."""
        base = self.root if self.v2 else self.root / controller
        own = base / _path(self.proc, "" if self.v2 else controller).lstrip("/")
        if not own.is_dir():
            own = base  # a private namespace: the mount's root is the cgroup itself
        chain = [own]
        while chain[-1] != base and base in chain[-1].parents:
            chain.append(chain[-1].parent)
        return chain

    def read(self, controller: str, v2: str, v1: str, *, own: bool = True) -> list[str]:
        """The file's text in each folder that has it (only the own folder's with ``own``)."""
        name = v2 if self.v2 else v1
        folders = self.folders(controller)[:1] if own else self.folders(controller)
        return [text for folder in folders if (text := _text(folder / name)) is not None]


def _path(proc: Path, controller: str) -> str:
    """The cgroup path /proc/self/cgroup gives for a v1 controller, or v2's ("0::/path")."""
    for line in (_text(proc) or "").splitlines():
        _, names, path = line.split(":", 2)
        if (not controller and names == "") or controller in names.split(","):
            return path
    return "/"


def _text(file: Path) -> str | None:
    try:
        return file.read_text().strip()
    except OSError:
        return None


def _number(text: str) -> int | None:
    return int(text) if text.lstrip("-").isdigit() else None


def _field(text: str, key: str) -> int | None:
    """A ``key value`` line's value (memory.events, memory.oom_control, cpu.stat)."""
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) > 1 and parts[0] == key:
            return _number(parts[1])
    return None


def memory_limit(group: Cgroup = Cgroup()) -> int | None:
    """The container's memory limit in bytes (the smallest on its way up); None: no limit."""
    found = [n for t in group.read("memory", "memory.max", "memory.limit_in_bytes", own=False)
             if (n := _number(t)) is not None and 0 < n < UNLIMITED]  # fmt: skip
    return min(found, default=None)


def memory_peak(group: Cgroup = Cgroup()) -> int | None:
    """The most memory the container has used, page cache included, as the kernel counts it
    (v2's ``memory.peak`` needs Linux 5.19)."""
    return next((_number(t) for t in group.read("memory", "memory.peak",
                                                "memory.max_usage_in_bytes")), None)  # fmt: skip


def memory_used(group: Cgroup = Cgroup()) -> int | None:
    """The memory the container uses now, page cache included."""
    return next((_number(t) for t in group.read("memory", "memory.current",
                                                "memory.usage_in_bytes")), None)  # fmt: skip


def oom_kills(group: Cgroup = Cgroup()) -> int | None:
    """How many processes the kernel's OOM killer has killed in the container (v1's count needs
    Linux 4.13)."""
    found = group.read("memory", "memory.events", "memory.oom_control")
    return _field(found[0], "oom_kill") if found else None


def cpu_quota(group: Cgroup = Cgroup()) -> float | None:
    """The CPUs the container's quota allows (the smallest on its way up); None: no quota."""
    if group.v2:
        pairs = [t.split() for t in group.read("cpu", "cpu.max", "", own=False)]
    else:
        quota = group.read("cpu", "", "cpu.cfs_quota_us")
        period = group.read("cpu", "", "cpu.cfs_period_us")
        pairs = [[quota[0], period[0]]] if quota and period else []
    found = [int(q) / int(p) for q, p, *_ in pairs if q.isdigit() and p.isdigit() and int(p)]
    return min(found, default=None)


def cpu_seconds(group: Cgroup = Cgroup()) -> float | None:
    """The CPU time the container has used, in seconds."""
    if group.v2:
        found = group.read("cpu", "cpu.stat", "")
        usec = _field(found[0], "usage_usec") if found else None
        return usec / 1e6 if usec is not None else None
    found = group.read("cpuacct", "", "cpuacct.usage")
    return n / 1e9 if found and (n := _number(found[0])) is not None else None


def cpus(group: Cgroup = Cgroup(), affinity: int | None = None) -> tuple[int, str]:
    """The CPUs the container may use: the smaller of its affinity mask and its CPU quota,
    rounded down, at least 1; and where the figure came from."""
    mask = affinity if affinity is not None else len(os.sched_getaffinity(0))
    quota = cpu_quota(group)
    if quota is not None and quota < mask:
        name = "cpu.max" if group.v2 else "cpu.cfs_quota_us"
        return max(1, math.floor(quota)), f"CPU quota, {name}: {quota:g}"
    return mask, "affinity mask"


def available(meminfo: Path = MEMINFO) -> int | None:
    """The host's available memory (``MemAvailable``) in bytes."""
    kib = _field(_text(meminfo) or "", "MemAvailable")
    return kib * 1024 if kib is not None else None


GROWS, RESTARTS = 1000, 900  # oom_score_adj: the kernel's first choice, then its second


def expendable(score: int = GROWS, adj: Path = Path("/proc/self/oom_score_adj")) -> None:
    """Make this process (and what it starts: its children inherit it) a choice of the kernel
    when the container runs out of memory before trainbox's own processes: ``GROWS`` for those
    that grow (the trainer), ``RESTARTS`` for those supervisord starts again and that lose
    nothing (the uploader, the dashboard). Raising the score needs no privilege.

    Why a second tier: the kernel can kill twice. Seen in CI (dmesg): 25 ms after it killed a
    2.9 GB trainer, whose memory was not freed yet, the uploader's allocation found the limit
    still full and the kernel killed the largest process left, the job (0.8 GB), which had no
    line left to say. At 900 the uploader (90 MB) outranks the job at any limit trainbox
    accepts (0.9 x 1.07 GB), and the trainer outranks the uploader whenever it is larger."""
    with contextlib.suppress(OSError):  # a kernel without it: the OOM killer goes by size alone
        adj.write_text(str(score))
