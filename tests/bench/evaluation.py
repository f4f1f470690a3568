#!/usr/bin/env python3
"""The evaluation after training against an epoch, on the demo (CPU).

    python tests/bench/evaluation.py [--epochs 3] [--imgsz 128]

Runs a real `trainbox run` of the demo (train 32, val 8, test 8 images), then reads what the
run itself recorded: each epoch's seconds (LibreYOLO's metrics.jsonl), the `evaluating`
phase's seconds in the status's timeline (the whole `trainbox evaluate` process: its start,
loading best.pt, both splits, the plots), and each split's own seconds (evaluation/SPLIT.json).
Prints each, and the evaluation as a multiple of the mean epoch: the baseline is measured in
the same run, on the same machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from entrypoint.settings.launchers import Volume  # noqa: E402
from entrypoint.state import status, store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        env = {**os.environ, "WORKSPACE": folder, "DEVICE": "cpu", "MONITOR": "false",
               "EPOCHS": str(args.epochs), "IMGSZ": str(args.imgsz), "DATA": "",
               "DATASET_REPO": "", "OUTPUT_REPO": "", "TRAINBOX_CONFIG": ""}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "entrypoint", "run"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=3600)  # fmt: skip
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        rows = [json.loads(line) for line in store.libreyolo_metrics(workspace / "runs/run")
                .splitlines() if line.strip()]  # fmt: skip
        epochs = [row["time"] for row in rows]
        timeline = status.read(Volume(workspace))["phases"]
        began = dict(timeline)
        after = timeline[[p for p, _ in timeline].index("evaluating") + 1][1]
        whole = store.moment(after) - store.moment(began["evaluating"])
        splits = {split: store.evaluation(workspace / "runs/run/evaluation", split)["seconds"]
                  for split in ("test", "val")}  # fmt: skip
    mean = statistics.mean(epochs)
    print(f"demo on the CPU, {args.epochs} epochs at imgsz {args.imgsz}")
    print(f"epoch (mean of {len(epochs)}): {mean:.1f} s ({', '.join(f'{e:.1f}' for e in epochs)})")
    for split, seconds in splits.items():
        print(f"evaluation, {split} split alone: {seconds:.1f} s ({seconds / mean:.2f}x an epoch)")
    print(f"evaluation, the whole process (the status's phase, whole seconds): {whole:.0f} s "
          f"({whole / mean:.2f}x an epoch)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
