"""The container's status file: phases recorded atomically, a new start begins afresh."""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from entrypoint.dataset.landing import Meter
from entrypoint.errors import ExitCode
from entrypoint.settings.launchers import Volume
from entrypoint.state import budget, snapshot, status, store, view
from entrypoint.training import progress, publish
from tests.conftest import REPO, trainbox
from tests.standins.hub import GOOD_TOKEN, Hub


def test_phases_keep_what_was_recorded_and_a_fresh_start_resets(tmp_path: Path) -> None:
    status.record(Volume(tmp_path), "preflight", fresh=True, run="run")
    status.record(Volume(tmp_path), "failed", reason="no GPU visible")
    status.record(Volume(tmp_path), status.ended(6), exit_code=6)
    written = json.loads((tmp_path / "trainbox" / "status.json").read_text())
    assert written["phase"] == "failed" and written["reason"] == "no GPU visible"
    assert written["run"] == "run" and written["exit_code"] == 6
    assert written["started_at"] <= written["updated_at"]
    assert [phase for phase, _ in written["phases"]] == ["preflight", "failed"]
    status.record(Volume(tmp_path), "preflight", fresh=True, run="run")
    assert "reason" not in status.read(Volume(tmp_path))
    assert [status.ended(code) for code in (0, 1, 7, 130)] == [
        "completed",
        "failed",
        "failed",
        "interrupted",
    ]
    names = [p.name for p in (tmp_path / "trainbox").iterdir()]
    assert sorted(names) == [".status.json.lock", "status.json"]  # the writers' lock beside it


def test_libreyolo_state_of_a_run(tmp_path: Path) -> None:
    assert progress.run_state(tmp_path) is None
    (tmp_path / "status.json").write_text('{"state": "running"}')
    assert progress.run_state(tmp_path) == "running"
    (tmp_path / "status.json").write_text("{torn")
    assert progress.run_state(tmp_path) is None


TRAINING = {
    "run": "run", "phase": "training", "started_at": "2026-01-01T00:00:00Z",
    "progress_at": "2026-01-01T00:10:00Z", "limits": {"stall_timeout": 600, "max_runtime": 0},
    "gpu": "GPU 0 NVIDIA H100; torch 2.14.1+cu130, driver 580.1; preflight passed",
    "training": {"completed_epochs": 3, "total_epochs": 10, "eta_seconds": 4000,
                 "train_loss": 1.5, "best_metric_name": "metrics/mAP50-95", "best_metric": 0.25,
                 "best_epoch": 2},
    "upload": {"epoch": 3, "at": "2026-01-01T00:09:58Z", "pending": 0, "last_error": "429"},
}  # fmt: skip
T0 = 1767225600  # 2026-01-01T00:00:00Z


def test_the_screen_shows_phase_epoch_eta_best_upload_and_warnings() -> None:
    screen = view.human(TRAINING, now=T0 + 660).splitlines()
    assert screen == [
        "run      run: training, 11m00s since start",
        "gpu      GPU 0 NVIDIA H100; torch 2.14.1+cu130, driver 580.1; preflight passed",
        "epoch    3/10, ETA 1h06m, loss 1.5000",
        "best     metrics/mAP50-95 0.2500 at epoch 2",
        "upload   epoch 3 at 2026-01-01T00:09:58Z, 0 file(s) pending",
        "warning  last upload failed: 429",
        "health   healthy",
    ]


def test_the_screen_shows_an_upload_being_retried() -> None:
    retrying = {
        **TRAINING,
        "upload": {
            **TRAINING["upload"],
            "last_error": "",
            "retrying": "epoch 4: 503 from the Hub; retrying in 2 s",
        },
    }
    screen = view.human(retrying, now=T0 + 660).splitlines()
    assert "upload   retrying: epoch 4: 503 from the Hub; retrying in 2 s" in screen
    assert not [line for line in screen if "last upload failed" in line]


def test_health_turns_at_half_the_stall_timeout_and_on_failure() -> None:
    assert status.health(TRAINING, now=T0 + 600 + 299) is None
    assert status.health(TRAINING, now=T0 + 600 + 301) == (
        "no progress for 301 s in training (STALL_TIMEOUT=600)"
    )
    never = {**TRAINING, "limits": {"stall_timeout": 0}}
    assert status.health(never, now=T0 + 10**6) is None
    done = {**TRAINING, "phase": "completed"}
    assert status.health(done, now=T0 + 10**6) is None
    failed = {**TRAINING, "phase": "failed", "reason": "DATA=x: no such file"}
    assert status.health(failed) == "failed: DATA=x: no such file"


