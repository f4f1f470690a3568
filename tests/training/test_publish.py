"""Consistent snapshots of a run: what the uploader and a resume read is only what the index
lists, each file whole, with its sha256."""

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from entrypoint.state import snapshot, store
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
    snapshot.write_manifest(run, {"run": "run"})
    assert publish.MANIFEST in publish.publish(run, 1)["files"]
    bill = {"container_started": "2026-12-02T07:00:00Z", "before_training_s": 9}
    snapshot.keep(run, billed=bill)
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


def test_a_training_that_raises_keeps_its_traceback_in_train_log_and_publishes_it(
    tmp_path: Path,
) -> None:
    """LibreYOLO's own failure, on the CPU: D-FINE-n at 128 px has fewer encoder cells than
    queries (what the start check refuses; the train program run by hand trains anyway)."""
    from entrypoint.dataset import demo
    from entrypoint.errors import ExitCode
    from entrypoint.settings import config
    from entrypoint.state.run import Prepared, Run
    from entrypoint.training import program

    data_yaml, _ = demo.ensure(tmp_path / "shapes")
    cfg = config.load({"WORKSPACE": str(tmp_path / "ws"), "MODEL": "LibreDFINEn.pt",
                       "PRETRAINED": "false", "IMGSZ": "128", "EPOCHS": "1", "BATCH": "2",
                       "DEVICE": "cpu", "WORKERS": "0"})  # fmt: skip
    assert program.main(Run(cfg, None, Prepared(0, 0, data_yaml))) == ExitCode.TRAINING_FAILED
    log = (cfg.run_dir / "train.log").read_text()
    assert "Traceback (most recent call last)" in log
    assert log.rstrip().endswith("RuntimeError: selected index k out of range")
    assert log.count("Traceback (most recent call last)") == 1  # once, not per handler
    published = publish.folder(cfg.run_dir) / "train.log"
    assert "selected index k out of range" in published.read_text()  # what the uploader sends


def test_a_dropped_copy_of_the_last_epoch_names_the_end_of_trainings_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No next epoch follows the last one: the end of training publishes it."""
    from entrypoint.files import SourceChanged

    def rewritten(*_: object) -> None:
        raise SourceChanged("last.pt changed while it was copied")

    monkeypatch.setattr(publish, "publish", rewritten)
    publisher = publish.Publisher()
    with caplog.at_level("INFO", logger="trainbox"):
        for epoch in (1, 2):
            publisher.on_train_epoch_end(
                SimpleNamespace(
                    save_dir=str(tmp_path), epoch=epoch, total_epochs=2, epoch_seconds=1.0
                )
            )
            publisher.wait()
    first, last = [r.getMessage() for r in caplog.records if "not published" in r.getMessage()]
    assert first.endswith("; the next epoch's copy follows")
    assert last.endswith("; the end of training's copy follows")
