"""Preflight, the first step of a run: prove this machine can train before anything slow.

The GPU check (``gpu``), then what PyTorch's dataloaders and the run need from the
container: shared memory for the workers, the CPUs it may use (``limits``: its affinity mask
or its CPU quota, the smaller), its memory limit, and a writable volume with free space.
The verdict is logged and written to ``/workspace/trainbox/preflight.json``.
"""

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.preflight import gpu, limits
from entrypoint.settings.config import Config
from entrypoint.state import store

log = logging.getLogger("trainbox")

MIN_SHM = 1 << 30
MAX_WORKERS = 8  # WORKERS=auto's ceiling per training process
SHM_FIX = "run with --shm-size 16g (compose: shm_size) or --ipc host"


@dataclass(frozen=True)
class System:
    shm: int
    cpus: int
    free: int
    unwritable: str | None = None
    cpus_from: str = "affinity mask"  # where ``cpus`` came from
    memory_limit: int | None = None  # the container's, in bytes (None: none)
    memory_available: int | None = None  # the host's


def system(workspace: Path, group: limits.Cgroup | None = None) -> System:
    """Shared memory, CPUs, memory, and the volume's free space and writability, read off the
    machine."""
    try:
        stat = os.statvfs("/dev/shm")
        shm = stat.f_frsize * stat.f_blocks
    except OSError:
        shm = 0
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=workspace):
            pass
        unwritable = None
    except OSError as err:
        unwritable = err.strerror or str(err)
    free = shutil.disk_usage(workspace).free if workspace.is_dir() else 0
    group = group or limits.Cgroup()
    cpus, cpus_from = limits.cpus(group)
    return System(shm, cpus, free, unwritable, cpus_from, limits.memory_limit(group),
                  limits.available())  # fmt: skip


# What trainbox's own processes need beside training: the job holds LibreYOLO's classes (for
# the settings' checks), 0.86 GB resident, 0.38 GB of it torch's files (the demo, 2026-12-06).
# Under a 600 MB limit the kernel killed the job as the trainer started: exit 137, no line.
MIN_MEMORY = 1 << 30


def enough_memory(limit: int | None) -> None:
    """Stop, with the fix, a container whose memory limit trainbox itself cannot live in:
    before the job loads what makes it big."""
    if limit is not None and limit < MIN_MEMORY:
        raise TrainboxError(
            f"the container's memory limit of {limit / 1e9:.2f} GB is under the "
            f"{MIN_MEMORY / 1e9:.2f} GB trainbox needs beside training: give it more memory "
            "(docker run --memory, compose's mem_limit) or rent a machine with more",
            ExitCode.OUT_OF_MEMORY,
        )


def processes(nproc_per_node: int, device: str, gpus: int) -> int:
    """Training processes on this machine: NPROC_PER_NODE, else one per visible GPU."""
    return nproc_per_node or max(1, gpus if device != "cpu" else 1)


