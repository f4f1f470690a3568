"""The evaluation of best.pt: which splits it scores, a failure or a stop as one line that
leaves the run's outcome as it was, and a checkpoint never scored twice."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from entrypoint.dataset import demo
from entrypoint.settings.launchers import Volume
from entrypoint.state import status, store
from entrypoint.training import evaluation
from tests.conftest import REPO


def plan(run_dir: Path, data: Path, choice: str = "auto") -> evaluation.Plan:
    return evaluation.Plan(run_dir, data, 128, "cpu", {"data": "fixture"}, choice)


def test_a_test_split_is_scored_only_when_it_has_labels(tmp_path: Path) -> None:
    data, _ = demo.ensure(tmp_path / "demo")  # train, val and a labelled test split
    assert evaluation.splits(data, "auto") == ["test", "val"]
    assert evaluation.splits(data, "val") == ["val"] and evaluation.splits(data, "none") == []
    for label in (tmp_path / "demo" / "labels" / "test").iterdir():  # COCO's test-dev: no labels
        label.unlink()
    assert evaluation.test_split(data) == (
        False, "the test split (images/test) has no labels: no test score")  # fmt: skip
    assert evaluation.splits(data, "auto") == ["val"]
    spec = yaml.safe_load(data.read_text())
    del spec["test"]
    data.write_text(yaml.safe_dump(spec))
    assert evaluation.test_split(data) == (False, "the dataset has no test split")
    classes = tmp_path / "cls"  # a classification root: ROOT/SPLIT/CLASS/*
    (classes / "val" / "dog").mkdir(parents=True)
    assert evaluation.splits(classes, "auto") == ["val"]
    (classes / "test" / "dog").mkdir(parents=True)
    (classes / "test" / "dog" / "1.jpg").write_bytes(b"jpeg")
    assert evaluation.splits(classes, "auto") == ["test", "val"]


def test_a_failure_is_one_line_and_a_scored_checkpoint_is_not_scored_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, _ = demo.ensure(tmp_path / "demo")
    run_dir = tmp_path / "runs" / "run"
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "weights" / "best.pt").write_bytes(b"not a checkpoint")
    assert evaluation.main(plan(run_dir, data)) == 1
    [line] = [r.getMessage() for r in caplog.records if "evaluation of" in r.getMessage()]
    assert line.endswith("; the run's outcome stands") and "\n" not in line
    assert not (run_dir / "evaluation" / "test.json").exists()
    # Scored before (a restart): the same best.pt, by its sha256, is not loaded again.
    digest = evaluation.sha256(run_dir / "weights" / "best.pt")
    for split in ("test", "val"):
        store.write_evaluation(run_dir / "evaluation", split,
                               {"split": split, "images": 8, "metrics": {},
                                "checkpoint_sha256": digest})  # fmt: skip
    assert evaluation.main(plan(run_dir, data)) == 0
    assert set(store.evaluations(run_dir / evaluation.FOLDER)) == {"test", "val"}


def test_a_stop_during_the_evaluation_leaves_the_completed_run_as_it_was(tmp_path: Path) -> None:
    """A real ``trainbox run`` of the demo on the CPU, stopped (SIGTERM, as docker stop) once
    its status says ``evaluating``: it exits 0 within STOP_GRACE, saying the evaluation stopped,
    and the run stays completed."""
    workspace = tmp_path / "ws"
    env = {**os.environ, "WORKSPACE": str(workspace), "DEVICE": "cpu", "EPOCHS": "1",
           "MONITOR": "false", "DATA": "", "DATASET_REPO": "", "TRAINBOX_CONFIG": "",
           "OUTPUT_REPO": "", "STOP_GRACE": "20"}  # fmt: skip
    job = subprocess.Popen([sys.executable, "-m", "entrypoint", "run"], cwd=REPO, env=env,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    volume = Volume(workspace)
    deadline = time.monotonic() + 300
    while status.read(volume).get("phase") != "evaluating" and job.poll() is None:
        assert time.monotonic() < deadline, "never evaluated"
        time.sleep(0.05)
    stopped = time.monotonic()
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)
    assert time.monotonic() - stopped < 20  # STOP_GRACE
    assert job.returncode == 0, err[-3000:]
    assert "evaluation stopped: the run's outcome stands" in err
    state = status.read(volume)
    assert (state["phase"], state["exit_code"]) == ("completed", 0)
    assert json.loads((workspace / "runs/run/status.json").read_text())["state"] == "completed"
