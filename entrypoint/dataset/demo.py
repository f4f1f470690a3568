"""The built-in demo dataset: coloured shapes on noise, in YOLO format, the same every time."""

import shutil
import tempfile
from pathlib import Path

import numpy as np
import yaml
from PIL import Image, ImageDraw

CLASSES = ("square", "circle", "triangle")
COLOURS = ((220, 40, 40), (40, 180, 60), (50, 90, 230))
SPLITS = {"train": 32, "val": 8, "test": 8}  # test: the score no epoch was chosen by
SIZE = 128
SEED = 20260731


def _draw(rng: np.random.Generator) -> tuple[Image.Image, list[str]]:
    """One image with one to three shapes, and its YOLO label lines."""
    noise = rng.integers(90, 150, size=(SIZE, SIZE, 3), dtype=np.uint8)
    image = Image.fromarray(noise, "RGB")
    pen = ImageDraw.Draw(image)
    labels = []
    for _ in range(int(rng.integers(1, 4))):
        cls = int(rng.integers(len(CLASSES)))
        side = int(rng.integers(24, 48))
        x0, y0 = (int(v) for v in rng.integers(0, SIZE - side, size=2))
        box = (x0, y0, x0 + side, y0 + side)
        if cls == 0:
            pen.rectangle(box, fill=COLOURS[cls])
        elif cls == 1:
            pen.ellipse(box, fill=COLOURS[cls])
        else:
            pen.polygon(
                [(x0 + side / 2, y0), (x0, y0 + side), (x0 + side, y0 + side)], fill=COLOURS[cls]
            )
        centre_x, centre_y = (x0 + side / 2) / SIZE, (y0 + side / 2) / SIZE
        labels.append(f"{cls} {centre_x:.6f} {centre_y:.6f} {side / SIZE:.6f} {side / SIZE:.6f}")
    return image, labels


def _write(root: Path) -> None:
    rng = np.random.default_rng(SEED)
    for split, count in SPLITS.items():
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for index in range(count):
            image, labels = _draw(rng)
            image.save(root / "images" / split / f"{index:04d}.png")
            (root / "labels" / split / f"{index:04d}.txt").write_text("\n".join(labels) + "\n")


def ensure(folder: Path) -> tuple[Path, bool]:
    """Write the demo into ``folder`` unless it is already there; return (data.yaml, written).

    The dataset is built beside ``folder`` and renamed into place, so a crash halfway
    leaves no half-written demo that a later run would train on.
    """
    data_yaml = folder / "data.yaml"
    if data_yaml.is_file():
        return data_yaml, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        _write(staging)
        spec = {
            "path": str(folder),
            "train": "images/train",
            "val": "images/val",
            "test": "images/test",
            "names": dict(enumerate(CLASSES)),
        }
        (staging / "data.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return data_yaml, True
