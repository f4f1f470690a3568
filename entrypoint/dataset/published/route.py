"""Stage a dataset as it is published on the Hub (``forms``), converted into what LibreYOLO
reads (``layout``) while it is fetched.

Files are fetched by the Hub client itself (Xet included), STAGE_PARALLEL at once, into
``.fetch/`` inside the hidden staging folder; the client remembers there what it fetched, so a
cut staging fetches a finished file only once. Parquet files are converted one at a time as
they arrive and deleted (the disk holds the converted copy and the files in flight); a file
converted is recorded in the staging checkpoint with the counts so far, and a restart skips it.
Folders (YOLO, COCO, ImageFolder) and a zip are converted once all their files are there.
"""

import hashlib
import logging
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO

from entrypoint.dataset import forms, landing, threads
from entrypoint.dataset.published import boxes, folders, images, layout, parquet
from entrypoint.dataset.wanted import Wanted
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.state import store

log = logging.getLogger("trainbox")

FETCH = ".fetch"
SAMPLE_ROWS = 500  # rows whose boxes decide the layout (with their images' sizes)


@dataclass(frozen=True)
class Source:
    """A published dataset at one commit: its form and the files to fetch."""

    repo: str
    revision: str
    commit: str
    form: str
    shards: tuple[hub.RemoteFile, ...]  # the files to fetch (named as a pack's shards are)
    card: hub.RemoteFile | None = None  # README.md: its YAML may name the classes (parquet)

    @property
    def file(self) -> str:
        return f"{self.form} files"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.shards)

    @property
    def sharded(self) -> bool:
        return False

    @property
    def sha256(self) -> str:
        """One hash over the files' names and hashes: the same files give the same value."""
        text = "\n".join(f"{f.name} {f.etag} {f.size}" for f in self.shards)
        return hashlib.sha256(text.encode()).hexdigest()

    def identity(self) -> dict:
        return {"repo": self.repo, "file": self.file, "commit": self.commit,
                "sha256": self.sha256, "size": self.size}  # fmt: skip

    @property
    def margin(self) -> float:
        """Disk per fetched byte: a zip is kept until it is extracted beside its files; images
        re-encoded (EXIF rotation, colour modes) and labels add to the rest."""
        return 2.15 if self.form == "archive" else 1.15

    def covered(self, partial: Path) -> int:
        """The bytes a cut staging already holds in ``partial`` (its checkpoint's finished
        files)."""
        saved = store.staging_checkpoint(partial)
        if saved.get("source") != self.identity():
            return 0
        done = set(saved.get("done", []))
        return sum(f.size for f in self.shards if f.name in done)

    def stage(self, wanted: Wanted, doctor: landing.Doctor | None) -> Path:
        """Fetch and convert into place; what training reads."""
        return stage(self, wanted, doctor)


def source(listing: hub.Listing, form: str, shown: list[str], config: str = "") -> Source:
    """What to fetch for ``form``: the parquet files of known splits, of one config; every file
    under a YOLO data.yaml's folder; a COCO folder's JSON and images; an ImageFolder's images;
    the zip."""
    files = [f for f in listing.files if not f.name.startswith(".")]
    if form == "parquet":
        keep = _one_config([f for f in files if f.name.endswith(".parquet")
                            and split_of(f.name)], config, listing.repo)  # fmt: skip
        if not keep:
            raise TrainboxError(
                f"DATASET_REPO={listing.repo}: its parquet files name no train, validation or "
                f"test split ({forms.few([f.name for f in files if f.name.endswith('.parquet')])})",
                ExitCode.DATASET,
            )
    elif form == "yolo":
        base = str(PurePosixPath(shown[0]).parent)
        keep = [f for f in files if base == "." or f.name.startswith(f"{base}/")]
    elif form == "archive":
        keep = [f for f in files if f.name in shown]
    else:  # coco, imagefolder
        keep = [f for f in files if forms.COCO_JSON.search(f.name) or forms.is_image(f.name)]
    card = next((f for f in listing.files if f.name == "README.md"), None)
    return Source(listing.repo, listing.revision, listing.commit, form, tuple(keep), card)


