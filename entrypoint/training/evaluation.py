"""A score on data the run never chose by: ``best.pt`` evaluated after training, with
LibreYOLO's own ``model.val``, on the dataset's test split when it has one, and on the
validation split for the final numbers of ``best.pt`` (which that split chose, so it is
never called a test score).

Each split's result is ``runs/RUN_NAME/evaluation/SPLIT.json`` (``split``, ``images``,
``metrics`` as LibreYOLO returns them, ``checkpoint_sha256``, the dataset, ``seconds``), and
LibreYOLO's plots (confusion matrix, PR curves) are in ``evaluation/SPLIT/plots/``; the
training curves from ``metrics.jsonl`` are drawn into ``evaluation/curves.png``. A split
already evaluated for this ``best.pt`` is not evaluated again. It runs in a process of its own
(``trainbox evaluate``), after the final weights are on the Hub: its failure or its stop is one
line and never changes the run's outcome.
"""

import io
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from entrypoint.files import sha256, write_atomic
from entrypoint.state import store

log = logging.getLogger("trainbox")

FOLDER = "evaluation"
CURVES = "curves.png"
SPLITS = {"auto": ("test", "val"), "val": ("val",), "none": ()}
# The scores the log line, the status, the card and the messages report per task (LibreYOLO's
# own keys), the one they lead with first.
DETECTION = ("metrics/mAP50-95", "metrics/mAP50", "metrics/precision", "metrics/recall")
CLASSIFICATION = ("metrics/accuracy_top1", "metrics/accuracy_top5", "metrics/precision",
                  "metrics/recall")  # fmt: skip
# Either task's, each task's lead first: the first one a result holds is its lead.
HEADLINE = tuple(dict.fromkeys((DETECTION[0], CLASSIFICATION[0], *DETECTION, *CLASSIFICATION)))
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


@dataclass(frozen=True)
class Plan:
    """What one evaluation needs: the run, the data training read, how it trained."""

    run_dir: Path
    data: Path  # the data.yaml, or a classification root
    imgsz: int | tuple[int, int]
    device: str  # "cpu", or LibreYOLO's device for the first GPU
    dataset: dict[str, Any]  # the run's manifest's dataset identity (repo, revision, commit)
    choice: str  # EVALUATE: auto, val or none


def headline(task: str) -> tuple[str, ...]:
    return CLASSIFICATION if task == "classify" else DETECTION


def checkpoint(run_dir: Path) -> Path:
    return run_dir / "weights" / "best.pt"


