"""Where a route's copy lands: a hidden folder beside the dataset's place, checked for room,
with one progress line and the status's staging field; doctored, marked and swapped in whole.

Both routes (``packed``: trainbox's tars; ``published``: a dataset as it is on the Hub) write
through here, so a staging cut midway leaves either the old copy or the new one, never half.
"""

import errno
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import write_atomic
from entrypoint.settings.launchers import Volume
from entrypoint.state import status, store

log = logging.getLogger("trainbox")

Doctor = Callable[[Path], None]  # checks a staged data.yaml, raising the dataset's error


def partial_of(target: Path) -> Path:
    """The hidden folder a copy of ``target`` is built in."""
    return target.with_name(f".{target.name}.partial")


def gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def check_space(workspace: Path, size: int, left: int, margin: float) -> None:
    """Room for the ``left`` bytes still to extract (of ``size``), plus the margin."""
    (workspace / "data").mkdir(parents=True, exist_ok=True)
    need = int(left * margin)
    free = shutil.disk_usage(workspace).free
    if free < need:
        raise TrainboxError(
            f"not enough space on {workspace}: the dataset needs about {gb(need)} more "
            f"({gb(left)} of its {gb(size)} still to fetch and extract, plus "
            f"{margin - 1:.0%}) and {gb(free)} is free; give the volume more space",
            ExitCode.DISK,
        )


@contextmanager
def keeping(partial: Path, target: Path) -> Iterator[None]:
    """A cut download keeps what its checkpoints cover; anything else leaves no trace."""
    try:
        yield
    except BaseException as err:
        disk_full = isinstance(err, OSError) and err.errno == errno.ENOSPC
        bad_data = isinstance(err, TrainboxError) and err.code == ExitCode.DATASET
        if disk_full or bad_data or not store.has_staging_checkpoint(partial):
            shutil.rmtree(partial, ignore_errors=True)
        if disk_full:
            raise TrainboxError(
                f"{target.parent} filled up while extracting: give the volume more space",
                ExitCode.DISK,
            ) from None
        raise


def settle(found: Path, partial: Path, target: Path, doctor: Doctor | None,
           marker: dict) -> Path:  # fmt: skip
    """Doctor the data.yaml ``found`` in ``partial``, point it at the final place, mark the
    copy and swap it in; return ``found``'s place relative to the dataset's folder. (A
    classification folder has no data.yaml: LibreYOLO's doctor checks detection sets only.)"""
    relative = found.relative_to(partial)
    if found.is_file():
        if doctor:
            point(found, found.parent)
            doctor(found)
        point(found, (target / relative).parent)
    store.write_dataset_marker(partial, {**marker, "data_yaml": str(relative)})
    _swap(partial, target)
    return relative


def point(data: Path, where: Path) -> None:
    """Make the data.yaml's ``path:`` point at the folder that holds the data."""
    spec = yaml.safe_load(data.read_text()) or {}
    if not isinstance(spec, dict):
        raise TrainboxError(f"{data.name} in the tar is not a YOLO data.yaml", ExitCode.DATASET)
    spec["path"] = str(where)
    write_atomic(data, yaml.safe_dump(spec, sort_keys=False))


def _swap(partial: Path, target: Path) -> None:
    """Put the new copy in place; the old one goes only once the new one is complete."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)


class Meter:
    """The staging download's bytes, rate and ETA, recorded at most every 2 seconds while
    the container's phase is ``staging`` (not by a lone ``trainbox dataset stage``)."""

    def __init__(self, volume: Volume, total: int, done: int = 0) -> None:
        self.volume, self.total, self.done, self.first = volume, total, done, done
        self.started = time.monotonic()
        self.last = 0.0
        self.on = status.read(volume).get("phase") == "staging"

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if not self.on or (now - self.last < 2 and self.done < self.total):
            return
        self.last = now
        rate = (self.done - self.first) / max(now - self.started, 1e-3)
        eta = round((self.total - self.done) / rate) if rate else None
        staging = {"bytes": self.done, "total": self.total, "rate": round(rate), "eta_s": eta}
        status.record(self.volume, "staging", staging=staging, progress_at=store.stamp())


class Progress:
    """One progress line over all the files (bytes, rate, ETA), and the status's staging
    field; called from every download thread."""

    def __init__(self, volume: Volume, name: str, total: int, done: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=done, unit="B", unit_scale=True, mininterval=2,
                        desc=f"download+extract {name}")  # fmt: skip
        self.meter = Meter(volume, total, done)
        self.lock = threading.Lock()

    def __call__(self, size: int) -> None:
        with self.lock:
            self.bar.update(size)
            self.meter(size)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *_: object) -> None:
        self.bar.close()
