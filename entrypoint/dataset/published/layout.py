"""Write a published dataset, image by image, in the form LibreYOLO trains from.

Detection: ``images/SPLIT/NAME.EXT`` with YOLO labels in ``labels/SPLIT/NAME.txt`` (LibreYOLO
finds a label by swapping ``/images/`` for ``/labels/``) and a ``data.yaml`` naming the classes
in the dataset's own order. Classification: ``SPLIT/CLASS/NAME.EXT``. Splits are LibreYOLO's
``train``, ``val`` and ``test``: ``validation``, ``valid`` and ``dev`` are ``val``. A dataset
without a validation split gets one: each train image goes to ``val`` with probability
VAL_FRACTION, decided by a hash of its name and a fixed seed, so a restart or another machine
makes the same split. File names come from the image's place in the dataset, never from a
path stored inside it.
"""

import hashlib
import itertools
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from entrypoint.dataset.published import boxes, images
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import write_atomic

log = logging.getLogger("trainbox")

SPLITS = {"train": "train", "training": "train", "validation": "val", "valid": "val",
          "val": "val", "dev": "val", "test": "test", "testing": "test"}  # fmt: skip
SEED = "trainbox-val-1"
BATCH = 64  # rows whose images are checked at once
# Bad images (that do not decode, or decode past Pillow's pixel limit) are skipped and counted;
# more than this share of the images stops the staging: the dataset is broken, not a few files.
BAD_SHARE = 0.01


def split_of(name: str) -> str | None:
    """LibreYOLO's split for a published split name; None for one it does not train on."""
    return SPLITS.get(name.strip().lower())


