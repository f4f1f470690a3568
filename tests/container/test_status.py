"""Watching a run from outside, in real containers: the status file through `trainbox status`,
Docker's health, the libreyolo monitor dashboard, and the watchdogs."""

import hashlib
import json
import time
import urllib.request
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from tests.conftest import free_port
from tests.container.conftest import (
    TRAIN,
    Container,
    hub_env,
    in_volume,
    run_container,
    shapes_on_the_hub,
)
from tests.standins.hub import Fault, Hub

pytestmark = pytest.mark.container


def test_one_run_walks_every_phase(image: str, volume: str, hub: Hub, tmp_path: Path) -> None:
    data = shapes_on_the_hub(hub, tmp_path)
    hub.rate = len(data) / 3  # about 3 s of staging
    # A slow uplink: a 35 MB checkpoint takes 7 s, so uploads lag behind the 3 s epochs and the
    # final upload has the last epoch to push, long enough to be seen.
    hub.upload_rate = 5e6
    port = free_port()
    env = {**TRAIN, **hub_env(hub), "DATASET_REPO": "org/shapes", "OUTPUT_REPO": "org/weights",
           "EPOCHS": "4", "MONITOR_PORT": str(port), "EVALUATE": "auto"}  # fmt: skip
    box = Container(image, volume, env)
    snapshots, healths, screen, runs = [], [], "", None
    try:
        while (state := box.inspect())[0] and time.monotonic() - box.started < 600:
            healths.append((state[1], snapshots[-1]["phase"] if snapshots else None))
            answer = box.status("--json")
            if answer.returncode == 0:
                snapshots.append(json.loads(answer.stdout))
                training = snapshots[-1].get("training", {})
                if training.get("completed_epochs", 0) >= 1 and not screen:
                    screen = box.status().stdout
                if screen and runs is None:  # the dashboard may still be starting (torch import)
                    url = f"http://127.0.0.1:{port}/api/runs"
                    try:
                        with urllib.request.urlopen(url, timeout=10) as response:
                            runs = (response.status, json.loads(response.read()))
                    except OSError:
                        pass
            time.sleep(0.2)
        running, _, code = box.inspect()
        log = box.logs()
    finally:
        box.remove()
    assert not running and code == 0, log[-4000:]
    phases = [s["phase"] for s in snapshots]
    walked = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    # Brief phases, in the timeline below: resuming, and preflight with DEVICE=cpu, which no
    # longer imports torch (under a second, shorter than the polling's docker exec).
    live = [p for p in walked if p not in ("preflight", "resuming")]
    assert live[:2] == ["staging", "training"], walked  # seen live
    staging = next(s["staging"] for s in snapshots if "staging" in s)
    assert staging["total"] == len(data) and 0 < staging["bytes"] <= len(data)
    assert any("CPU; torch" in s.get("gpu", "") for s in snapshots)
    epochs = [s["training"].get("completed_epochs") for s in snapshots if s.get("training")]
    assert epochs == sorted(e for e in epochs if e is not None) and max(epochs) >= 3
    uploaded = [s["upload"].get("epoch") for s in snapshots if s.get("upload")]
    assert uploaded and max(uploaded) >= 1  # while training went on
    assert "epoch    1/4" in screen or "epoch    2/4" in screen, screen
    assert "health   healthy" in screen
    assert runs and runs[0] == 200 and "run" in json.dumps(runs[1])
    assert healths[0][0] == "starting"
    assert ("healthy", "training") in healths
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (final["phase"], final["exit_code"]) == ("completed", 0)
    timeline = [phase for phase, _ in final["phases"]]
    assert timeline == ["preflight", "resuming", "staging", "training", "uploading", "evaluating",
                        "completed"]  # fmt: skip
    assert final["evaluation"]["test"]["images"] == 8  # the shapes' test split, best.pt's score
    assert final["card"] == f"{hub.url}/org/weights"
    assert [at for _, at in final["phases"]] == sorted(at for _, at in final["phases"])
    assert set(walked) <= set(timeline) and walked == [p for p in timeline if p in walked]
    assert (final["upload"]["epoch"], final["upload"]["pending"]) == (4, 0)
    assert final["training"]["total_epochs"] == 4


def test_a_failed_run_reads_failed_and_unhealthy(image: str, volume: str) -> None:
    result = run_container(image, volume, env={"DEVICE": "cpu", "DATA": "/workspace/no.yaml"})
    assert result.returncode == ExitCode.DATASET, result.stderr
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (final["phase"], final["exit_code"]) == ("failed", ExitCode.DATASET)
    assert "DATA=/workspace/no.yaml" in final["reason"]
    health = run_container(image, volume, "status", "--health")
    assert health.returncode == 1 and health.stdout.startswith("unhealthy: failed: DATA=")
    screen = in_volume(image, volume, "trainbox", "status")
    assert "run      run: failed" in screen and "exit     3: DATA=" in screen


def test_a_stalled_download_turns_unhealthy_then_ends_the_run(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    data = shapes_on_the_hub(hub, tmp_path)
    hub.faults.append(Fault("shapes.tar", stall_after=len(data) // 2, times=99, methods=("GET",)))
    env = {**TRAIN, **hub_env(hub), "DATASET_REPO": "org/shapes", "STALL_TIMEOUT": "10"}
    box = Container(image, volume, env)
    healths = []
    try:
        while (state := box.inspect())[0] and time.monotonic() - box.started < 120:
            healths.append(state[1])
            time.sleep(0.3)
        _, _, code = box.inspect()
        log = box.logs()
    finally:
        box.remove()
    assert code == ExitCode.STALLED, log[-3000:]
    assert "unhealthy" in healths and healths.index("unhealthy") > healths.index("healthy")
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (final["phase"], final["exit_code"]) == ("failed", ExitCode.STALLED)
    assert "no progress for" in final["reason"] and "during staging" in final["reason"]
    assert in_volume(image, volume, "ls", "-A", "/workspace/data").split() == []


def test_max_runtime_stops_training_after_a_final_upload(image: str, volume: str, hub: Hub) -> None:
    env = {"DEVICE": "cpu", "MONITOR": "false", **hub_env(hub), "OUTPUT_REPO": "org/weights",
           "EPOCHS": "500", "MAX_RUNTIME": "25", "STOP_GRACE": "30"}  # fmt: skip
    result = run_container(image, volume, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == ExitCode.TIME_LIMIT, log[-4000:]  # 500 epochs: cut by it
    assert "final upload done" in log
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (final["phase"], final["exit_code"]) == ("interrupted", ExitCode.TIME_LIMIT)
    assert "MAX_RUNTIME=25 s" in final["reason"]
    # The final upload sent what was published when the limit struck, however many epochs a
    # loaded machine finished by then (none is possible: the limit counts from the start).
    index_file = "/workspace/trainbox/published/run/index.json"
    index = json.loads(in_volume(image, volume, "sh", "-c", f"cat {index_file} || echo {{}}"))
    held = hub.repos["models/org/weights"].files
    if index.get("files", {}).get("last.pt"):
        assert hashlib.sha256(held["run/last.pt"]).hexdigest() == index["files"]["last.pt"]
        assert json.loads(held["run/index.json"]) == index
    else:
        assert "run/last.pt" not in held
