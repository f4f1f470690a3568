"""Preflight in the real container, on this GPU-less machine."""

import json

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import TESTED_CUDA, in_volume, run_container
from tests.standins.hub import Hub

pytestmark = pytest.mark.container


def error_line(result) -> str:
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    return line


def test_auto_without_a_gpu_stops_before_the_dataset_is_touched(
    image: str, volume: str, hub: Hub
) -> None:
    hub.add("org/shapes", {"shapes.tar": b"never requested"})
    env = {"DEVICE": "auto", "DATASET_REPO": "org/shapes", "HF_ENDPOINT": hub.url}
    result = run_container(image, volume, env=env)
    assert result.returncode == ExitCode.PREFLIGHT, result.stderr[-3000:]
    assert error_line(result) == (
        "[trainbox] error: no GPU visible: run with --gpus all (compose: the GPU request in "
        "compose.yaml), or set DEVICE=cpu to train on the CPU"
    )
    assert hub.requests == []
    verdict = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/preflight.json"))
    assert verdict["ok"] is False and verdict["exit_code"] == ExitCode.PREFLIGHT
    state = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))
    assert (state["phase"], state["exit_code"]) == ("failed", ExitCode.PREFLIGHT)
    assert state["reason"].startswith("no GPU visible")


def test_check_on_the_cpu_reports_and_passes(image: str, volume: str) -> None:
    result = run_container(image, volume, "check", "--json", env={"DEVICE": "cpu"})
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads(result.stdout)
    assert verdict["ok"] and verdict["gpus"] == [] and verdict["torch_cuda"] == TESTED_CUDA
    assert verdict["notes"][0] == "DEVICE=cpu: GPU checks skipped, training runs on the CPU"
    assert verdict["cpus"] >= 1 and verdict["workspace_free_bytes"] > 0
    assert isinstance(verdict["seconds"], float) and verdict["seconds"] >= 0  # recorded
    assert (
        json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/preflight.json")) == verdict
    )


def test_small_shm_with_workers_stops_when_told_to(image: str, volume: str) -> None:
    env = {"DEVICE": "cpu", "WORKERS": "2", "SHM_POLICY": "stop"}
    result = run_container(image, volume, env=env, options=("--shm-size", "64m"))
    assert result.returncode == ExitCode.PREFLIGHT
    assert error_line(result) == (
        "[trainbox] error: /dev/shm is 64 MB, too small for WORKERS=2 dataloader workers: run "
        "with --shm-size 16g (compose: shm_size) or --ipc host, or set WORKERS=0"
    )


def test_small_shm_with_workers_lowers_them_and_trains(image: str, volume: str) -> None:
    env = {"DEVICE": "cpu", "WORKERS": "2", "EPOCHS": "1"}
    result = run_container(image, volume, env=env, options=("--shm-size", "64m"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "WORKERS lowered from 2 to 0 (SHM_POLICY=lower)" in result.stderr
    config = in_volume(image, volume, "cat", "/workspace/runs/run/train_config.yaml")
    assert "workers: 0" in config.splitlines()
