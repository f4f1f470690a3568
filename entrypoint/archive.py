"""Tar archives: deterministic packing, and safe extraction straight from a byte stream.

Extraction refuses what could write outside the destination or create something other than
files, folders and links: absolute names, ``..``, links that resolve outside, devices and
fifos. It reads the stream once, in order, so a download can feed it with no tar on disk.
"""

import hashlib
import os
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import ExitCode, TrainboxError

BUFFER = 1 << 20


class UnsafeArchive(TrainboxError):
    def __init__(self, member: str, why: str) -> None:
        super().__init__(
            f"the dataset tar is unsafe: {member!r} {why}; repack it with `trainbox dataset pack`",
            ExitCode.DATASET,
        )


class Reader:
    """A file-like view of byte chunks that hashes and counts them as they are read."""

    def __init__(self, chunks: Iterator[bytes], progress: Callable[[int], object]) -> None:
        self._chunks = chunks
        self._chunk = memoryview(b"")
        self._progress = progress
        self.sha256 = hashlib.sha256()
        self.size = 0

    def _next(self) -> bool:
        chunk = next(self._chunks, None)
        if chunk is None:
            return False
        self.sha256.update(chunk)
        self.size += len(chunk)
        self._progress(len(chunk))
        self._chunk = memoryview(chunk)
        return True

    def read(self, size: int = -1) -> bytes:
        parts = []
        while size != 0 and (self._chunk or self._next()):
            take = len(self._chunk) if size < 0 else min(size, len(self._chunk))
            parts.append(self._chunk[:take])
            self._chunk = self._chunk[take:]
            size -= take if size > 0 else 0
        return b"".join(parts)

    def drain(self) -> None:
        """Read to the end (the tar's trailing padding), so the hash covers every byte."""
        while self.read(BUFFER):
            pass


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def _target(root: Path, name: str) -> Path:
    """Where a member goes, or UnsafeArchive. ``root`` is already resolved."""
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts:
        raise UnsafeArchive(name, "has an absolute path or '..'")
    target = root.joinpath(*parts)
    # Resolve links extracted so far: writing through one must stay inside too.
    if not _inside(root, target.parent.resolve()):
        raise UnsafeArchive(name, "goes through a link that leads outside the dataset")
    return target


def _replace(target: Path) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()


def extract(reader: Reader, dest: Path) -> int:
    """Extract a tar (optionally gzip/bz2/xz) from ``reader`` into ``dest``; return members."""
    root = dest.resolve()
    count = 0
    try:
        with tarfile.open(fileobj=reader, mode="r|*", bufsize=BUFFER) as tar:
            for member in tar:
                target = _target(root, member.name)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _replace(target)
                    with open(target, "wb") as out:
                        shutil.copyfileobj(tar.extractfile(member), out, BUFFER)
                    target.chmod(0o644 | (member.mode & 0o111))
                elif member.issym():
                    link = (target.parent.resolve() / member.linkname).resolve()
                    if Path(member.linkname).is_absolute() or not _inside(root, link):
                        raise UnsafeArchive(member.name, f"links outside ({member.linkname!r})")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _replace(target)
                    target.symlink_to(member.linkname)
                elif member.islnk():
                    source = _target(root, member.linkname)
                    if not source.is_file() or not _inside(root, source.resolve()):
                        raise UnsafeArchive(member.name, f"links outside ({member.linkname!r})")
                    _replace(target)
                    os.link(source, target)
                else:
                    raise UnsafeArchive(member.name, "is a device, fifo or other special file")
                count += 1
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise TrainboxError(
            f"the dataset tar is truncated or corrupt ({err}); upload it again", ExitCode.DATASET
        ) from None
    reader.drain()
    return count


def pack(folder: Path, out: Path) -> None:
    """Write ``folder`` as a tar whose bytes depend on the files alone: sorted names, no
    owners, fixed times and modes. Members are prefixed with the folder's name."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        return info

    paths = sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).parts)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            arcname = str(Path(folder.name) / path.relative_to(folder))
            tar.add(path, arcname=arcname, recursive=False, filter=normalise)