def _spec(data: Path) -> dict[str, Any]:
    if data.is_dir():
        return {}
    try:
        loaded = yaml.safe_load(data.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _images(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES]


def test_split(data: Path) -> tuple[bool, str]:
    """(whether the dataset has a labelled test split, why not). A YOLO data.yaml's ``test:``
    (a folder whose labels are beside it, or a list file), a classification root's ``test/``
    class folders; a test split without labels (COCO's test-dev) is said, never scored."""
    if data.is_dir():  # classification: ROOT/test/CLASS/*
        test = data / "test"
        if not test.is_dir() or not _images(test):
            return False, "the dataset has no test split"
        return True, ""
    spec = _spec(data)
    entry = spec.get("test")
    if not entry:
        return False, "the dataset has no test split"
    root = Path(spec.get("path") or data.parent)
    root = root if root.is_absolute() else data.parent / root
    for part in entry if isinstance(entry, list) else [entry]:
        place = root / str(part)
        if place.is_file():
            continue  # a list of images: LibreYOLO finds their labels
        found = _images(place) if place.is_dir() else []
        if not found:
            return False, f"the test split ({part}) holds no images"
        labels = Path(str(place).replace("/images", "/labels", 1))
        if labels == place or not any(labels.rglob("*.txt")):
            return False, f"the test split ({part}) has no labels: no test score"
    return True, ""


def splits(data: Path, choice: str) -> list[str]:
    """The splits to evaluate for EVALUATE=``choice``: test only when it is labelled."""
    wanted = list(SPLITS[choice])
    if "test" in wanted:
        has_test, why = test_split(data)
        if not has_test:
            log.info("evaluation: %s", why)
            wanted.remove("test")
    return wanted


def evaluate(plan: Plan) -> dict[str, dict[str, Any]]:
    """Evaluate ``best.pt`` on each split not yet evaluated for it; the results by split.
    Raises what LibreYOLO raises: the caller turns it into one line."""
    best = checkpoint(plan.run_dir)
    if not best.is_file() or plan.choice == "none":
        return store.evaluations(plan.run_dir / FOLDER)
    digest, out = sha256(best), plan.run_dir / FOLDER
    todo = [split for split in splits(plan.data, plan.choice)
            if store.evaluation(out, split).get("checkpoint_sha256") != digest]  # fmt: skip
    if todo:
        from libreyolo import LibreYOLO

        model = LibreYOLO(str(best), device=plan.device)
        for split in todo:
            store.write_evaluation(out, split, _one(model, plan, split, digest))
    draw_curves(plan.run_dir)
    return store.evaluations(plan.run_dir / FOLDER)


def _one(model: Any, plan: Plan, split: str, digest: str) -> dict[str, Any]:
    began = time.monotonic()
    metrics = model.val(data=str(plan.data), split=split, imgsz=plan.imgsz, batch=8, workers=0,
                        plots=True, project=str(plan.run_dir / FOLDER), name=split,
                        exist_ok=True, verbose=False)  # fmt: skip
    seconds = round(time.monotonic() - began, 2)
    values = {key: float(value) for key, value in dict(metrics).items()
              if isinstance(value, int | float) and math.isfinite(value)}  # fmt: skip
    images = int(values.get("speed/images_seen", 0))
    log.info(
        "evaluation: %s split, %d images, %.1fs: %s",
        split,
        images,
        seconds,
        ", ".join(f"{k} {values[k]:.4f}" for k in HEADLINE if k in values),
    )
    return {"split": split, "images": images, "metrics": values, "checkpoint_sha256": digest,
            "dataset": plan.dataset, "seconds": seconds, "at": store.stamp()}  # fmt: skip


def draw_curves(run_dir: Path) -> Path | None:
    """The training curves (losses and the validation metrics per epoch) from LibreYOLO's
    metrics.jsonl, as ``evaluation/curves.png``; None without matplotlib or epochs."""
    rows = []
    for line in store.libreyolo_metrics(run_dir).splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    keys = sorted(
        {
            k
            for row in rows
            for k, v in row.items()
            if isinstance(v, int | float) and ("loss" in k or k.startswith("metrics/"))
        }
    )
    if not rows or not keys:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    figure, axes = pyplot.subplots(1, 2, figsize=(10, 4))
    for key in keys:
        points = [(row.get("epoch", i + 1), row[key]) for i, row in enumerate(rows) if key in row]
        axis = axes[0] if "loss" in key else axes[1]
        axis.plot(*zip(*points, strict=True), marker="o", label=key)
    for axis, title in zip(axes, ("losses", "validation metrics"), strict=True):
        axis.set_title(title)
        axis.set_xlabel("epoch")
        axis.legend(fontsize="small")
    picture = io.BytesIO()
    figure.savefig(picture, format="png", dpi=100, bbox_inches="tight")
    pyplot.close(figure)
    target = run_dir / FOLDER / CURVES
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, picture.getvalue())  # a card may be read from it meanwhile
    return target


def main(plan: Plan) -> int:
    """The ``evaluate`` program: 0 once every split is scored; a failure (out of memory, a
    family without ``val``) is one line and 1, and the run's outcome stays as it was."""
    try:
        evaluate(plan)
    except Exception as err:  # any: LibreYOLO's, in a process of its own
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        log.error(
            "evaluation of %s failed: %s%s; the run's outcome stands",
            checkpoint(plan.run_dir),
            type(err).__name__,
            f": {first}" if first else "",
        )
        return 1
    return 0
