#!/usr/bin/env python3
"""What uploading every epoch costs: training's wall time, the training step's wait, the bytes.

    python tests/bench/upload.py [IMAGE] [--part epochs|step|bytes|all] [--epochs 6]
        [--rounds 2] [--mb 439] [--epoch-seconds 60]   (DOCKER names the client)

- ``epochs`` (needs Docker): trains the built-in demo on the CPU in IMAGE, alternating runs
  without OUTPUT_REPO (the baseline) and with it (uploads every epoch to the test Hub on
  127.0.0.1), and prints the wall time per epoch of each (libreyolo's total training time over
  the epochs, so the publishing callback counts) and their ratio. Goal: at most 1.05.
- ``step``: what the training step waits at each epoch's end for the publish copy (copy,
  fsync, rename of last.pt and best.pt) with a checkpoint of ``--mb`` MB (default 439 MB,
  LibreYOLO9c's, the largest LibreYOLO 1.6.0 trains; YOLOv9-E's 57.3 M parameters would make
  about 985 MB), against libreyolo's own ``torch.save`` of it, in the same run, and as a share
  of an ``--epoch-seconds`` epoch. Goal: at most 1% of a 60 s epoch.
- ``bytes``: the bytes each epoch's checkpoints send to the test Hub through Xet (hf_xet, the
  image's path) and through LFS (``HF_HUB_DISABLE_XET``, what a mirror without Xet gets), with
  the real checkpoints of a LibreYOLO9t trained ``--epochs`` epochs on the CPU.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.standins.hub import GOOD_TOKEN, Hub

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


def step_wait(megabytes: float, rounds: int, epoch_seconds: float) -> None:
    """What the step waits at each epoch's end: the copy done in the step (the baseline, the
    way trainbox published before) against the copy handed to a thread (``Publisher``)."""
    import torch

    from entrypoint.training.publish import Publisher, publish

    with tempfile.TemporaryDirectory(dir=Path.home()) as scratch:  # the disk, not a tmpfs
        run = Path(scratch) / "run"
        (run / "weights").mkdir(parents=True)
        (run / "status.json").write_text('{"state": "running"}\n')
        publisher, waits = Publisher(), {"in the step": [], "in a thread": [], "copy": []}
        for epoch in range(1, 2 * rounds + 1):
            weights = {"model": torch.randn(int(megabytes * 1e6 / 4))}  # a new checkpoint
            for name in ("last.pt", "best.pt"):  # both change when the epoch is the best
                torch.save(weights, run / "weights" / name)
            started = time.monotonic()
            if epoch % 2:  # alternating, so that the disk's state is shared out
                publish(run, epoch)
                waits["in the step"].append(time.monotonic() - started)
                continue
            publisher.on_train_epoch_end(
                type(
                    "Event",
                    (),
                    {
                        "epoch": epoch,
                        "total_epochs": 2 * rounds,
                        "save_dir": run,
                        "epoch_seconds": 1.0,
                    },
                )
            )
            waits["in a thread"].append(time.monotonic() - started)
            publisher.wait()  # the epoch trains meanwhile; not the step's wait
            waits["copy"].append(time.monotonic() - started)
    step, thread = statistics.median(waits["in the step"]), statistics.median(waits["in a thread"])
    print(f"step wait, {megabytes:g} MB checkpoint (last.pt and best.pt), {rounds} epochs each, "
          "alternating, median")  # fmt: skip
    for name, values in waits.items():
        label = "copy, in the thread" if name == "copy" else f"step wait, copy {name}"
        print(f"{label:<28}{statistics.median(values):>8.3f} s  {[round(x, 3) for x in values]}")
    print(f"ratio {thread / step:.4f}; the step waits {100 * thread / epoch_seconds:.3f}% of a "
          f"{epoch_seconds:g} s epoch (goal: at most 1%; copying in the step: "
          f"{100 * step / epoch_seconds:.1f}%)")  # fmt: skip


def sent_bytes(epochs: int) -> None:
    """Bytes on the wire per epoch's last.pt, through Xet and through LFS."""
    with tempfile.TemporaryDirectory() as scratch, Hub() as hub:
        os.environ.update(HF_TOKEN=GOOD_TOKEN, HF_HOME=f"{scratch}/hf", HF_ENDPOINT=hub.url)
        import huggingface_hub.constants  # reads HF_ENDPOINT at import
        from libreyolo import LibreYOLO9

        from entrypoint.dataset import demo
        from entrypoint.gateways import hub as gateway

        data, _ = demo.ensure(Path(scratch) / "demo")
        LibreYOLO9(None, size="t", device="cpu").train(
            data=str(data), epochs=epochs, batch=4, imgsz=128, device="cpu", workers=0,
            project=scratch, name="run", exist_ok=True, save_period=1,
        )  # fmt: skip
        checkpoints = [Path(scratch) / "run" / "weights" / f"epoch_{n}.pt" for n in
                       range(1, epochs + 1)]  # fmt: skip
        print(
            f"bytes per epoch, LibreYOLO9t's last.pt ({checkpoints[0].stat().st_size / 1e6:.1f}"
            f" MB), {epochs} epochs trained on the CPU, each uploaded after the one before"
        )
        for path_name, disabled in (("Xet", False), ("LFS", True)):
            huggingface_hub.constants.HF_HUB_DISABLE_XET = disabled
            target = gateway.Target("OUTPUT_REPO", f"bench/{path_name}", repo_type="model")
            hub.add(target.repo, {}, kind="models")
            sent = []
            for epoch, checkpoint in enumerate(checkpoints, 1):
                before = len(hub.received)
                gateway.put(target, {"run/last.pt": checkpoint}, f"epoch {epoch}", wait=30)
                sent.append(sum(n for _, n in hub.received[before:]))
            size = checkpoints[0].stat().st_size
            print(f"{path_name:<5}{statistics.mean(sent) / 1e6:>8.2f} MB/epoch  "
                  f"{[round(n / 1e6, 2) for n in sent]}  ({statistics.mean(sent) / size:.2f}x "
                  "the file)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", nargs="?", default="trainbox:test")
    parser.add_argument("--part", choices=("epochs", "step", "bytes", "all"), default="all")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mb", type=float, default=439)
    parser.add_argument("--epoch-seconds", type=float, default=60)
    args = parser.parse_args()
    if args.part in ("step", "all"):
        step_wait(args.mb, max(args.rounds, 3), args.epoch_seconds)
    if args.part in ("bytes", "all"):
        sent_bytes(min(args.epochs, 3))
    if args.part in ("epochs", "all"):
        epochs(args)


def epochs(args: argparse.Namespace) -> None:
    """Training's wall time per epoch in the image, without and with uploads."""
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
