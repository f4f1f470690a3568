"""The pack route's staging: trainbox's tar, or its shards, streamed from the Hub straight into
the hidden folder (no tar is stored, each sha256 is checked on the way; STAGE_PARALLEL of them
at once), with a restart point per tar every STAGE_CHECKPOINT seconds.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.dataset import landing, threads
from entrypoint.dataset.packed import archive
from entrypoint.dataset.wanted import Wanted
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.state import store

if TYPE_CHECKING:  # shards.Source stages itself through here
    from entrypoint.dataset.packed.shards import Source

log = logging.getLogger("trainbox")

SPACE_MARGIN = 1.15  # extracted data ~ the tar's size, plus 15%; the tar itself is never stored


def covered(partial: Path, source: Source) -> int:
    """The bytes a cut staging of ``source`` already holds, by its saved points."""
    return Checkpoints(partial, source, 0).covered()


def download(source: Source, wanted: Wanted, doctor: landing.Doctor | None) -> Path:
    """Stream the tar(s), STAGE_PARALLEL at once, into a hidden folder, verify each, doctor
    the whole, then swap it into place; return the staged data.yaml. Every STAGE_CHECKPOINT
    seconds each tar's restart point is saved."""
    target = wanted.folder
    partial = landing.partial_of(target)
    book = Checkpoints(partial, source, wanted.checkpoint)
    if not book.points:
        shutil.rmtree(partial, ignore_errors=True)
    landing.check_space(wanted.workspace, source.size, source.size - book.covered(), SPACE_MARGIN)
    partial.mkdir(parents=True, exist_ok=True)
    count = len(source.shards)
    log.info("staging %s/%s@%s (%s%s) into %s%s", source.repo, source.file, source.commit[:12],
             landing.gb(source.size), f" in {count} shards, {min(count, wanted.parallel)} at once"
             if source.sharded else "", target, book.describe())  # fmt: skip
    with landing.keeping(partial, target):
        with landing.Progress(wanted.volume, source.file, source.size, book.covered()) as progress:
            members = _fetch_all(source, partial, book, progress, wanted)
        book.clear()
        found = _find_yaml(partial, source.file)
        marker = {**source.identity(), "revision": source.revision, "shards": count,
                  "members": members}  # fmt: skip
        relative = landing.settle(found, partial, target, doctor, marker)
    log.info("dataset staged: %d files, sha256 %s", members, (source.sha256 or "")[:16])
    return target / relative


def _fetch_all(source: Source, partial: Path, book: Checkpoints,
               progress: landing.Progress, wanted: Wanted) -> int:  # fmt: skip
    """Extract every tar not done yet, STAGE_PARALLEL at once, each in its own thread
    (sockets, hashing (OpenSSL through ctypes) and file writes release the GIL); the first
    failure stops the others. Return the members of all tars."""
    queue = [shard for shard in source.shards if not book.done(shard.name)]

    def work(shard: hub.RemoteFile, stop: threading.Event) -> None:
        _fetch(shard, partial, book, progress, stop, wanted.hub_wait)

    threads.each(queue, work, wanted.parallel)
    return book.members()


def _fetch(shard: hub.RemoteFile, partial: Path, book: Checkpoints, progress: landing.Progress,
           stop: threading.Event, wait: float) -> None:  # fmt: skip
    """One tar: stream it from its checkpoint into ``partial``, check its size and sha256."""
    point = book.points.get(shard.name, {})
    offset = point.get("offset", 0)

    def count(size: int) -> None:
        if stop.is_set():
            raise threads.Cancelled
        progress(size)

    state = bytes.fromhex(point["state"]) if point else None
    reader = archive.Reader(hub.stream(shard, offset, wait=wait), count, offset, state)
    members = archive.extract(reader, partial, point.get("members", 0), book.saver(shard, reader))
    if reader.size != shard.size or shard.sha256 not in (None, reader.hexdigest()):
        raise TrainboxError(
            f"{shard.name}: the download does not match the Hub's size and sha256; start again",
            ExitCode.DATASET,
        )
    book.finish(shard, members)


