#!/usr/bin/env python3
"""Two training processes in one container (NPROC_PER_NODE=2), N times: how many of the
completed runs torchrun failed at the ranks' exit (#41).

    python tests/bench/rank_exit.py [--runs 50] [--arms before,after] [--beat 0]

Each run is the container test's run (tests/container/test_distributed.py): the image
(``TRAINBOX_TEST_IMAGE``, default ``trainbox:test``, as the container tests build it), the
demo on the CPU, one epoch, a new volume. ``--beat`` sets the heartbeat's interval in seconds
(production: 2) in the container's copy of the code: at 0 the heartbeat thread is inside its
store call almost always, which makes the race frequent. The arms:

- ``before``: the code before the fix (``BEFORE``'s distributed.py and program.py, mounted
  over the image's), whose heartbeat thread still beats while the rank's interpreter
  finalizes;
- ``after``: the image's own code, which must be this checkout's (build it first, as the
  container tests do).

Prints, per arm, the runs that did not exit 0 out of N and how many logs hold the C++ abort
("terminate called without an active exception").
"""

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import free_port  # noqa: E402

BEFORE = "a2c167d"  # main before the fix
FILES = ("entrypoint/training/distributed.py", "entrypoint/training/program.py")
IN_IMAGE = Path("/opt/trainbox/src")  # the image's editable install (Dockerfile)
ABORT = "terminate called without an active exception"
DOCKER = os.environ.get("DOCKER", "docker")


def code_of(arm: str, beat: float, folder: Path) -> list[str]:
    """``docker run`` mounts putting the arm's files, heartbeat set to ``beat``, in the image."""
    mounts = []
    for name in FILES if arm == "before" else FILES[:1]:
        if arm == "before":
            shown = subprocess.run(["git", "show", f"{BEFORE}:{name}"], cwd=REPO, check=True,
                                   capture_output=True, text=True)  # fmt: skip
            text = shown.stdout
        else:
            text = (REPO / name).read_text()
        if name.endswith("distributed.py"):
            assert "\nHEARTBEAT_SECONDS = 2\n" in text, f"{arm}: no HEARTBEAT_SECONDS = 2"
            text = text.replace("\nHEARTBEAT_SECONDS = 2\n", f"\nHEARTBEAT_SECONDS = {beat}\n")
        copy = folder / arm / Path(name).name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
        mounts += ["-v", f"{copy}:{IN_IMAGE / name}:ro"]
    return mounts


def one_run(image: str, mounts: list[str]) -> tuple[int, str]:
    volume = f"trainbox-bench-{uuid.uuid4().hex[:8]}"
    env = {"DEVICE": "cpu", "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port()),
           "EPOCHS": "1", "MONITOR": "false", "OMP_NUM_THREADS": "1"}  # fmt: skip
    flags = [f for key, value in env.items() for f in ("-e", f"{key}={value}")]
    try:
        result = subprocess.run(
            [DOCKER, "run", "--rm", "--network", "host", "-v", f"{volume}:/workspace",
             *mounts, *flags, image],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    finally:
        subprocess.run([DOCKER, "volume", "rm", "-f", volume], capture_output=True)
    return result.returncode, result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--arms", default="before,after")
    parser.add_argument("--beat", type=float, default=0.0, help="heartbeat interval, seconds")
    parser.add_argument("--image", default=os.environ.get("TRAINBOX_TEST_IMAGE", "trainbox:test"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainbox-bench-") as tmp:
        for arm in args.arms.split(","):
            mounts = code_of(arm, args.beat, Path(tmp))
            failed = aborted = 0
            for number in range(1, args.runs + 1):
                code, log = one_run(args.image, mounts)
                failed += code != 0
                aborted += ABORT in log
                if code != 0:
                    print(f"  {arm} run {number}: exit {code}", file=sys.stderr, flush=True)
            print(f"{arm} (heartbeat every {args.beat:g} s): {failed}/{args.runs} runs failed, "
                  f"{aborted}/{args.runs} logs show {ABORT!r}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
