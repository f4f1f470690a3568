#!/usr/bin/env python3
"""Staging a Hub dataset: trainbox against `curl | tar -x` and download-then-extract.

    python tests/bench/stage.py [--gb 1.0] [--rate 150]

Serves a tar of 512 KB files from the test Hub, once throttled to ``--rate`` MB/s (a network
as on a rented machine) and once unthrottled, and times, on the same file in the same run:
``curl -s URL | tar -x`` (the baseline), huggingface_hub's download then tarfile's extract
(what users do today), and ``trainbox dataset stage`` (also with a resume checkpoint every
second, the worst case of what resumability costs). It prints each one's speed as a
ratio to the baseline (1.0 = as fast; goal: at least 0.9 when throttled) and the peak extra
disk each used, against the size of the extracted data.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from entrypoint import archive
from tests.hub import Hub

FILE_SIZE = 512 * 1024
REPO = "bench/data"


def make_tar(folder: Path, size: int) -> Path:
    source = folder / "data"
    (source / "images").mkdir(parents=True)
    (source / "data.yaml").write_text("names: {0: a}\n")
    for index in range(max(1, size // FILE_SIZE)):
        (source / "images" / f"{index:06d}.bin").write_bytes(os.urandom(FILE_SIZE))
    archive.pack(source, folder / "data.tar")
    shutil.rmtree(source)
    return folder / "data.tar"


def measure(work: Callable[[Path], None], scratch: Path) -> tuple[float, int]:
    """Seconds for ``work(dest)`` and the peak extra bytes on the disk meanwhile."""
    dest = scratch / "dest"
    dest.mkdir()
    base = shutil.disk_usage(scratch).used
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], shutil.disk_usage(scratch).used - base)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    try:
        work(dest)
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
    peak[0] = max(peak[0], shutil.disk_usage(scratch).used - base)
    shutil.rmtree(dest)
    return elapsed, peak[0]


def run_all(tar: Path, rate: float | None, scratch: Path) -> dict[str, tuple[float, int]]:
    with Hub(rate=rate) as hub:
        hub.add(REPO, {"data.tar": tar.read_bytes()})
        url = f"{hub.url}/datasets/{REPO}/resolve/main/data.tar"
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "DOCTOR": "false",
               "DATASET_REPO": REPO, "DATASET_FILE": "data.tar", "DATA": "", "TRAINBOX_CONFIG": "",
               "HF_HOME": str(scratch / "hf")}  # fmt: skip

        def curl_tar(dest: Path) -> None:
            subprocess.run(f"curl -s {url} | tar -x -C {dest}", shell=True, check=True)

        def download_then_extract(dest: Path) -> None:
            code = (
                "import sys, tarfile; from huggingface_hub import hf_hub_download;"
                "p = hf_hub_download(sys.argv[1], 'data.tar', repo_type='dataset',"
                " cache_dir=sys.argv[2]);"
                "tarfile.open(p).extractall(sys.argv[2], filter='data')"
            )
            subprocess.run([sys.executable, "-c", code, REPO, str(dest)], env=env, check=True)

        def trainbox(dest: Path, checkpoint: str = "30") -> None:
            subprocess.run(
                [sys.executable, "-m", "entrypoint", "dataset", "stage"],
                env={**env, "WORKSPACE": str(dest), "STAGE_CHECKPOINT": checkpoint},
                check=True,
                capture_output=True,
            )

        results = {"curl | tar -x": measure(curl_tar, scratch)}
        results["download, then extract"] = measure(download_then_extract, scratch)
        results["trainbox stage"] = measure(trainbox, scratch)
        # The cost of resumability at its worst: a checkpoint (sync + hash state) every second.
        results["trainbox, checkpoint 1 s"] = measure(lambda d: trainbox(d, "1"), scratch)

        def restage(dest: Path) -> None:
            trainbox(dest)
            started = time.perf_counter()
            trainbox(dest)
            results["trainbox restart (staged)"] = (time.perf_counter() - started, 0)

        measure(restage, scratch)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="tar size in GB")
    parser.add_argument("--rate", type=float, default=150.0, help="throttled rate in MB/s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainbox-bench-", dir=Path.cwd()) as tmp:
        scratch = Path(tmp)
        tar = make_tar(scratch, int(args.gb * 1e9))
        size = tar.stat().st_size
        print(f"tar: {size / 1e9:.2f} GB in {size // FILE_SIZE} files of 512 KB")
        for label, rate in (
            (f"throttled to {args.rate:.0f} MB/s", args.rate * 1e6),
            ("unthrottled", None),
        ):
            results = run_all(tar, rate, scratch)
            baseline = results["curl | tar -x"][0]
            print(f"\n{label}")
            print(f"{'method':<28}{'seconds':>9}{'speed vs curl|tar':>19}{'peak disk / data':>18}")
            for method, (seconds, peak) in results.items():
                disk = f"{peak / size:>18.2f}" if peak else f"{'-':>18}"
                print(f"{method:<28}{seconds:>9.2f}{baseline / seconds:>19.2f}{disk}")


if __name__ == "__main__":
    main()
