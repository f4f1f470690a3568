#!/usr/bin/env python3
"""`trainbox status` while training runs: how long it takes to answer.

    python tests/bench/status.py [--runs 21] [--epochs 30]

Starts a real `trainbox run` of the demo on the CPU (it keeps both cores busy, as training
does on a rented machine), waits for the first epoch, then times `trainbox status`,
`trainbox status --json` and `trainbox status --health` ``--runs`` times each, against a bare
`python3 -c pass` measured in the same run. Prints each median in seconds and as a multiple
of the bare interpreter start. Goal: under 0.5 s.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from entrypoint.settings.launchers import Volume  # noqa: E402
from entrypoint.state import status  # noqa: E402


def median_seconds(command: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=REPO, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainbox-bench-") as tmp:
        workspace = Path(tmp)
        env = {**os.environ, "WORKSPACE": str(workspace), "DEVICE": "cpu", "MONITOR": "false",
               "EPOCHS": str(args.epochs), "DATA": "", "DATASET_REPO": "", "OUTPUT_REPO": "",
               "TRAINBOX_CONFIG": ""}  # fmt: skip
        training = subprocess.Popen(
            [sys.executable, "-m", "entrypoint", "run"], env=env, cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while status.read(Volume(workspace)).get("training", {}).get("completed_epochs", 0) < 1:
                if time.monotonic() > deadline or training.poll() is not None:
                    sys.exit("training did not reach its first epoch")
                time.sleep(0.5)
            bare = median_seconds([sys.executable, "-c", "pass"], args.runs, env)
            rows = {"python3 -c pass (baseline)": bare}
            for extra in ([], ["--json"], ["--health"]):
                command = [sys.executable, "-m", "entrypoint", "status", *extra]
                rows[" ".join(["trainbox status", *extra])] = median_seconds(
                    command, args.runs, env
                )
            still = status.read(Volume(workspace))["phase"]
        finally:
            training.send_signal(signal.SIGTERM)
            training.wait(timeout=120)
    print(f"while training ({still}), median of {args.runs} runs each:")
    print(f"{'command':<32}{'seconds':>9}{'x baseline':>12}{'goal < 0.5 s':>14}")
    for name, seconds in rows.items():
        verdict = "" if "baseline" in name else ("met" if seconds < 0.5 else "MISSED")
        print(f"{name:<32}{seconds:>9.3f}{seconds / bare:>12.2f}{verdict:>14}")


if __name__ == "__main__":
    main()
