"""Which form a dataset repo is published in, decided from its file list alone.

- ``trainbox``: ``NAME.tar`` or ``NAME.shards.json``, as ``trainbox dataset pack`` writes.
- ``parquet``: ``*.parquet`` files, as the ``datasets`` library's ``push_to_hub`` writes (and the
  Hub's ``refs/convert/parquet`` branch holds).
- ``yolo``: a ``data.yaml`` beside ``labels/`` folders of ``.txt`` files.
- ``coco``: COCO JSON files (``annotations/instances_*.json``, or Roboflow's
  ``_annotations.coco.json`` per split) beside images.
- ``imagefolder``: images in ``SPLIT/CLASS/`` folders, nothing else describing them.
- ``archive``: one ``.zip`` (a Roboflow export, most often) or tar of a YOLO, COCO or
  ImageFolder dataset.

A repo that fits none, or several, stops with what was found and DATASET_FORMAT to set.
"""

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from entrypoint.dataset.packed.shards import defaults
from entrypoint.errors import ExitCode, TrainboxError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
COCO_JSON = re.compile(r"(^|/)(instances_[^/]*|_annotations\.coco|[^/]*coco[^/]*)\.json$", re.I)
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")
SPLIT_FOLDERS = {"train", "training", "val", "valid", "validation", "dev", "test", "testing"}


def is_image(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in IMAGE_SUFFIXES


def _imagefolder(names: list[str]) -> bool:
    """Images under SPLIT/CLASS/ (at any depth below the repo's top)."""
    parts = [PurePosixPath(n).parts for n in names if is_image(n)]
    return bool(parts) and all(
        len(p) >= 3 and p[-3].lower() in SPLIT_FOLDERS for p in parts
    )  # fmt: skip


def found(repo: str, names: Iterable[str]) -> dict[str, list[str]]:
    """Every form the files fit, each with the files that show it."""
    names = sorted(n for n in names if not n.startswith(".") and "/." not in n)
    forms: dict[str, list[str]] = {}
    if own := [n for n in names if n in defaults(repo)]:
        forms["trainbox"] = own
    if parquet := [n for n in names if n.endswith(".parquet")]:
        forms["parquet"] = parquet
    labels = [n for n in names if n.endswith(".txt") and "labels/" in f"/{n}"]
    yamls = [n for n in names if PurePosixPath(n).name in ("data.yaml", "data.yml")]
    if labels and yamls:
        forms["yolo"] = yamls
    coco = [n for n in names if COCO_JSON.search(n)]
    if coco and any(is_image(n) for n in names):
        forms["coco"] = coco
    if "yolo" not in forms and "coco" not in forms and _imagefolder(names):
        forms["imagefolder"] = sorted({str(PurePosixPath(n).parent.parent) for n in names
                                       if is_image(n)})  # fmt: skip
    packed = [n for n in names if n.lower().endswith(ARCHIVES) and n not in own]
    if len(packed) == 1:
        forms["archive"] = packed
    return forms


def decide(repo: str, revision: str, names: list[str], forced: str) -> tuple[str, list[str]]:
    """The form to stage (DATASET_FORMAT when set) and the files that show it."""
    forms = found(repo, names)
    if forced != "auto":
        if forced not in forms:
            raise TrainboxError(
                f"DATASET_FORMAT={forced}: {repo} at {revision} does not look like it "
                f"({_seen(forms, names)}); set DATASET_FORMAT=auto, or publish the dataset in "
                "that form",
                ExitCode.DATASET,
            )
        return forced, forms[forced]
    if "trainbox" in forms:  # the pack's own files win: they were put there for this
        return "trainbox", forms["trainbox"]
    if len(forms) == 1:
        return next(iter(forms.items()))
    if not forms:
        raise TrainboxError(
            f"DATASET_REPO={repo}: no dataset form found at {revision} ({_seen(forms, names)}); "
            "publish it as parquet (datasets' push_to_hub), a YOLO or COCO folder, or with "
            "`trainbox dataset pack` (or set DATASET_FILE to a tar it wrote); docs/datasets.md "
            "lists the forms",
            ExitCode.DATASET,
        )
    raise TrainboxError(
        f"DATASET_REPO={repo} fits several forms at {revision} ({_seen(forms, names)}); set "
        f"DATASET_FORMAT to one of {', '.join(forms)}",
        ExitCode.DATASET,
    )


def _seen(forms: dict[str, list[str]], names: list[str]) -> str:
    if forms:
        return "; ".join(f"{form}: {few(files)}" for form, files in forms.items())
    return f"{len(names)} file(s): {few(names)}" if names else "no files"


def few(files: list[str]) -> str:
    return ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
