"""Stage the training data on the volume, once: from the Hub, a mounted data.yaml, or the demo.

A Hub dataset is one tar in a dataset repo, or shards listed by an index (``shards``). Each
tar is streamed from the Hub straight into a hidden folder beside its final place (no tar is
stored, each sha256 is checked on the way; STAGE_PARALLEL of them at once), the whole is
checked by ``libreyolo doctor``, then renamed into place with a marker naming the commit it
came from. A restart with the same commit finds the marker and fetches nothing.
"""

import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import yaml

from entrypoint.dataset import forms, threads
from entrypoint.dataset.packed import archive, shards
from entrypoint.dataset.published import route as published
from entrypoint.dataset.wanted import Wanted  # the stage's settings, for its callers too
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import write_atomic
from entrypoint.gateways import hub
from entrypoint.settings.launchers import Volume
from entrypoint.state import status, store

log = logging.getLogger("trainbox")

SPACE_MARGIN = 1.15  # extracted data ~ the tar's size, plus 15%; the tar itself is never stored


Doctor = Callable[[Path], None]  # checks a staged data.yaml, raising the dataset's error


def read_marker(path: Path) -> dict:
    """The completion marker of a staged Hub dataset, or {} when there is none."""
    return store.dataset_marker(path)


def data_yaml(wanted: Wanted) -> Path:
    """The data.yaml that training reads (for a Hub dataset, once staged)."""
    if wanted.data:
        return Path(wanted.data)
    if wanted.repo:
        return wanted.folder / read_marker(wanted.folder).get("data_yaml", "data.yaml")
    return wanted.folder / "data.yaml"


def identity(wanted: Wanted) -> dict:
    """What the run trains on, for its manifest: the Hub commit and sha256, or the path."""
    if wanted.repo:
        marker = read_marker(wanted.folder)
        return {key: marker.get(key) for key in ("repo", "file", "revision", "commit", "sha256")}
    return {"data": wanted.data or "the built-in demo"}


Source = shards.Source | published.Source


def pending(wanted: Wanted) -> Source | None:
    """The Hub dataset still to download (one listing of the repo, nothing downloaded); None
    when there is nothing to fetch: not a Hub dataset, or the staged copy serves (the same
    commit, or any staged commit while the Hub cannot be asked)."""
    if not wanted.repo:
        return None
    marker = read_marker(wanted.folder)
    same = (marker.get("repo"), marker.get("revision")) == (wanted.repo, wanted.revision)
    staged = bool(marker) and same and wanted.file in ("", marker.get("file"))
    try:
        # With a staged copy, don't wait on retries: it can be trained on as it is.
        source = resolve(wanted, wait=0 if staged else wanted.hub_wait)
    except hub.Unreachable as err:
        if not staged:
            raise
        log.warning("%s; training on the copy staged from commit %s", err, marker["commit"])
        return None
    if staged and (marker.get("commit"), marker.get("file")) == (source.commit, source.file):
        log.info("dataset %s@%s already staged in %s", source.repo, source.commit[:12],
                 wanted.folder)  # fmt: skip
        return None
    return source


def resolve(wanted: Wanted, *, wait: float) -> Source:
    """DATASET_FILE's tar or index; else the form one listing of the repo shows (a pack's
    own files, pinned to the listing's commit, or a dataset as published)."""
    repo, revision = wanted.repo, wanted.revision
    if wanted.file:
        return shards.resolve(repo, wanted.file, revision, wait=wait)
    listing = hub.listing(hub.Target("DATASET_REPO", repo, "", revision), wait=wait)
    form, shown = forms.decide(repo, revision, [f.name for f in listing.files], wanted.form)
    if form != "trainbox":
        return published.source(listing, form, shown, wanted.config)
    name = next(n for n in shards.defaults(repo) if n in shown)
    found = shards.resolve(repo, name, listing.commit, wait=wait)
    return replace(found, revision=revision)


def left(wanted: Wanted, source: Source | None) -> int:
    """The bytes staging ``source`` will still write: what a cut download's checkpoints do not
    cover, plus the margin (the extracted files are about the tar's size)."""
    if source is None:
        return 0
    partial = wanted.folder.with_name(f".{wanted.folder.name}.partial")
    if isinstance(source, published.Source):
        return int((source.size - published.covered(partial, source)) * published.margin(source))
    return int((source.size - _Checkpoints(partial, source, 0).covered()) * SPACE_MARGIN)


def stage(wanted: Wanted, source: Source | None, doctor: Doctor | None = None) -> Path:
    """Make the dataset ready on the volume, once; return its data.yaml. ``source``: the Hub
    dataset ``pending`` found still to download; ``doctor``: what checks a data.yaml before
    it is put in place (``runtime.processes.doctor``; None: DOCTOR=false)."""
    if isinstance(source, published.Source):
        return _build(source, wanted, doctor)
    if source is not None:
        return _download(source, wanted, doctor)
    path = data_yaml(wanted)
    if wanted.repo:
        return path
    if wanted.is_demo:
        from entrypoint.dataset import demo  # numpy and PIL load only when the demo is used

        _, written = demo.ensure(path.parent)
        log.info("demo dataset %s %s", "written to" if written else "reused from", path.parent)
        return path
    if not path.is_file():
        raise TrainboxError(
            f"DATA={wanted.data}: no such file in the container; mount the dataset "
            "under /workspace and point DATA at its data.yaml, or unset DATA for the demo",
            ExitCode.DATASET,
        )
    if doctor:
        doctor(path)
    return path


