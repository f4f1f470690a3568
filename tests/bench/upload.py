#!/usr/bin/env python3
"""Does uploading every epoch slow training? The demo in the real image, with and without.

    python tests/bench/upload.py [IMAGE] [--epochs 6] [--rounds 2]   (DOCKER names the client)

Trains the built-in demo on the CPU, alternating runs without OUTPUT_REPO (the baseline) and
with it (uploads every epoch to the test Hub on 127.0.0.1), and prints the wall time per epoch
of each (libreyolo's total training time over the epochs, so the publishing callback counts)
and their ratio. Goal: at most 1.05.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.hub import GOOD_TOKEN, Hub

DOCKER = os.environ.get("DOCKER", "docker")


def docker(*args: str) -> str:
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"docker {args[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def seconds_per_epoch(image: str, epochs: int, env: dict[str, str]) -> float:
    volume = f"trainbox-bench-{uuid.uuid4().hex[:8]}"
    run = {"DEVICE": "cpu", "EPOCHS": str(epochs), "RUN_NAME": volume}  # a new run every time
    flags = [f for k, v in {**run, **env}.items()
             for f in ("-e", f"{k}={v}")]  # fmt: skip
    try:
        docker("run", "--rm", "--network", "host", "-v", f"{volume}:/workspace", *flags, image)
        status = docker("run", "--rm", "-v", f"{volume}:/workspace", "--entrypoint", "cat",
                        image, f"/workspace/runs/{volume}/status.json")  # fmt: skip
    finally:
        subprocess.run([DOCKER, "volume", "rm", "-f", volume], capture_output=True)
    return json.loads(status)["total_seconds"] / epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", nargs="?", default="trainbox:test")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    without, with_uploads = [], []
    with Hub() as hub:
        uploads = {"HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
                   "OUTPUT_REPO": "bench/weights", "UPLOAD_INTERVAL": "1"}  # fmt: skip
        for _ in range(args.rounds):
            without.append(seconds_per_epoch(args.image, args.epochs, {}))
            with_uploads.append(seconds_per_epoch(args.image, args.epochs, uploads))
        commits = len(hub.repos["models/bench/weights"].commits)
    base, test = statistics.mean(without), statistics.mean(with_uploads)
    print(f"demo, {args.epochs} epochs on the CPU, {args.rounds} runs each, alternating")
    print(f"{'without uploads':<22}{base:>8.2f} s/epoch  {without}")
    print(f"{'uploading each epoch':<22}{test:>8.2f} s/epoch  {with_uploads}  ({commits} commits)")
    print(f"ratio {test / base:.3f} (goal: at most 1.05)")


if __name__ == "__main__":
    main()
