"""Before staging: the whole run fits on the volume, or the start stops (exit 4) with what it
would write, part by part, before a byte of it is written."""

import logging
import shutil
from pathlib import Path

from entrypoint.errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")

GB = 1e9


def check(workspace: Path, parts: dict[str, int]) -> None:
    """Stop when the volume's free space cannot hold what the run will still write
    (``parts``: what, bytes). No margin: only a run that cannot fit is refused (``trainbox
    plan disk`` adds one to choose a disk); the xet cache's caps are not counted."""
    need = sum(parts.values())
    free = shutil.disk_usage(workspace).free
    shown = ", ".join(f"{what} {size / GB:.2f} GB" for what, size in parts.items() if size)
    if need > free:
        raise TrainboxError(
            f"not enough space on {workspace} for the whole run: it will still write about "
            f"{need / GB:.2f} GB ({shown}) and {free / GB:.2f} GB is free; give the volume at "
            f"least {(need - free) / GB:.2f} GB more (trainbox plan disk shows the sum)",
            ExitCode.DISK,
        )
    log.info("disk: the run will still write about %.2f GB%s; %.2f GB free", need / GB,
             f" ({shown})" if shown else "", free / GB)  # fmt: skip
