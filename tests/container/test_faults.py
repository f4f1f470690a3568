"""Never lose a run, on any fault, in real containers: a Hub that is down while a new volume
resumes, an older volume against newer weights on the Hub, a Hub that hangs on the final
commit, a stop during staging, and two containers on one volume."""

import json
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import (
    OUTPUT,
    TRAIN,
    Container,
    detached,
    env_for,
    hub_epochs,
    in_volume,
    logs,
    phase,
    run_container,
    shapes_on_the_hub,
    stop,
    until,
)
from tests.standins.hub import Fault, Hub

pytestmark = pytest.mark.container


def test_a_hub_down_while_a_new_volume_resumes_trains_nothing_and_commits_nothing(
    image: str, volume: str, hub: Hub
) -> None:
    hub.add(OUTPUT, {"run/status.json": b'{"state": "running"}\n',
                   "run/index.json": b'{"epoch": 2, "files": {}}\n',
                   "run/last.pt": b"weights of epoch 2"}, kind="models")  # fmt: skip
    commits = list(hub.repos[f"models/{OUTPUT}"].commits)
    hub.faults.append(Fault("/resolve/", status=503, seconds=600))
    result = run_container(image, volume, env=env_for(hub, EPOCHS="5", HUB_WAIT="8"))
    assert result.returncode == ExitCode.HUB, logs(result)[-3000:]  # the Hub's 503s last 600 s
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert f"cannot ask the Hub for OUTPUT_REPO={OUTPUT}" in line and "HF_TOKEN" not in line
    assert hub.repos[f"models/{OUTPUT}"].commits == commits  # nothing committed
    state = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (state["phase"], state["exit_code"]) == ("failed", ExitCode.HUB)
    assert [phase for phase, _ in state["phases"]][-2:] == ["resuming", "failed"]
    assert "HUB_WAIT" in state["reason"]
    assert in_volume(image, volume, "sh", "-c", "ls -A /workspace/runs; true").split() == []


def test_an_older_volume_resumes_from_the_hubs_later_epoch(
    image: str, volume: str, hub: Hub
) -> None:
    first = run_container(image, volume, env=env_for(hub, EPOCHS="2", SAVE_PERIOD="1"))
    assert first.returncode == 0, logs(first)[-3000:]
    # The Hub's run stopped at epoch 2 ("running"); this volume goes back to its epoch 1,
    # as one reattached after another machine trained further would be.
    hub.add(OUTPUT, {"run/status.json": b'{"state": "running"}\n'}, kind="models")
    older = ("import json, pathlib, shutil; run = pathlib.Path('/workspace/runs/run');"
             "shutil.copyfile(run / 'weights/epoch_1.pt', run / 'weights/last.pt');"
             "shutil.rmtree('/workspace/trainbox/published/run');"
             "(run / 'status.json').write_text(json.dumps({'state': 'running'}))")  # fmt: skip
    in_volume(image, volume, "python", "-c", older)
    again = run_container(image, volume, env=env_for(hub, EPOCHS="3"))
    assert again.returncode == 0, logs(again)[-4000:]
    assert f"resuming run run from the last.pt on {OUTPUT} (epoch 2; this volume had 1)" in (
        logs(again)
    )
    assert "epoch 3/3 done" in logs(again) and "epoch 2/3 done" not in logs(again)
    epochs = hub_epochs(hub)
    assert epochs == sorted(epochs) and epochs[-1] == 3, epochs


@pytest.mark.parametrize("route", ["/commit/", "/cas/"], ids=["commit", "xet-cas"])
def test_a_hub_hanging_on_the_final_upload_ends_within_stop_grace(
    image: str, volume: str, hub: Hub, route: str
) -> None:
    """The commit, or hf_xet's CAS (whose own retries and timeouts run for minutes)."""
    with detached(image, volume, env_for(hub, EPOCHS="50", STOP_GRACE="20")) as box:
        until(lambda: "uploaded epoch 1" in box.logs(), box)
        assert hub.xet_hashes  # epoch 1's weights went through Xet, as in production
        hub.faults.append(Fault(route, hang=600, seconds=600))
        until(lambda: "epoch 2/50 done" in box.logs(), box)  # published; its upload hangs
        code, log = stop(box, 20 + 25)
    # Its own exit, not docker's SIGKILL (137): the final upload gave up at its STOP_GRACE
    # deadline (20 s), with the Hub hanging for 600 s.
    assert code == ExitCode.UPLOAD, log[-3000:]
    assert "final upload failed" in log
    epochs = hub_epochs(hub)
    assert epochs == sorted(epochs) and epochs[0] == 1, epochs


def test_a_refused_xet_token_stops_at_start_with_the_tokens_line(
    image: str, volume: str, hub: Hub
) -> None:
    """The Hub refusing the Xet write token (what a read-only token gets): exit 7 at once."""
    hub.faults.append(Fault("/xet-write-token/", status=403, seconds=600))
    result = run_container(image, volume, env=env_for(hub, EPOCHS="1", HUB_WAIT="20"))
    assert result.returncode == ExitCode.UPLOAD, logs(result)[-3000:]
    # A refusal is not waited on: the token was asked for once (a transient error elsewhere
    # on a loaded machine may be retried, and say so in the log; this one is not).
    asked = [path for _, path in hub.requests if "/xet-write-token/" in path]
    assert len(asked) == 1, asked
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert f"the Hub refused HF_TOKEN for OUTPUT_REPO={OUTPUT} (403)" in line
    assert "make a token with write access" in line


def staged_bytes(box: Container) -> int:
    """The staging download's bytes so far, as the status shows them."""
    return json.loads(box.status("--json").stdout or "{}").get("staging", {}).get("bytes", 0)


def test_a_stop_during_staging_exits_130_interrupted_and_leaves_nothing(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    hub.rate = len(shapes_on_the_hub(hub, tmp_path)) / 120  # staging would take 2 minutes
    with detached(image, volume, env_for(hub, DATASET_REPO="org/shapes", DOCTOR="false")) as box:
        # some bytes in (the phase begins with the disk's sum, before any download), no
        # staging checkpoint yet (STAGE_CHECKPOINT is 30 s)
        until(lambda: staged_bytes(box) > 0, box, 120)
        code, log = stop(box, 20)
    assert code == ExitCode.INTERRUPTED, log[-3000:]  # its own exit, not docker's SIGKILL
    state = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (state["phase"], state["exit_code"]) == ("interrupted", ExitCode.INTERRUPTED)
    assert in_volume(image, volume, "ls", "-A", "/workspace/data").split() == []
    left = in_volume(image, volume, "sh", "-c", "ls -A /workspace /workspace/*/* 2>&1; true")
    assert "tmp" not in left and "weights" not in left, left


def test_a_second_container_on_the_same_volume_is_refused(image: str, volume: str) -> None:
    with detached(image, volume, {**TRAIN, "EPOCHS": "50", "MONITOR": "false"}) as box:
        until(lambda: phase(box) == "training", box, 120)
        before = box.status("--json").stdout
        second = run_container(image, volume, env={**TRAIN, "EPOCHS": "1"})
        after = json.loads(box.status("--json").stdout)
        running, _, _ = box.inspect()
    assert second.returncode == ExitCode.VOLUME_IN_USE, logs(second)[-3000:]
    [line] = [m for m in second.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert "/workspace is in use by another trainbox container (host " in line
    assert running and after["started_at"] == json.loads(before)["started_at"]
    assert after["phases"] == json.loads(before)["phases"]  # its status was not touched
