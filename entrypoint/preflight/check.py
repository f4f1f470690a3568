"""Preflight, the first step of a run: prove this machine can train before anything slow.

The GPU check (``gpu``), then what PyTorch's dataloaders and the run need from the
container: shared memory for the workers, CPUs, and a writable volume with free space.
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
from entrypoint.preflight import gpu
from entrypoint.settings.config import Config
from entrypoint.state import store

log = logging.getLogger("trainbox")

MIN_SHM = 1 << 30
SHM_FIX = "run with --shm-size 16g (compose: shm_size) or --ipc host"


@dataclass(frozen=True)
class System:
    shm: int
    cpus: int
    free: int
    unwritable: str | None = None


def system(workspace: Path) -> System:
    """Shared memory, CPUs, and the volume's free space and writability, read off the machine."""
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
    return System(shm, len(os.sched_getaffinity(0)), free, unwritable)


def fit_workers(cfg: Config, facts: System) -> tuple[int, list[str]]:
    """The dataloader workers this container can run, and the notes that explain a change."""
    notes = []
    if cfg.workers > facts.cpus:
        notes.append(f"WORKERS={cfg.workers} is more than the {facts.cpus} CPUs: they will contend")
    if cfg.workers == 0 or facts.shm >= MIN_SHM:
        return cfg.workers, notes
    size = f"{facts.shm / 2**20:.0f} MB"
    if cfg.shm_policy == "stop":
        raise TrainboxError(
            f"/dev/shm is {size}, too small for WORKERS={cfg.workers} dataloader workers: "
            f"{SHM_FIX}, or set WORKERS=0",
            ExitCode.PREFLIGHT,
        )
    notes.append(
        f"/dev/shm is {size}: WORKERS lowered from {cfg.workers} to 0 "
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
    effective, notes = fit_workers(cfg, facts)
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
    return {
        **verdict.as_dict(),
        "notes": verdict.notes + notes,
        "device": cfg.device,
        "workers": effective,
        "shm_bytes": facts.shm,
        "cpus": facts.cpus,
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
        _record(cfg, {"ok": False, "error": str(err), "exit_code": int(err.code)}, facts)
        raise
    result["seconds"] = round(time.monotonic() - started, 2)
    _record(cfg, result, facts)
    _log(result)
    return result


def _record(cfg: Config, result: dict, facts: System) -> None:
    if not facts.unwritable:
        store.write_verdict(cfg.workspace, result)


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
        "preflight: /dev/shm %.0f MB, %d CPUs, %.1f GB free on the volume, workers %d",
        result["shm_bytes"] / 2**20,
        result["cpus"],
        result["workspace_free_bytes"] / 1e9,
        result["workers"],
    )
    for note in result["notes"]:
        log.warning("note: %s", note)
    log.info("preflight passed in %.1f s", result["seconds"])


def summary(result: dict) -> str:
    """The verdict in a few words, for the status file."""
    cards = [f"GPU {c['index']} {c['name']}" for c in result["gpus"]]
    driver = f", driver {result['driver']}" if result["driver"] else ""
    return f"{', '.join(cards) or 'CPU'}; torch {result['torch']}{driver}; preflight passed"


def read(workspace: Path) -> dict:
    """The verdict the last preflight wrote on the volume ({} before one)."""
    return store.verdict(workspace)


def workers(workspace: Path, asked: int) -> int:
    """The dataloader workers to train with: the preflight's (it may have lowered WORKERS),
    else ``asked``, WORKERS (``trainbox train`` run by hand, without a preflight)."""
    found = read(workspace).get("workers")
    return found if isinstance(found, int) else asked