def held_out(key: str, fraction: float) -> bool:
    """Whether the train image ``key`` is held out for validation (the same on every run)."""
    digest = hashlib.sha256(f"{SEED}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def safe_name(text: str) -> str:
    """A class name usable as a folder name (classification)."""
    name = re.sub(r"[^\w.+-]+", "_", text).strip("._") or "class"
    return name


@dataclass
class Tally:
    """What was written, per split, and what was left out: the staging's summary and the
    checkpoint's counters."""

    images: Counter = field(default_factory=Counter)
    boxes: Counter = field(default_factory=Counter)
    bad: int = 0
    first_bad: str = ""
    rewritten: int = 0
    clamped: int = 0
    dropped: int = 0

    def as_dict(self) -> dict:
        return {"images": dict(self.images), "boxes": dict(self.boxes), "bad": self.bad,
                "first_bad": self.first_bad, "rewritten": self.rewritten,
                "clamped": self.clamped, "dropped": self.dropped}  # fmt: skip

    @classmethod
    def load(cls, saved: dict) -> "Tally":
        return cls(Counter(saved.get("images", {})), Counter(saved.get("boxes", {})),
                   saved.get("bad", 0), saved.get("first_bad", ""), saved.get("rewritten", 0),
                   saved.get("clamped", 0), saved.get("dropped", 0))  # fmt: skip

    def summary(self) -> str:
        splits = ", ".join(f"{s} {n} images" + (f" {self.boxes[s]} boxes" if self.boxes else "")
                           for s, n in sorted(self.images.items()))  # fmt: skip
        return (f"{splits}; {self.bad} bad image(s) skipped, {self.rewritten} rewritten "
                f"(EXIF rotation, colour mode), {self.clamped} box(es) clamped to the image, "
                f"{self.dropped} empty box(es) dropped")  # fmt: skip


def check_bad(tally: Tally) -> None:
    """Exit 3 when more than ``BAD_SHARE`` of the images were bad; else warn of any."""
    total = sum(tally.images.values()) + tally.bad
    if tally.bad > BAD_SHARE * total:
        raise TrainboxError(
            f"{tally.bad} of {total} images do not decode or are past Pillow's pixel limit "
            f"(more than {BAD_SHARE:.0%}), first: {tally.first_bad}; fix the dataset",
            ExitCode.DATASET,
        )
    if tally.bad:
        log.warning("dataset: %d bad image(s) skipped, first: %s", tally.bad, tally.first_bad)


class Writer:
    """The converted dataset under ``root``: ``task`` is ``detect`` or ``classify``; ``names``
    the classes in the dataset's order; ``layout`` the box layout (detection)."""

    def __init__(self, root: Path, task: str, names: list[str], *, layout: str = "xywh",
                 holdout: float = 0.0, tally: Tally | None = None) -> None:  # fmt: skip
        self.root, self.task, self.names, self.layout = root, task, names, layout
        self.holdout = holdout  # VAL_FRACTION when the dataset has no validation split
        self.tally = tally or Tally()
        self.made: set[Path] = set()
        self.folders = [safe_name(n) for n in names]
        if task == "classify" and len(set(self.folders)) < len(self.folders):
            clash = sorted({f for f in self.folders if self.folders.count(f) > 1})
            raise TrainboxError(
                f"class names {', '.join(clash)} (as folder names) are shared by several "
                "classes: LibreYOLO would merge them; rename the classes",
                ExitCode.DATASET,
            )

    def split(self, split: str, key: str) -> str:
        if split == "train" and self.holdout and held_out(key, self.holdout):
            return "val"
        return split

    def add_all(self, rows: Iterable[tuple[str, str, bytes | None, list | int]]) -> None:
        """Each row ``(split, key, image bytes, objects)``, its image checked in a pool of
        threads (Pillow decodes without the GIL: a second core halves the decoding, which was
        the conversion's largest cost, 1.3 of 3.6 s for 1,000 JPEGs by cProfile, 2026-12-05)
        and written in order, a batch of rows at a time."""
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            rows = iter(rows)
            while batch := list(itertools.islice(rows, BATCH)):
                ready = pool.map(images.attempt, [data for _, _, data, _ in batch])
                for (split, key, _, objects), found in zip(batch, ready, strict=True):
                    self.add(split, key, found, objects)

    def add(self, split: str, key: str, ready: "images.Ready | str", objects: list | int) -> None:
        """One image, checked (or why it is bad): ``objects`` is its ``(box, class id)`` list
        (detection) or its class id (classification). ``key`` names it within the dataset."""
        if isinstance(ready, str):
            self.tally.bad += 1
            self.tally.first_bad = self.tally.first_bad or f"{key}: {ready}"
            return
        self.tally.rewritten += bool(ready.rewritten)
        split = self.split(split, key)
        self.tally.images[split] += 1
        if self.task == "classify":
            self._write(self.root / split / self.folders[self._class(objects, key)],
                        f"{key}{ready.suffix}", ready.data)  # fmt: skip
            return
        lines = []
        for box, cls in objects:
            self._class(cls, key)
            found = boxes.yolo(box, self.layout, ready.width, ready.height)
            if found is None:
                self.tally.dropped += 1
                continue
            coords, clamped = found
            self.tally.clamped += clamped
            lines.append(f"{int(cls)} " + " ".join(f"{v:.6f}" for v in coords))
        self.tally.boxes[split] += len(lines)
        self._write(self.root / "images" / split, f"{key}{ready.suffix}", ready.data)
        self._write(self.root / "labels" / split, f"{key}.txt", "".join(f"{x}\n" for x in lines))

    def _class(self, cls: object, key: str) -> int:
        if not isinstance(cls, int) or isinstance(cls, bool) or not 0 <= cls < len(self.names):
            raise TrainboxError(
                f"{key}: class id {cls!r} is not one of the dataset's {len(self.names)} "
                f"classes (0..{len(self.names) - 1}); fix the labels or the class names",
                ExitCode.DATASET,
            )
        return cls

    def _write(self, folder: Path, name: str, data: str | bytes) -> None:
        if folder not in self.made:
            folder.mkdir(parents=True, exist_ok=True)
            self.made.add(folder)
        (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)

    def check(self) -> None:
        """Exit 3 when too many images were bad, or nothing was written."""
        check_bad(self.tally)
        if not self.tally.images.get("train"):
            raise TrainboxError("the dataset has no train images: nothing to train on",
                                ExitCode.DATASET)  # fmt: skip
        if self.task == "classify":
            self._check_classes()

    def _check_classes(self) -> None:
        """LibreYOLO's class folders: every class in train and in val, or its validation fails
        at every epoch and no best.pt is written (LibreYOLO 1.6.0, ``_run_classify_validation``)."""
        for split in ("train", "val"):
            empty = [name for name in self.folders if not any((self.root / split / name).glob("*"))]
            if empty:
                raise TrainboxError(
                    f"the dataset has no {split} images of class {', '.join(empty[:5])}: "
                    "LibreYOLO needs every class in train and in val; publish a validation "
                    "split that has them, or raise VAL_FRACTION",
                    ExitCode.DATASET,
                )

    def finish(self) -> Path:
        """Check, write the data.yaml (detection), and return what training reads."""
        self.check()
        log.info("dataset converted: %s", self.tally.summary())
        if self.task == "classify":
            if self.folders != sorted(self.folders):  # LibreYOLO's get_class_names sorts
                log.info("dataset: the model numbers the classes in sorted order (LibreYOLO "
                         "sorts the class folders): %s", ", ".join(
                             f"{i}={n}" for i, n in enumerate(sorted(self.folders))))  # fmt: skip
            return self.root
        spec = {"path": str(self.root), "train": "images/train", "val": "images/val"}
        if not self.tally.images.get("val"):
            spec["val"] = "images/train"
            log.warning("dataset: no validation images; validating on the train split")
        if self.tally.images.get("test"):
            spec["test"] = "images/test"
        spec |= {"nc": len(self.names), "names": list(self.names)}
        write_atomic(self.root / "data.yaml", yaml.safe_dump(spec, sort_keys=False))
        return self.root / "data.yaml"