def fit_cpus(asked: int | str, cpus: int, procs: int) -> tuple[int, str | None]:
    """Dataloader workers per training process for ``cpus`` CPUs shared by ``procs``:
    ``auto``, their share (at most MAX_WORKERS); a number above it, lowered to it, with a note."""
    share = max(1, cpus // procs)
    if asked == "auto":
        return min(MAX_WORKERS, share), None
    assert isinstance(asked, int)
    if asked <= share:
        return asked, None
    each = f", {share} for each of {procs} training processes" if procs > 1 else ""
    return share, (f"WORKERS={asked} lowered to {share}: the container may use {cpus} CPU"
                   f"{'s' if cpus > 1 else ''}{each}")  # fmt: skip


def fit_workers(asked: int | str, shm_policy: str, procs: int,
                facts: System) -> tuple[int, list[str]]:  # fmt: skip
    """The dataloader workers this container can run, and the notes that explain a change."""
    workers, lowered = fit_cpus(asked, facts.cpus, procs)
    notes = [lowered] if lowered else []
    if workers == 0 or facts.shm >= MIN_SHM:
        return workers, notes
    size = f"{facts.shm / 2**20:.0f} MB"
    if shm_policy == "stop":
        raise TrainboxError(
            f"/dev/shm is {size}, too small for WORKERS={workers} dataloader workers: "
            f"{SHM_FIX}, or set WORKERS=0",
            ExitCode.PREFLIGHT,
        )
    notes.append(
        f"/dev/shm is {size}: WORKERS lowered from {workers} to 0 "
        f"(SHM_POLICY=lower); {SHM_FIX} to load data faster"
    )
    return 0, notes


def check(cfg: Config, probe: gpu.Probe, facts: System) -> dict:
    """The whole verdict as a dict; a failure raises the one line that says what to do."""
    if facts.unwritable:
        raise TrainboxError(
            f"{cfg.workspace} is not writable ({facts.unwritable}): mount a writable volume there",
            ExitCode.PREFLIGHT,
        )
    verdict = gpu.check(cfg.device, probe)
    cards = len(verdict.gpus)
    if cfg.device != "cpu" and cfg.nproc_per_node > cards:
        # Seen on a real card: torchrun starts the ranks, and the second fails after ~30 s
        # with "device_id cuda:1 is out of range" (libreyolo puts rank N on cuda:N).
        raise TrainboxError(
            f"NPROC_PER_NODE={cfg.nproc_per_node}: more training processes than the {cards} "
            f"GPU(s) DEVICE={cfg.device} selects, and each needs a card of its own: set "
            f"NPROC_PER_NODE=0 (one per GPU) or at most {cards}",
            ExitCode.PREFLIGHT,
        )
    procs = processes(cfg.nproc_per_node, cfg.device, cards)
    effective, notes = fit_workers(cfg.workers, cfg.shm_policy, procs, facts)
    return {
        **verdict.as_dict(),
        "notes": verdict.notes + notes,
        "device": cfg.device,
        "workers": effective,
        "shm_bytes": facts.shm,
        "cpus": facts.cpus,
        "cpus_from": facts.cpus_from,
        "memory_limit_bytes": facts.memory_limit,
        "memory_available_bytes": facts.memory_available,
        "workspace_free_bytes": facts.free,
    }


def run(cfg: Config, probe: gpu.Probe | None = None) -> dict:
    """Check this machine, log the verdict and write it to the volume, pass or fail."""
    started = time.monotonic()
    facts = system(cfg.workspace)
    try:
        probe = probe or gpu.TorchProbe(cpu_only=cfg.device == "cpu")
        result = {"ok": True, **check(cfg, probe, facts)}
    except TrainboxError as err:
        _record(cfg.workspace, {"ok": False, "error": str(err), "exit_code": int(err.code)}, facts)
        raise
    result["seconds"] = round(time.monotonic() - started, 2)
    _record(cfg.workspace, result, facts)
    _log(result)
    return result


def _record(workspace: Path, result: dict, facts: System) -> None:
    if not facts.unwritable:
        store.write_verdict(workspace, result)


def _log(result: dict) -> None:
    cuda = result["torch_cuda"] or "CPU build"
    driver = (
        f", driver {result['driver']} (CUDA {result['driver_cuda']})" if result["driver"] else ""
    )
    log.info("preflight: torch %s (%s)%s", result["torch"], cuda, driver)
    for card in result["gpus"]:
        log.info(
            "preflight: GPU %d %s, %.1f GB, sm %s, compiled kernels %s, matmul %dx%d %.2f ms, ok",
            card["index"],
            card["name"],
            card["memory_gb"],
            card["capability"],
            "yes" if card["covered"] else "no (PTX JIT)",
            gpu.SIZE,
            gpu.SIZE,
            card["kernel_seconds"] * 1000,
        )
    log.info(
        "preflight: /dev/shm %.0f MB, CPUs %d (%s), memory %s, %.1f GB free on the volume, "
        "workers %d",
        result["shm_bytes"] / 2**20,
        result["cpus"],
        result["cpus_from"],
        memory(result),
        result["workspace_free_bytes"] / 1e9,
        result["workers"],
    )
    for note in result["notes"]:
        log.warning("note: %s", note)
    log.info("preflight passed in %.1f s", result["seconds"])


def memory(result: dict) -> str:
    """The memory figures in words: the container's limit, the host's available memory."""
    limit, free = result.get("memory_limit_bytes"), result.get("memory_available_bytes")
    said = f"limit {limit / 1e9:.2f} GB" if limit else "no limit"
    return said + (f" ({free / 1e9:.1f} GB available on the host)" if free else "")


def summary(result: dict) -> str:
    """The verdict in a few words, for the status file."""
    cards = [f"GPU {c['index']} {c['name']}" for c in result["gpus"]]
    driver = f", driver {result['driver']}" if result["driver"] else ""
    return f"{', '.join(cards) or 'CPU'}; torch {result['torch']}{driver}; preflight passed"


def read(workspace: Path) -> dict:
    """The verdict the last preflight wrote on the volume ({} before one)."""
    return store.verdict(workspace)


def workers(workspace: Path, asked: int | str) -> int:
    """The dataloader workers to train with: the preflight's (it may have lowered WORKERS),
    else ``asked``, WORKERS, fitted to the CPUs (``trainbox train`` run by hand, without a
    preflight)."""
    found = read(workspace).get("workers")
    return found if isinstance(found, int) else fit_cpus(asked, limits.cpus()[0], 1)[0]