def test_status_needs_only_the_standard_library(tmp_path: Path) -> None:
    """`python3 -S` (no site-packages: no click, yaml, torch) answers from a volume's copy."""
    (tmp_path / "trainbox").mkdir()
    (tmp_path / "trainbox" / "status.json").write_text(json.dumps(TRAINING))
    command = [sys.executable, "-S", "-m", "entrypoint", "status", "--workspace", str(tmp_path)]
    shown = subprocess.run([*command, "--json"], cwd=REPO, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == TRAINING
    health = subprocess.run([*command, "--health"], cwd=REPO, capture_output=True, text=True)
    assert (health.returncode, health.stdout.split(":")[0]) == (1, "unhealthy")  # stale by now
    missing = subprocess.run(
        [*command[:-1], str(tmp_path / "nothing")], cwd=REPO, capture_output=True, text=True
    )
    assert missing.returncode == 1 and "no status at" in missing.stderr
    # Another node of a job reads its own status file; the launcher's name for the rank does.
    (tmp_path / "trainbox" / "status-node1.json").write_text(
        json.dumps({**TRAINING, "phase": "failed"})
    )
    for env in ({"NODE_RANK": "1"}, {"SKYPILOT_NODE_RANK": "1"}):
        worker = subprocess.run([*command, "--health"], cwd=REPO, capture_output=True,
                                text=True, env={**os.environ, **env})  # fmt: skip
        assert (worker.returncode, worker.stdout.split(":")[0]) == (1, "unhealthy"), env
        assert "failed" in worker.stdout


def test_the_staging_meter_records_bytes_rate_and_eta_only_in_a_container_run(
    tmp_path: Path,
) -> None:
    Meter(Volume(tmp_path), total=100)(50)
    assert status.read(Volume(tmp_path)) == {}  # a lone `trainbox dataset stage` claims no phase
    status.record(Volume(tmp_path), "staging", fresh=True)
    meter = Meter(Volume(tmp_path), total=1000, done=200)
    meter(300)
    staging = status.read(Volume(tmp_path))["staging"]
    assert staging["bytes"] == 500 and staging["total"] == 1000
    assert staging["rate"] > 0 and staging["eta_s"] is not None


def test_profile_steps_records_a_verdict_on_the_cpu(tmp_path: Path) -> None:
    """PROFILE_STEPS runs libreyolo's profiler on real steps before the run; its verdict
    lands in the status file and on the `trainbox status` screen."""
    env = {"WORKSPACE": str(tmp_path), "DEVICE": "cpu", "EPOCHS": "1", "PROFILE_STEPS": "2",
           "MONITOR": "false", "DATA": "", "DATASET_REPO": "", "OUTPUT_REPO": "",
           "TRAINBOX_CONFIG": "", "EVALUATE": "none"}  # fmt: skip
    result = trainbox("run", env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = status.read(Volume(tmp_path))["profile"]
    assert found["bound"] in ("dataloader", "host / launch", "compute", "memory-pressure")
    assert found["step_ms"] > 0 and found["img_per_s"] > 0 and found["why"]
    screen = trainbox("status", env=env).stdout
    assert f"profile  {found['bound']} bound" in screen
    assert json.loads((tmp_path / "runs/run/status.json").read_text())["state"] == "completed"


def test_billing_keeps_one_entry_per_container_of_the_run(tmp_path: Path) -> None:
    store.mark(Volume(tmp_path), fresh=True, started=100.0, first_step=130.4)
    assert budget.billed(Volume(tmp_path), 200.0) is None  # no training
    store.mark(Volume(tmp_path), first_step=141.4, last_step=500.0)  # the clock keeps whole seconds
    bill = budget.billed(Volume(tmp_path), 512.2)
    assert bill == {"container_started": store.stamp(100.0), "before_training_s": 41,
                    "after_training_s": 12}  # fmt: skip
    assert view.billed_line(bill) == "billed 41 s before training, 12 s after"
    run_dir = tmp_path / "runs" / "run"
    snapshot.keep(run_dir, billed=bill)  # no manifest yet: nothing to keep it in
    assert not publish.folder(run_dir).exists()
    snapshot.write_manifest(run_dir, {"run": "run", "billed": [{"container_started": "earlier"}]})
    snapshot.keep(run_dir, billed=bill)
    snapshot.keep(run_dir, billed={**bill, "after_training_s": 13})  # the same container
    manifest = json.loads((publish.folder(run_dir) / publish.MANIFEST).read_text())
    assert manifest["billed"] == [{"container_started": "earlier"},
                                  {**bill, "after_training_s": 13}]  # fmt: skip


def test_a_run_reports_the_seconds_billed_before_and_after_training(
    tmp_path: Path, hub: Hub
) -> None:
    """The status, the last log line and the manifest (volume and Hub) say how long the
    container ran without training: from its start to the first step, after the last one."""
    workspace = tmp_path / "ws"
    env = {"WORKSPACE": str(workspace), "DEVICE": "cpu", "EPOCHS": "2", "MONITOR": "false",
           "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
           "OUTPUT_REPO": "org/weights", "UPLOAD_INTERVAL": "1", "DATA": "",
           "DATASET_REPO": "", "TRAINBOX_CONFIG": ""}  # fmt: skip
    launched = time.time()
    done = trainbox("run", env=env, timeout=600)
    ended = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    moments = {name: store.moment(at) for name, at in store.clock(Volume(workspace)).items()}
    # The process's own start, from /proc (btime has a 1 s resolution; the clock's stamps too).
    assert launched - 2.5 <= moments["started"] <= launched + 5
    assert moments["started"] < moments["first_step"] <= moments["last_step"] <= ended
    bill = status.read(Volume(workspace))["billed"]
    assert bill["before_training_s"] == round(moments["first_step"] - moments["started"])
    assert bill["before_training_s"] > 0 and bill["after_training_s"] >= 0
    assert bill["before_training_s"] + bill["after_training_s"] < ended - launched
    last = done.stderr.strip().splitlines()
    assert last[-1] == f"[trainbox] the model card: {hub.url}/org/weights"  # the run's result
    assert f"[trainbox] {view.billed_line(bill)}" in last[-3:]
    assert f"idle     {view.billed_line(bill)}" in trainbox("status", env=env).stdout
    # Computed once, by the final upload, up to its start: the status and the log say what
    # the manifest says, and the volume's published copy stays the one the Hub holds.
    run_dir = workspace / "runs/run"
    here = (publish.folder(run_dir) / publish.MANIFEST).read_bytes()
    assert hub.repos["models/org/weights"].files["run/manifest.json"] == here
    indexed = publish.read_index(run_dir)["files"][publish.MANIFEST]
    assert indexed == hashlib.sha256(here).hexdigest()
    [on_hub] = json.loads(here)["billed"]
    assert on_hub == bill


def test_a_finished_start_shows_how_long_it_ran_not_the_time_since_it_began() -> None:
    """46 minutes of training that ended 2 hours ago: 'ran 46m00s', not '2h46m since start'."""
    done = {**TRAINING, "phase": "completed", "exit_code": 0,
            "phases": [["preflight", "2026-01-01T00:00:00Z"], ["training", "2026-01-01T00:01:00Z"],
                       ["completed", "2026-01-01T00:46:00Z"]]}  # fmt: skip
    screen = view.human(done, now=T0 + 46 * 60 + 2 * 3600).splitlines()
    assert screen[0] == "run      run: completed, ran 46m00s, ended 2h00m ago"


def test_a_new_start_of_the_same_run_keeps_its_figures(tmp_path: Path) -> None:
    """A start that ends at once (a budget reached, as RunPod starts an exited container
    again) must not lose the epochs and dollars of the start before; another run starts bare."""
    volume = Volume(tmp_path)
    figures = {"training": {"completed_epochs": 5, "total_epochs": 60},
               "cost": {"spent": 24.71, "per_hour": 2.4}, "card": "https://hub/o/n"}  # fmt: skip
    status.record(volume, "training", fresh=True, run="cars", **figures)
    status.record(volume, status.ended(ExitCode.BUDGET), exit_code=12, reason="MAX_COST")
    status.record(volume, "preflight", fresh=True, run="cars")
    kept = status.read(volume)
    assert {k: kept[k] for k in figures} == figures and "exit_code" not in kept
    status.record(volume, status.ended(ExitCode.BUDGET), exit_code=12)
    assert status.read(volume)["phase"] == "budget" and status.health(status.read(volume)) is None
    status.record(volume, "preflight", fresh=True, run="other")
    assert not set(figures) & set(status.read(volume))


def test_the_screen_says_the_memory_and_the_gpus_waiting() -> None:
    memory = {"limit_bytes": 3 << 30, "peak_bytes": 3 << 30, "oom_kills": 1}
    use = [{"epoch": 4, "busy": 0.412, "cpu_busy": 0.3}]
    screen = view.human({"phase": "failed", "memory": memory, "gpu_use": use}).splitlines()
    assert "memory   peak 3.22 GB of a 3.22 GB limit, 1 killed for memory" in screen
    assert "gpu use  busy 41% of epoch 4, CPUs 30%" in screen
    mended = view.human({"mended": [{"epoch": 3, "workers": [4, 2], "at": "x"}]}).splitlines()
    assert "mended   a dataloader worker killed for memory: WORKERS 4 -> 2 from epoch 3" in mended
    unlimited = view.human({"memory": {"peak_bytes": 5e8}})
    assert "memory   peak 0.50 GB, no limit" in unlimited