def _one_config(files: list[hub.RemoteFile], config: str, repo: str) -> list[hub.RemoteFile]:
    """The files of DATASET_CONFIG, or of the only config there is: several configs (subsets)
    are different datasets, and the Hub's conversion branch holds every one."""
    configs = sorted({parquet.config_of(f.name) for f in files})
    wanted = {config, "data" if config == "default" else config}
    if config:
        if not wanted & set(configs):
            raise TrainboxError(f"DATASET_CONFIG={config}: {repo} has no such config; it has "
                                f"{', '.join(c or '.' for c in configs)}",
                                ExitCode.DATASET)  # fmt: skip
        return [f for f in files if parquet.config_of(f.name) in wanted]
    if len(configs) > 1:
        raise TrainboxError(f"DATASET_REPO={repo} holds {len(configs)} configs (subsets): "
                            f"{', '.join(c or '.' for c in configs)}; set DATASET_CONFIG to one",
                            ExitCode.DATASET)  # fmt: skip
    return files


def split_of(name: str) -> str | None:
    """LibreYOLO's split for a parquet file, by its name; None for one it does not train on."""
    return layout.split_of(parquet.split_of(name))


def stage(source: Source, wanted: Wanted, doctor: landing.Doctor | None) -> Path:
    """Fetch ``source``, converting it into a hidden folder, then doctor and swap it into place
    as a tar's copy is; return what training reads."""
    target = wanted.folder
    partial = landing.partial_of(target)
    done = source.covered(partial)
    landing.check_space(wanted.workspace, source.size, source.size - done, source.margin)
    log.info("staging %s@%s (%s, %d files, %s) into %s%s", source.repo, source.commit[:12],
             source.file, len(source.shards), landing.gb(source.size), target,
             f", resuming: {landing.gb(done)} already converted" if done else "")  # fmt: skip
    with landing.keeping(partial, target):
        with landing.Progress(wanted.volume, source.file, source.size, done) as progress:
            found = build(source, partial, wanted, progress)
        marker = {**source.identity(), "revision": source.revision, "form": source.form}
        relative = landing.settle(found, partial, target, doctor, marker)
    log.info("dataset staged: %s form converted into %s", source.form, target)
    return target / relative


def build(source: Source, partial: Path, wanted: Wanted,
          progress: Callable[[int], None]) -> Path:  # fmt: skip
    """Fetch and convert ``source`` into ``partial``; return what training reads there (the
    data.yaml, or the classification folder)."""
    saved = store.staging_checkpoint(partial)
    if saved.get("source") != source.identity():
        shutil.rmtree(partial, ignore_errors=True)
        saved = {"source": source.identity(), "done": []}
    partial.mkdir(parents=True, exist_ok=True)
    store.write_staging_checkpoint(partial, saved)  # from now on a cut keeps what is fetched
    if source.form == "parquet":
        found = _parquet(source, partial, saved, wanted, progress)
    else:
        fetched = partial / FETCH
        _fetch_all(list(source.shards), fetched, progress, wanted)
        for made in partial.iterdir():  # what a conversion cut midway left
            if made.name not in (FETCH, store.STAGING_CHECKPOINT):
                shutil.rmtree(made) if made.is_dir() else made.unlink()
        found = folders.convert(source.form, fetched, partial, fraction=wanted.val_fraction,
                                forced_box=wanted.bbox_format)  # fmt: skip
    shutil.rmtree(partial / FETCH, ignore_errors=True)
    store.drop_staging_checkpoint(partial)
    return found


def _fetch_all(files: list[hub.RemoteFile], into: Path, progress: Callable[[int], None],
               wanted: Wanted) -> None:  # fmt: skip
    """Fetch ``files``, at least 8 at once (a folder of thousands of small files is not
    fetched one request at a time); the first failure stops the others."""

    def work(remote: hub.RemoteFile, _: threading.Event) -> None:
        hub.fetch(remote, into, wait=wanted.hub_wait)
        progress(remote.size)

    threads.each(files, work, max(wanted.parallel, 8))


