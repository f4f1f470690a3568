#!/usr/bin/env python3
"""Staging a dataset as published (``datasets``' parquet) against the same images packed as a
trainbox tar, from the same test Hub, throttled like the staging bench.

    python tests/bench/published.py [--images 3000] [--rate 100] [--rounds 3]

Makes ``--images`` JPEG images of 640x480 with one to three boxes each, writes them as
parquet with the ``datasets`` library (``Dataset.to_parquet`` in shards of at most 100 MB, the
bytes embedded as ``push_to_hub`` embeds them) and as a YOLO folder packed by ``trainbox
dataset pack``'s own tar writer, serves both from the test Hub at ``--rate`` MB/s per
connection, and times ``trainbox dataset stage`` of each (doctor off: it is the same for both),
``--rounds`` times each, alternating which goes first, the disk synced before each. It prints
the median times, the ratio parquet / tar (goal: at most 1.3x) and each one's peak RSS.
"""

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from entrypoint.dataset.packed import archive
from tests.standins.hub import Hub

W, H = 640, 480
# Run a command; print its peak RSS (KB: the largest of the children waited for, here one).
PEAK = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode;"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def make(folder: Path, count: int) -> tuple[dict[str, bytes], bytes]:
    """The parquet files (name -> bytes) and the tar of the same images and boxes."""
    from datasets import ClassLabel, Dataset, Features, List, Value
    from datasets import Image as ImageFeature

    rng = np.random.default_rng(0)
    yolo = folder / "yolo"
    (yolo / "images" / "train").mkdir(parents=True)
    (yolo / "labels" / "train").mkdir(parents=True)
    rows: dict[str, list] = {"image": [], "objects": []}
    for i in range(count):
        pixels = rng.integers(0, 255, (H // 8, W // 8, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).resize((W, H)).save(out, "JPEG", quality=90)
        data = out.getvalue()
        boxes = [[float(rng.integers(0, W - 50)), float(rng.integers(0, H - 50)), 40.0, 30.0]
                 for _ in range(1 + i % 3)]  # fmt: skip
        classes = [int(rng.integers(2)) for _ in boxes]
        rows["image"].append({"bytes": data, "path": None})
        rows["objects"].append({"bbox": boxes, "category": classes})
        (yolo / "images" / "train" / f"{i:06d}.jpg").write_bytes(data)
        (yolo / "labels" / "train" / f"{i:06d}.txt").write_text("".join(
            f"{c} {(x + w / 2) / W} {(y + h / 2) / H} {w / W} {h / H}\n"
            for (x, y, w, h), c in zip(boxes, classes, strict=True)))  # fmt: skip
    (yolo / "data.yaml").write_text("train: images/train\nval: images/train\nnames: [a, b]\n")
    archive.pack(yolo, folder / "yolo.tar")
    objects = {"bbox": List(List(Value("float32"), length=4)),
               "category": List(ClassLabel(names=["a", "b"]))}  # fmt: skip
    features = Features({"image": ImageFeature(), "objects": objects})
    table = Dataset.from_dict(rows, features=features)
    shards = max(1, -(-sum(len(r["bytes"]) for r in rows["image"]) // 100_000_000))
    files = {}
    for index in range(shards):
        path = folder / f"train-{index:05d}-of-{shards:05d}.parquet"
        table.shard(shards, index, contiguous=True).to_parquet(path)
        files[f"data/{path.name}"] = path.read_bytes()
    return files, (folder / "yolo.tar").read_bytes()


def stage(hub: Hub, repo: str, dest: Path) -> tuple[float, int]:
    """Seconds and peak RSS (MB) of one ``trainbox dataset stage``."""
    env = {**os.environ, "HF_ENDPOINT": hub.url, "DOCTOR": "false", "DATASET_REPO": repo,
           "DATA": "", "TRAINBOX_CONFIG": "", "WORKSPACE": str(dest),
           "HF_HOME": str(dest / "hf")}  # fmt: skip
    os.sync()
    started = time.perf_counter()
    command = [sys.executable, "-c", PEAK, sys.executable, "-m", "entrypoint", "dataset", "stage"]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(result.stderr[-3000:])
    return elapsed, int(result.stdout.split()[-1]) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0, help="MB/s per connection")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainbox-bench-", dir=Path.cwd()) as tmp:
        scratch = Path(tmp)
        files, tar = make(scratch, args.images)
        print(f"data: {args.images} JPEG images, {sum(map(len, files.values())) / 1e6:.1f} MB "
              f"as {len(files)} parquet file(s), {len(tar) / 1e6:.1f} MB as one tar")  # fmt: skip
        runs: dict[str, list[tuple[float, int]]] = {"parquet": [], "tar": []}
        with Hub(rate=args.rate * 1e6) as hub:
            hub.add("bench/pq", files)
            hub.add("bench/yolo", {"yolo.tar": tar})
            for turn in range(args.rounds):
                order = ["parquet", "tar"] if turn % 2 == 0 else ["tar", "parquet"]
                for name in order:
                    dest = scratch / f"ws-{name}"
                    runs[name].append(stage(hub, "bench/pq" if name == "parquet" else
                                            "bench/yolo", dest))  # fmt: skip
                    shutil.rmtree(dest)
        median = {n: statistics.median_high(s for s, _ in r) for n, r in runs.items()}
        for name, found in runs.items():
            print(f"{name:8} {median[name]:6.2f} s (runs: "
                  f"{', '.join(f'{s:.2f}' for s, _ in found)}), peak RSS "
                  f"{max(m for _, m in found)} MB")  # fmt: skip
        print(f"parquet / tar: {median['parquet'] / median['tar']:.2f}x the tar's time "
              f"(goal: at most 1.3x), at {args.rate:g} MB/s per connection")  # fmt: skip


if __name__ == "__main__":
    main()
