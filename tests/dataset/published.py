"""Datasets as people publish them, made by the real tools: the ``datasets`` library's
``push_to_hub`` against the test Hub, and plain folders uploaded as files."""

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from tests.standins.hub import GOOD_TOKEN, Hub

NAMES = ["cat", "dog", "bird"]  # a ClassLabel order that is not the sorted one
W, H = 64, 48


def picture(seed: int, size: tuple[int, int] = (W, H), fmt: str = "PNG", **save: object) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, **save)
    return out.getvalue()


def detections(count: int, seed: int) -> list[dict]:
    """Rows of a detection set: images with one to three COCO boxes ([x, y, w, h] pixels)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        boxes, classes = [], []
        for _ in range(1 + i % 3):
            w, h = float(rng.integers(6, 20)), float(rng.integers(6, 16))
            x, y = float(rng.integers(0, W - w)), float(rng.integers(0, H - h))
            boxes.append([x, y, w, h])
            classes.append(int(rng.integers(len(NAMES))))
        rows.append({"image": picture(seed * 1000 + i), "bbox": boxes, "category": classes})
    return rows


def push_detection(hub: Hub, repo: str, splits: dict[str, list[dict]], *, listed: bool = False,
                   shard_size: str | None = None, config: str = "default") -> None:  # fmt: skip
    """``push_to_hub`` of a detection DatasetDict: ``objects`` as a struct of lists (the Hub
    guide's ``{"bbox": [...], "category": [...]}``) or, ``listed``, as a list of structs; as
    the config (subset) ``config``."""
    _push(hub, _detection, repo, splits, listed, shard_size, config)


def _detection(repo: str, splits: dict, listed: bool, shard_size: str | None,
               config: str) -> None:  # fmt: skip
    from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value
    from datasets import Image as ImageFeature

    box = List(Value("float32"), length=4)
    label = ClassLabel(names=NAMES)
    objects = (List({"bbox": box, "category": label}) if listed
               else {"bbox": List(box), "category": List(label)})  # fmt: skip
    features = Features({"image": ImageFeature(), "objects": objects})

    def column(rows: list[dict]) -> dict:
        if listed:
            objs = [[{"bbox": b, "category": c} for b, c in zip(r["bbox"], r["category"],
                     strict=True)] for r in rows]  # fmt: skip
        else:
            objs = [{"bbox": r["bbox"], "category": r["category"]} for r in rows]
        return {"image": [{"bytes": r["image"], "path": None} for r in rows], "objects": objs}

    data = DatasetDict({name: Dataset.from_dict(column(rows), features=features)
                        for name, rows in splits.items()})  # fmt: skip
    data.push_to_hub(repo, max_shard_size=shard_size, config_name=config)


def push_classification(hub: Hub, repo: str, splits: dict[str, list[tuple[bytes, int]]]) -> None:
    """``push_to_hub`` of a classification DatasetDict (``image``, ``label`` ClassLabel)."""
    _push(hub, _classification, repo, splits)


def _classification(repo: str, splits: dict) -> None:
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature

    features = Features({"image": ImageFeature(), "label": ClassLabel(names=NAMES)})
    data = DatasetDict({
        name: Dataset.from_dict({"image": [{"bytes": b, "path": None} for b, _ in rows],
                                 "label": [c for _, c in rows]}, features=features)
        for name, rows in splits.items()
    })  # fmt: skip
    data.push_to_hub(repo)


def _push(hub: Hub, make: Callable[..., None], *args: object) -> None:
    """Run a push as a user's machine would, against the test Hub: ``datasets`` and the Hub
    client read HF_ENDPOINT when imported, so the push runs in a process of its own."""
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=_pushing,
                                                            args=(hub.url, make, args))  # fmt: skip
    process.start()
    process.join(180)
    assert process.exitcode == 0, f"push_to_hub failed ({process.exitcode})"


def _pushing(url: str, make: Callable[..., None], args: tuple) -> None:
    os.environ |= {"HF_ENDPOINT": url, "HF_TOKEN": GOOD_TOKEN, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    make(*args)


def yolo_labels(folder: Path) -> dict[str, list[list[float]]]:
    """Every label file under ``folder``: its lines as numbers."""
    found = {}
    for path in sorted(folder.rglob("*.txt")):
        lines = path.read_text().splitlines()
        found[str(path.relative_to(folder))] = [[float(v) for v in line.split()] for line in lines]
    return found


def centres(rows: list[dict]) -> tuple[int, float]:
    """The published boxes' count and the sum of their normalized centres (cx + cy)."""
    boxes = [b for r in rows for b in r["bbox"]]
    return len(boxes), sum((x + w / 2) / W + (y + h / 2) / H for x, y, w, h in boxes)


def roboflow_yolo(folder: Path, splits: dict[str, list[dict]]) -> Path:
    """A YOLO export as Roboflow writes it: ``SPLIT/images``, ``SPLIT/labels`` and a data.yaml
    whose paths start with ``../`` and whose ``test:`` does not exist."""
    for split, rows in splits.items():
        (folder / split / "images").mkdir(parents=True)
        (folder / split / "labels").mkdir(parents=True)
        for i, row in enumerate(rows):
            (folder / split / "images" / f"im{i:03d}.png").write_bytes(row["image"])
            pairs = zip(row["bbox"], row["category"], strict=True)
            lines = [f"{c} {(x + w / 2) / W:.6f} {(y + h / 2) / H:.6f} {w / W:.6f} {h / H:.6f}"
                     for (x, y, w, h), c in pairs]  # fmt: skip
            (folder / split / "labels" / f"im{i:03d}.txt").write_text("\n".join(lines) + "\n")
    (folder / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\n"
        f"nc: {len(NAMES)}\nnames: {NAMES}\n"
    )
    return folder


def coco_folder(folder: Path, splits: dict[str, list[dict]], ids: list[int]) -> Path:
    """A COCO folder: ``annotations/instances_SPLIT.json`` and ``images/SPLIT/``; category
    ``ids`` (from 1, not contiguous) listed in NAMES' order."""
    (folder / "annotations").mkdir(parents=True)
    categories = [{"id": i, "name": n, "supercategory": "thing"} for i, n in zip(ids, NAMES,
                  strict=True)]  # fmt: skip
    for split, rows in splits.items():
        (folder / "images" / split).mkdir(parents=True)
        document: dict = {"images": [], "annotations": [], "categories": categories}
        for i, row in enumerate(rows):
            (folder / "images" / split / f"{i:06d}.png").write_bytes(row["image"])
            document["images"].append({"id": 100 + i, "file_name": f"{i:06d}.png",
                                       "width": W, "height": H})  # fmt: skip
            for box, c in zip(row["bbox"], row["category"], strict=True):
                document["annotations"].append({
                    "id": len(document["annotations"]) + 1, "image_id": 100 + i,
                    "category_id": ids[c], "bbox": box, "area": box[2] * box[3], "iscrowd": 0,
                })  # fmt: skip
        (folder / "annotations" / f"instances_{split}.json").write_text(json.dumps(document))
    return folder


def upload_folder(hub: Hub, repo: str, folder: Path) -> None:
    """The folder uploaded as files by the Hub client's own ``upload_folder``."""
    _push(hub, _upload, repo, str(folder))


def _upload(repo: str, folder: str) -> None:
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder)
