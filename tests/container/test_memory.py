"""The run fits the slice it was given, in real containers under Docker's own limits: the kernel's
OOM killer at `--memory`, a CPU quota at `--cpus`.

The processes that grow are real (tests/container/faults/memory_hog.py: a trainer or a
dataloader worker writing 32 MB at a time), and so is the kill: the kernel's, at the cgroup's
limit; trainbox is told nothing of it.
"""

import json

import pytest

from entrypoint.errors import ExitCode
from tests.conftest import REPO
from tests.container.conftest import TRAIN, env_for, hub_epochs, in_volume, run_container
from tests.standins.hub import Hub

pytestmark = pytest.mark.container

FAULTS = REPO / "tests" / "container" / "faults"
# No swap: the limit is the limit. 3 GB: a worker's growth passes the trainer's size before
# the kernel must choose (a worker's RSS starts without the trainer's file pages: at 2 GB the
# kernel chose the trainer 1 run in 2).
LIMIT = ("--memory", "3g", "--memory-swap", "3g")
HOG = (*LIMIT, "-v", f"{FAULTS}:/faults:ro", "-v",
       f"{FAULTS / 'memory_hog.pth'}:/opt/trainbox/venv/lib/python3.11/site-packages/"
       "memory_hog.pth:ro")  # fmt: skip
LIMIT_SAID = "at the container's memory limit of 3.22 GB, peak "


def last_line(result) -> str:
    return (result.stdout + result.stderr).strip().splitlines()[-1]


def status(image: str, volume: str) -> dict:
    return json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))


def test_a_trainer_killed_for_memory_is_named_and_every_finished_epoch_is_on_the_hub(
    image: str, volume: str, hub: Hub
) -> None:
    env = env_for(hub, EPOCHS="4", TRAINBOX_TEST_HOG="training")
    result = run_container(image, volume, env=env, options=HOG)
    out = result.stdout + result.stderr
    assert result.returncode == ExitCode.OUT_OF_MEMORY, out[-4000:]
    line = last_line(result)
    assert line.startswith("[trainbox] exit 13: out of memory: the kernel killed the trainer "
                           + LIMIT_SAID), line  # fmt: skip
    assert "a smaller BATCH or IMGSZ, or use a machine with more memory" in line
    state = status(image, volume)
    assert (state["phase"], state["exit_code"]) == ("failed", 13)
    assert state["reason"].startswith("out of memory: the kernel killed the trainer")
    assert state["memory"]["limit_bytes"] == 3 << 30
    assert 0 < state["memory"]["peak_bytes"] <= 3 << 30 and state["memory"]["oom_kills"] >= 1
    # The job and supervisord lived (the uploader too, or supervisord started it again): the
    # last finished epoch went up first.
    finished = [json.loads(line)["epoch"] for line in in_volume(
        image, volume, "cat", "/workspace/runs/run/metrics.jsonl").splitlines()]  # fmt: skip
    assert finished and hub_epochs(hub)[-1] == max(finished), (finished, hub_epochs(hub))


def test_a_limit_too_low_to_start_is_said_at_once_and_a_trainer_killed_as_it_starts_too(
    image: str, volume: str
) -> None:
    """600 MB: the job itself could not live beside a trainer (it was killed: exit 137 and not
    a line); it says so before it loads anything large."""
    env = {**TRAIN, "EPOCHS": "1", "MONITOR": "false"}
    low = run_container(image, volume, env=env, options=("--memory", "600m",
                                                          "--memory-swap", "600m"))  # fmt: skip
    assert low.returncode == ExitCode.OUT_OF_MEMORY, (low.stdout + low.stderr)[-3000:]
    assert last_line(low) == (
        "[trainbox] error: the container's memory limit of 0.63 GB is under the 1.07 GB "
        "trainbox needs beside training: give it more memory (docker run --memory, compose's "
        "mem_limit) or rent a machine with more"
    )
    env["TRAINBOX_TEST_HOG"] = "start"
    result = run_container(image, volume, env=env, options=HOG)
    assert result.returncode == ExitCode.OUT_OF_MEMORY, (result.stdout + result.stderr)[-3000:]
    assert "out of memory: the kernel killed the trainer " + LIMIT_SAID in last_line(result)


def test_workers_killed_for_memory_resume_with_half_and_a_quota_of_one_cpu_counts(
    image: str, volume: str, hub: Hub
) -> None:
    """`--cpus 1` with WORKERS=4: the preflight lowers them to 1; that worker grows until the
    kernel kills it; training resumes with 0 (the loader in the trainer) and completes."""
    env = env_for(hub, EPOCHS="1", WORKERS="4", TRAINBOX_TEST_HOG="workers")
    # 5 GB: beside the job (0.86 GB with LibreYOLO's classes) and the uploader, a worker must
    # outgrow the trainer's file pages before the kernel chooses (at 3 GB it chose the trainer
    # 1 run in 2 once the uploader ran too).
    grown = (*HOG, "--memory", "5g", "--memory-swap", "5g")  # the later flags win
    result = run_container(image, volume, env=env,
                           options=(*grown, "--cpus", "1", "--shm-size", "1g"))  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "note: WORKERS=4 lowered to 1: the container may use 1 CPU" in out
    assert "CPUs 1 (CPU quota, cpu.cfs_quota_us: 1)" in out
    assert "out of memory: the kernel killed a dataloader worker (the container's memory " in out
    assert "with WORKERS 1 -> 0 (mend 1 of 2)" in out
    verdict = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/preflight.json"))
    assert (verdict["cpus"], verdict["workers"]) == (1, 1)
    assert verdict["memory_limit_bytes"] == 5 << 30
    state = status(image, volume)
    assert state["phase"] == "completed"
    assert [m["workers"] for m in state["mended"]] == [[1, 0]]
    # the resumed training was a training phase again (the mend's flush said uploading)
    phases = [name for name, _ in state["phases"]]
    assert phases[-5:] == ["training", "uploading", "training", "uploading", "completed"], phases
    # No NVML on this machine (the real nvidia-ml-py: NVMLError_LibraryNotFound): no GPU figure.
    assert "gpu_use" not in state and "gpu_energy" not in state
    config = in_volume(image, volume, "cat", "/workspace/runs/run/train_config.yaml")
    assert "workers: 0" in config.splitlines()  # the resumed run's
