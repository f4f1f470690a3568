"""Publishing and uploading on the host: the real huggingface_hub client against the test Hub.
(The trainer's side, and the stops and resumes, are in tests/container/test_upload.py.)"""

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from entrypoint.settings import config
from entrypoint.training import publish
from entrypoint.upload import uploader as upload
from tests.conftest import client_at
from tests.standins.hub import READ_TOKEN, Fault, Hub


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "run"
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "weights" / "last.pt").write_bytes(b"epoch 1 weights" * 1000)
    (run_dir / "status.json").write_text('{"state": "running"}')
    return run_dir


def test_the_dashboard_sees_one_run_not_its_published_copy(run: Path) -> None:
    """libreyolo's monitor takes any folder holding one of its markers for a run; the published
    copy (status.json, metrics.jsonl included) once showed as a second, phantom run."""
    from libreyolo.ui.train_monitor import _RUN_MARKERS, discover_runs

    assert publish.MONITOR_MARKERS == _RUN_MARKERS  # what `trainbox monitor` waits for
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    publish.publish(run, 1)
    assert (publish.folder(run) / "metrics.jsonl").is_file()
    assert discover_runs(run.parent) == [run]


def test_publish_copies_consistently_and_skips_what_did_not_change(run: Path) -> None:
    first = publish.publish(run, 1)
    assert first["files"]["last.pt"] == hashlib.sha256(b"epoch 1 weights" * 1000).hexdigest()
    stamp = (publish.folder(run) / "last.pt").stat().st_mtime_ns
    assert publish.publish(run, 1)["files"] == first["files"]
    assert (publish.folder(run) / "last.pt").stat().st_mtime_ns == stamp  # not copied again
    (run / "weights" / "last.pt").write_bytes(b"epoch 2")
    second = publish.publish(run, 2)
    assert second["files"]["last.pt"] == hashlib.sha256(b"epoch 2").hexdigest()
    assert json.loads((publish.folder(run) / "index.json").read_text()) == second


def test_one_commit_per_cycle_with_only_what_changed(hub: Hub, cfg, run: Path) -> None:
    hub.add("org/w", {}, kind="models")
    publish.publish(run, 1)
    uploader = upload.Uploader(upload.Uploads.of(cfg))
    assert uploader.push() is True
    assert hub.repos["models/org/w"].files["run/last.pt"] == b"epoch 1 weights" * 1000
    commits = len(hub.repos["models/org/w"].commits)
    assert uploader.push() is True and len(hub.repos["models/org/w"].commits) == commits
    (run / "weights" / "last.pt").write_bytes(b"epoch 2")
    publish.publish(run, 2)
    assert uploader.pending()[1].keys() == {"last.pt"}
    assert uploader.push() is True
    assert hub.repos["models/org/w"].files["run/last.pt"] == b"epoch 2"
    ledger = upload.read_ledger(cfg.workspace, cfg.output_repo, cfg.run_name)
    assert ledger["files"]["run/last.pt"]["sha256"] == hashlib.sha256(b"epoch 2").hexdigest()
    assert ledger["files"]["run/last.pt"]["commit"] == hub.repos["models/org/w"].commits[-1]


def test_faults_are_retried_and_the_commit_limit_holds(hub: Hub, cfg, run: Path) -> None:
    hub.add("org/w", {}, kind="models")
    hub.faults += [
        Fault("/commit/", status=412, methods=("POST",)),
        Fault("/commit/", status=429, methods=("POST",)),
        Fault("/cas/v1/xorbs/", drop_after=10, methods=("POST",)),  # a xorb cut midway
    ]
    publish.publish(run, 1)
    limited = upload.Uploader(
        upload.Uploads.of(config.load({**vars_env(cfg), "MAX_COMMITS_PER_HOUR": "1"}))
    )
    assert limited.push() is True
    assert all(fault.times == 0 for fault in hub.faults)
    (run / "weights" / "last.pt").write_bytes(b"epoch 2")
    publish.publish(run, 2)
    assert limited.push() is False  # one commit this hour already
    assert hub.repos["models/org/w"].files["run/last.pt"] != b"epoch 2"


def vars_env(cfg: config.Config) -> dict[str, str]:
    return {"WORKSPACE": str(cfg.workspace), "OUTPUT_REPO": cfg.output_repo}


@pytest.mark.parametrize(("token", "status"), [("hf_wrong", 401), (READ_TOKEN, 403)])
def test_a_token_that_cannot_write_stops_at_start(
    hub: Hub, cfg, monkeypatch: pytest.MonkeyPatch, token: str, status: int
) -> None:
    hub.add("org/w", {}, kind="models")
    monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(upload.TrainboxError) as caught:
        upload.prepare(upload.Uploads.of(cfg), {"run": "run"})
    message = str(caught.value)
    assert message.startswith(f"the Hub refused HF_TOKEN for OUTPUT_REPO=org/w ({status})")
    assert caught.value.code == upload.ExitCode.UPLOAD and token not in message
    assert "run/manifest.json" not in hub.repos["models/org/w"].files


