"""Consistent snapshots of a run: what the uploader and a resume read is only what the index
lists, each file whole, with its sha256."""

import hashlib
from pathlib import Path
from types import SimpleNamespace

from entrypoint.state import store
from entrypoint.training import publish


def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "run"
    (run / "weights").mkdir(parents=True)
    (run / "weights" / "last.pt").write_bytes(b"epoch 1")
    (run / "status.json").write_text('{"state": "running"}')
    return run


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_epoch_is_copied_and_indexed_and_an_unchanged_file_is_not_copied_again(
    tmp_path: Path,
) -> None:
    run = run_dir(tmp_path)
    index = publish.publish(run, 1)
    out = publish.folder(run)
    assert out == tmp_path / "trainbox" / "published" / "run"  # outside the runs folder
    files = {"last.pt": sha(b"epoch 1"), "status.json": sha(b'{"state": "running"}')}
    assert index == {"epoch": 1, "files": files}
    assert store.index(out) == index == publish.read_index(run)
    copied = (out / "status.json").stat().st_ino
    (run / "weights" / "last.pt").write_bytes(b"epoch 2")
    assert publish.publish(run, 2)["files"]["last.pt"] == sha(b"epoch 2")
    assert (out / "status.json").stat().st_ino == copied  # unchanged: kept as it was
    assert (out / "last.pt").read_bytes() == b"epoch 2"


def test_a_failure_publishes_its_log_and_keeps_the_weights_last_published(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    publish.publish(run, 1)
    (run / "weights" / "last.pt").write_bytes(b"torn by the crash")
    (run / "train.log").write_text("Traceback ...\n")
    index = publish.publish(run, 1, failed=True)
    assert index["files"]["last.pt"] == sha(b"epoch 1")
    assert (publish.folder(run) / "last.pt").read_bytes() == b"epoch 1"
    assert index["files"]["train.log"] == sha(b"Traceback ...\n")


def test_the_manifest_is_indexed_once_written_and_its_bill_kept_per_container(
    tmp_path: Path,
) -> None:
    run = run_dir(tmp_path)
    publish.write_manifest(run, {"run": "run"})
    assert publish.MANIFEST in publish.publish(run, 1)["files"]
    bill = {"container_started": "2026-12-02T07:00:00Z", "before_training_s": 9}
    publish.record_billing(run, bill)
    manifest = publish.folder(run) / publish.MANIFEST
    assert store.manifest(publish.folder(run))["billed"] == [bill]
    assert publish.read_index(run)["files"][publish.MANIFEST] == sha(manifest.read_bytes())


def test_the_end_of_a_resumed_run_keeps_the_larger_epoch(tmp_path: Path) -> None:
    """libreyolo's completed_epochs counts this session's epochs only; the index keeps the
    run's."""
    run = run_dir(tmp_path)
    publish.publish(run, 5)  # before the resume
    publisher = publish.Publisher()
    publisher.on_train_end(SimpleNamespace(save_dir=str(run)))  # no epoch in this session yet
    assert publish.read_index(run)["epoch"] == 5