class Checkpoints:
    """Where each tar of a staging stands, in one file in the hidden folder: for a tar cut
    midway, the stream position, the members before it and its hash state; for a tar done,
    its members. Each tar takes its point at a member boundary every ``every`` seconds; at
    most as often, one thread syncs the disk and then saves the points taken before the sync,
    so a saved point never claims what is not on disk. (A sync per tar as it finished
    cost more than the download: ``os.sync`` waits for every other tar's writes too.)"""

    def __init__(self, partial: Path, source: Source, every: int) -> None:
        self.partial, self.source, self.every = partial, source, every
        self.lock = threading.Lock()
        self.last = time.monotonic()
        saved = store.staging_checkpoint(partial)
        same = source.sha256 and saved.get("source") == source.identity()
        self.points: dict[str, dict] = saved.get("shards", {}) if same else {}
        if not archive.Sha256.resumable():  # no hash state to resume from: only done tars count
            self.points = {name: p for name, p in self.points.items() if p.get("done")}
        self.latest = dict(self.points)

    def done(self, name: str) -> bool:
        return bool(self.points.get(name, {}).get("done"))

    def covered(self) -> int:
        """The bytes already extracted, by the saved points."""
        sizes = {shard.name: shard.size for shard in self.source.shards}
        return sum(sizes[n] if p.get("done") else p["offset"] for n, p in self.points.items())

    def describe(self) -> str:
        if not self.points:
            return ""
        cut = [p for p in self.points.values() if not p.get("done")]
        done = len(self.points) - len(cut)
        if not self.source.sharded and cut:
            point = cut[0]
            return f", resuming at byte {point['offset']} ({point['members']} files already there)"
        return f", resuming: {done} tar(s) done, {len(cut)} at their last checkpoint"

    def saver(self, shard: hub.RemoteFile, reader: archive.Reader) -> Callable[[int, int], None]:
        """The extractor's callback for ``shard``, after each member: at most every ``every``
        seconds, it takes the shard's point (hashing up to there), then saves if due."""
        taken = time.monotonic()

        def save(offset: int, members: int) -> None:
            nonlocal taken
            if not self.every or time.monotonic() - taken < self.every:
                return
            state = reader.state_at(offset)
            if state is not None:
                self.latest[shard.name] = {"offset": offset, "members": members,
                                           "state": state.hex()}  # fmt: skip
                taken = time.monotonic()
            self._tick()

        return save

    def finish(self, shard: hub.RemoteFile, members: int) -> None:
        self.latest[shard.name] = {"done": True, "members": members}
        self._tick()

    def _tick(self) -> None:
        """Save the points if ``every`` seconds have passed, unless another thread is at it."""
        if not self.every or time.monotonic() - self.last < self.every:
            return
        if not self.lock.acquire(blocking=False):
            return
        try:
            taken = dict(self.latest)
            os.sync()  # what the points say is extracted must be on disk before they say so
            saved = {"source": self.source.identity(), "shards": taken}
            store.write_staging_checkpoint(self.partial, saved)
            self.last = time.monotonic()
        finally:
            self.lock.release()

    def members(self) -> int:
        """The members of every tar, once all are done."""
        return sum(point["members"] for point in self.latest.values())

    def clear(self) -> None:
        store.drop_staging_checkpoint(self.partial)


def _find_yaml(root: Path, name: str) -> Path:
    """The shallowest data.yaml in the extracted tar (at most two folders deep)."""
    for pattern in ("data.yaml", "*/data.yaml", "*/*/data.yaml"):
        if found := sorted(root.glob(pattern)):
            return found[0]
    raise TrainboxError(
        f"{name} holds no data.yaml: pack the dataset folder that contains it", ExitCode.DATASET
    )