def test_an_unreachable_hub_at_start_ends_the_run_after_hub_wait(cfg, monkeypatch) -> None:
    client_at(monkeypatch, "http://127.0.0.1:9")  # nothing listens there: connection refused
    waits: list[str] = []  # what the job's status is told of each wait
    with pytest.raises(upload.TrainboxError) as caught, upload.hub.told(waits.append):
        upload.prepare(upload.Uploads.of(replace(cfg, hub_wait=3)), {"run": "run"})
    assert caught.value.code == upload.ExitCode.HUB
    assert str(caught.value).startswith("cannot ask the Hub for OUTPUT_REPO=org/w")
    # It waited with backoff (1 s, then what HUB_WAIT's 3 s had left), then gave up.
    assert len(waits) >= 2 and waits[0].endswith("retrying in 1 s"), waits


def test_a_failed_final_upload_says_so_and_a_later_flush_completes_it(
    hub: Hub, cfg, run: Path
) -> None:
    hub.add("org/w", {}, kind="models")
    publish.publish(run, 1)
    hub.faults.append(Fault("/preupload/", status=503, times=1000, methods=("POST",)))
    short = config.load({**vars_env(cfg), "STOP_GRACE": "8"})
    assert upload.flush(upload.Uploads.of(short)) == upload.ExitCode.UPLOAD
    assert "run/last.pt" not in hub.repos["models/org/w"].files
    hub.faults.clear()
    assert upload.flush(upload.Uploads.of(short)) == upload.ExitCode.OK
    assert hub.repos["models/org/w"].files["run/last.pt"] == b"epoch 1 weights" * 1000


def test_a_new_output_repo_gets_every_file_the_old_one_already_had(
    hub: Hub, cfg, run: Path
) -> None:
    hub.add("org/w", {}, kind="models")
    hub.add("org/other", {}, kind="models")  # (a run's start creates its repo)
    (run / "weights" / "best.pt").write_bytes(b"best of epoch 1")
    publish.publish(run, 1)
    assert upload.Uploader(upload.Uploads.of(cfg)).push() is True
    moved = config.load({**vars_env(cfg), "OUTPUT_REPO": "org/other"})  # same volume and run
    uploader = upload.Uploader(upload.Uploads.of(moved))
    assert uploader.pending()[1].keys() == {"last.pt", "best.pt", "status.json"}
    assert uploader.push() is True
    assert hub.repos["models/org/other"].files["run/best.pt"] == b"best of epoch 1"
    assert (
        upload.read_ledger(moved.workspace, moved.output_repo, moved.run_name)["repo"]
        == "org/other"
    )
    assert (
        upload.Uploader(upload.Uploads.of(cfg)).pending()[1] == {}
    )  # the first repo's record is untouched


def test_the_end_of_a_resumed_run_publishes_its_last_epoch_not_this_sessions_count(
    run: Path,
) -> None:
    """libreyolo's end event counts this session's epochs only: 3 after resuming at epoch 2."""
    callback = publish.Publisher()
    for epoch in (3, 4, 5):
        callback.on_train_epoch_end(
            SimpleNamespace(save_dir=str(run), epoch=epoch, total_epochs=3, epoch_seconds=1.0)
        )
    callback.on_train_end(SimpleNamespace(save_dir=str(run), completed_epochs=3))
    assert publish.read_index(run)["epoch"] == 5


def test_a_checkpoint_rewritten_while_it_is_copied_is_never_published(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy runs beside training: the next epoch's torch.save may begin during it. That
    copy is dropped before its rename; the published file stays the last whole one."""
    from entrypoint import files

    publish.publish(run, 1)
    whole = (publish.folder(run) / "last.pt").read_bytes()
    real_fstat = files.os.fstat

    def saved_meanwhile(fd: int):  # the next save starts right after the copy opened the file
        found = real_fstat(fd)
        (run / "weights" / "last.pt").write_bytes(b"half of epoch 3")
        return found

    (run / "weights" / "last.pt").write_bytes(b"epoch 2 weights" * 1000)
    monkeypatch.setattr(files.os, "fstat", saved_meanwhile)
    callback = publish.Publisher()
    callback.on_train_epoch_end(
        SimpleNamespace(save_dir=str(run), epoch=2, total_epochs=3, epoch_seconds=1.0)
    )
    callback.wait()
    assert (publish.folder(run) / "last.pt").read_bytes() == whole
    assert publish.read_index(run)["epoch"] == 1
    assert not [p for p in publish.folder(run).iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()
    callback.on_train_epoch_end(
        SimpleNamespace(save_dir=str(run), epoch=3, total_epochs=3, epoch_seconds=1.0)
    )
    callback.wait()
    assert (publish.folder(run) / "last.pt").read_bytes() == b"half of epoch 3"  # its own copy
    assert publish.read_index(run)["epoch"] == 3