def _check_space(workspace: Path, size: int, left: int, margin: float = SPACE_MARGIN) -> None:
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


def gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def _download(source: shards.Source, wanted: Wanted, doctor: Doctor | None) -> Path:
    """Stream the tar(s), STAGE_PARALLEL at once, into a hidden folder, verify each, doctor
    the whole, then swap it into place; return the staged data.yaml. Every STAGE_CHECKPOINT
    seconds each tar's restart point is saved."""
    target = wanted.folder
    partial = target.with_name(f".{target.name}.partial")
    book = _Checkpoints(partial, source, wanted.checkpoint)
    if not book.points:
        shutil.rmtree(partial, ignore_errors=True)
    _check_space(wanted.workspace, source.size, source.size - book.covered())
    partial.mkdir(parents=True, exist_ok=True)
    count = len(source.shards)
    log.info("staging %s/%s@%s (%s%s) into %s%s", source.repo, source.file, source.commit[:12],
             gb(source.size), f" in {count} shards, {min(count, wanted.parallel)} at once"
             if source.sharded else "", target, book.describe())  # fmt: skip
    with _keeping(partial, target):
        with _Progress(wanted.volume, source, book.covered()) as progress:
            members = _fetch_all(source, partial, book, progress, wanted)
        book.clear()
        found = _find_yaml(partial, source.file)
        marker = {**source.identity(), "revision": source.revision, "shards": count,
                  "members": members}  # fmt: skip
        relative = _settle(found, partial, target, doctor, marker)
    log.info("dataset staged: %d files, sha256 %s", members, (source.sha256 or "")[:16])
    return target / relative


def _build(source: published.Source, wanted: Wanted, doctor: Doctor | None) -> Path:
    """Fetch a published dataset, converting it into a hidden folder; then as a tar's."""
    target = wanted.folder
    partial = target.with_name(f".{target.name}.partial")
    done = published.covered(partial, source)
    _check_space(wanted.workspace, source.size, source.size - done, published.margin(source))
    log.info("staging %s@%s (%s, %d files, %s) into %s%s", source.repo, source.commit[:12],
             source.file, len(source.shards), gb(source.size), target,
             f", resuming: {gb(done)} already converted" if done else "")  # fmt: skip
    with _keeping(partial, target):
        with _Progress(wanted.volume, source, done) as progress:
            found = published.build(source, partial, wanted, progress)
        marker = {**source.identity(), "revision": source.revision, "form": source.form}
        relative = _settle(found, partial, target, doctor, marker)
    log.info("dataset staged: %s form converted into %s", source.form, target)
    return target / relative


@contextmanager
def _keeping(partial: Path, target: Path) -> Iterator[None]:
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


def _settle(found: Path, partial: Path, target: Path, doctor: Doctor | None,
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


def _fetch_all(source: shards.Source, partial: Path, book: "_Checkpoints",
               progress: "_Progress", wanted: Wanted) -> int:  # fmt: skip
    """Extract every tar not done yet, STAGE_PARALLEL at once, each in its own thread
    (sockets, hashing (OpenSSL through ctypes) and file writes release the GIL); the first
    failure stops the others. Return the members of all tars."""
    queue = [shard for shard in source.shards if not book.done(shard.name)]

    def work(shard: hub.RemoteFile, stop: threading.Event) -> None:
        _fetch(shard, partial, book, progress, stop, wanted.hub_wait)

    threads.each(queue, work, wanted.parallel)
    return book.members()


def _fetch(shard: hub.RemoteFile, partial: Path, book: "_Checkpoints", progress: "_Progress",
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


class _Progress:
    """One progress line over all the tars (bytes, rate, ETA), and the status's staging field;
    called from every download thread."""

    def __init__(self, volume: Volume, source: shards.Source, done: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=source.size, initial=done, unit="B", unit_scale=True,
                        mininterval=2, desc=f"download+extract {source.file}")  # fmt: skip
        self.meter = Meter(volume, source.size, done)
        self.lock = threading.Lock()

    def __call__(self, size: int) -> None:
        with self.lock:
            self.bar.update(size)
            self.meter(size)

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *_: object) -> None:
        self.bar.close()


class _Checkpoints:
    """Where each tar of a staging stands, in one file in the hidden folder: for a tar cut
    midway, the stream position, the members before it and its hash state; for a tar done,
    its members. Each tar takes its point at a member boundary every ``every`` seconds; at
    most as often, one thread syncs the disk and then saves the points taken before the sync,
    so a saved point never claims what is not on disk. (A sync per tar as it finished
    cost more than the download: ``os.sync`` waits for every other tar's writes too.)"""

    def __init__(self, partial: Path, source: shards.Source, every: int) -> None:
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


def judge(report: dict, returncode: int, stderr: str) -> None:
    """What ``libreyolo doctor``'s report says (``runtime.processes.doctor`` runs it): errors
    stop the run with its findings; warnings are logged."""
    findings = report.get("findings", [])
    for finding in findings:
        log.warning("doctor %s: %s", finding.get("severity"), finding.get("message"))
    errors = [f for f in findings if f.get("severity") == "error"]
    if errors or returncode != 0:
        first = errors[0].get("message") if errors else stderr.strip()[-200:]
        raise TrainboxError(
            f"libreyolo doctor found {len(errors) or 'an'} error(s) in the dataset, first: "
            f"{first} Fix the dataset, or set DOCTOR=false to train anyway",
            ExitCode.DATASET,
        )
    log.info("doctor: the dataset is healthy (%d warning(s))", len(findings))