def _parquet(source: Source, partial: Path, saved: dict, wanted: Wanted,
             progress: Callable[[int], None]) -> Path:  # fmt: skip
    """Each parquet file in turn: fetch, convert, delete, record. The first file tells the
    columns, the classes and the box layout, kept in the checkpoint for a restart."""
    files = sorted(source.shards, key=lambda f: f.name)
    holdout = "val" not in {split_of(f.name) for f in files}
    writer = _writer(partial, saved) if saved.get("spec") else None
    numbers = {remote.name: number for number, remote in enumerate(files)}
    for remote, path in _prefetched([f for f in files if f.name not in saved["done"]],
                                    partial / FETCH, wanted.hub_wait):  # fmt: skip
        number = numbers[remote.name]
        if writer is None:
            saved |= _decide(path, remote.name, wanted, holdout, source.card)
            writer = _writer(partial, saved)
        split = split_of(remote.name) or "train"
        spec = parquet.Schema(**saved["spec"])
        writer.add_all((split, f"{number:05d}-{row:07d}", data, target)
                       for row, data, target in parquet.rows(path, spec))  # fmt: skip
        path.unlink()
        saved["done"].append(remote.name)
        saved["tally"] = writer.tally.as_dict()
        os.sync()  # what the checkpoint says is converted must be on disk first
        store.write_staging_checkpoint(partial, saved)
        progress(remote.size)
    if writer is None:  # every file was converted before a cut, after its last record
        writer = _writer(partial, saved)
    return writer.finish()


def _prefetched(files: list[hub.RemoteFile], into: Path, wait: float
                ) -> Iterator[tuple[hub.RemoteFile, Path]]:  # fmt: skip
    """Each file fetched, in order, the next one fetched while this one is converted (at most
    two on the disk: a file is taken back once the caller moves past it). The fetching thread
    is a daemon: a stop does not wait for a hung request."""
    ready: queue.Queue = queue.Queue()
    room = threading.Semaphore(2)

    def fetch() -> None:
        for remote in files:
            room.acquire()
            try:
                ready.put((remote, hub.fetch(remote, into, wait=wait)))
            except BaseException as err:
                ready.put(err)
                return

    threading.Thread(target=fetch, daemon=True).start()
    for _ in files:
        item = ready.get()
        if isinstance(item, BaseException):
            raise item
        yield item
        room.release()


def _decide(path: Path, name: str, wanted: Wanted, holdout: bool, card: hub.RemoteFile | None
            ) -> dict:  # fmt: skip
    """From the first file: what its columns mean, the classes, the boxes' layout."""
    spec = named(parquet.schema(path, f"{name} in DATASET_REPO"), name, card, wanted.hub_wait)
    fmt = "xywh"
    if spec.task == "detect":
        decision = boxes.decide(sample(path, spec), wanted.bbox_format)
        fmt = decision.format
        log.info("dataset: %s; boxes read as %s (%s)", spec.describe(), fmt, decision.why)
    else:
        log.info("dataset: %s", spec.describe())
    log.info("dataset: %d classes: %s", len(spec.names), ", ".join(spec.names[:20]))
    if holdout:
        log.info("dataset: no validation split; holding out %.0f%% of train (seeded)",
                 wanted.val_fraction * 100)  # fmt: skip
    return {"spec": asdict(spec), "layout": fmt, "holdout": wanted.val_fraction if holdout else 0}


def named(spec: parquet.Schema, name: str, card: hub.RemoteFile | None, wait: float
          ) -> parquet.Schema:  # fmt: skip
    """``spec`` with its class names: the file's features', else the dataset card's (a parquet
    written by another tool keeps no features); exit 3 when neither names them."""
    if not spec.names and card:
        text = hub.read_remote(card, lambda handle: handle.read().decode("utf-8", "replace"),
                               wait=wait)  # fmt: skip
        spec = replace(spec, names=tuple(parquet.card_names(text, spec.label_key)))
        if spec.names:
            log.info("dataset: class names from the dataset card (README.md)")
    if not spec.names:
        raise TrainboxError(
            f"{name}: column {spec.target!r} has no ClassLabel names in the file's features "
            "nor in the dataset card; publish it with datasets' ClassLabel (push_to_hub keeps "
            "the names)",
            ExitCode.DATASET,
        )
    return spec


def _writer(root: Path, saved: dict) -> layout.Writer:
    spec = saved["spec"]
    tally = layout.Tally.load(saved.get("tally", {}))
    return layout.Writer(root, spec["task"], list(spec["names"]), layout=saved["layout"],
                         holdout=saved["holdout"], tally=tally)  # fmt: skip


def sample(path: Path | IO[bytes], spec: parquet.Schema) -> list[tuple[list[float], int, int]]:
    """Boxes of the first rows with their images' sizes (read from the headers, upright)."""
    found = []
    for row, data, objects in parquet.rows(path, spec):
        if row >= SAMPLE_ROWS:
            break
        size = images.upright_size(data)
        if size:
            found += [(box, *size) for box, _ in objects]
    return found
