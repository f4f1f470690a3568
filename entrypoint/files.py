"""The file helpers every layer uses: atomic writes for files that other processes read (temp
file, fsync, rename), atomic copies, and a file's sha256."""

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

BUFFER = 1 << 20  # bytes read at a time


@contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """A temp file beside ``path`` that replaces it, complete and synced, when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    with _replacing(path) as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


class SourceChanged(OSError):
    """The file being copied was written while it was read: the copy may be torn."""


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def copy_atomic(source: Path, target: Path) -> str:
    """Copy ``source`` to ``target`` atomically, hashing on the way; return the sha256.
    ``SourceChanged`` (and ``target`` untouched) when ``source`` was written or replaced
    meanwhile: libreyolo rewrites its checkpoints in place, with a plain ``torch.save``."""
    digest = hashlib.sha256()
    with open(source, "rb") as src, _replacing(target) as dst:
        before = _identity(os.fstat(src.fileno()))
        while chunk := src.read(BUFFER):
            digest.update(chunk)
            dst.write(chunk)
        if _identity(os.stat(source)) != before:
            raise SourceChanged(f"{source} was written while it was copied")
    return digest.hexdigest()


def copied(source: Path, target: Path) -> bool:
    """``target`` is a copy of ``source`` as it is now: the same size, and ``source`` not
    written since the copy (mtime)."""
    src, dst = source.stat(), target.stat()
    return src.st_size == dst.st_size and src.st_mtime_ns <= dst.st_mtime_ns


def sha256(path: Path) -> str:
    """The hex sha256 of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(BUFFER):
            digest.update(chunk)
    return digest.hexdigest()
