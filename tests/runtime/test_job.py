"""The job's own rules, one by one: it hands its programs what it prepared (never a patched
environment), reports the billed-idle seconds once, and turns a stop signal before training
into a clean exit. (Whole runs: tests/state/test_store.py, tests/runtime/test_ending.py; the
exit code's table: tests/runtime/test_exits.py.)"""

import ast
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.runtime import boot, pricing
from entrypoint.settings.launchers import Volume
from entrypoint.state import run as this
from entrypoint.state import snapshot, status, store
from entrypoint.training import publish
from tests.conftest import REPO, settings, trainbox
from tests.standins.hub import Hub

# hf_xet reads its timeouts and cache limits from the environment alone: the Hub gateway sets
# its defaults there (a user's own HF_XET_* win). Nothing else writes the environment.
ALLOWED = {("entrypoint/gateways/hub/session.py", "os.environ.setdefault")}
WRITERS = ("update", "setdefault", "pop", "popitem", "clear")


def environment_writes(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = ast.unparse(node.func)
            if name in ("os.putenv", "os.unsetenv") or (
                ast.unparse(node.func.value) == "os.environ" and node.func.attr in WRITERS
            ):
                found.append((node.lineno, name))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = [node.target] if isinstance(node, ast.AugAssign) else node.targets
            for target in targets:
                if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                    found.append((node.lineno, "os.environ[...]"))
    return sorted(found)


def test_nothing_in_the_package_writes_the_environment() -> None:
    """The job used to patch os.environ so that its children could build the config again."""
    writes = [f"{module.relative_to(REPO)}:{line}: {name}"
              for module in sorted((REPO / "entrypoint").rglob("*.py"))
              for line, name in environment_writes(module.read_text())
              if (str(module.relative_to(REPO)), name) not in ALLOWED]  # fmt: skip
    assert not writes, "\n".join(writes)
    caught = environment_writes(
        "os.environ.update(A='1')\nos.environ['B'] = '2'\ndel os.environ['C']\n"
        "os.environ.get('D')\nx = os.environ.get('E', '').strip()\n"
    )
    assert caught == [(1, "os.environ.update"), (2, "os.environ[...]"), (3, "os.environ[...]")]


def test_the_settings_the_programs_read_are_the_jobs(tmp_path: Path, monkeypatch) -> None:
    cfg = settings(tmp_path, EPOCHS="7", NODE_RANK="1", NNODES="2", OUTPUT_REPO="org/w",
                   TRAIN_ARGS="lr0=0.002")  # fmt: skip
    started = this.start(cfg)
    environ = {**os.environ, "EPOCHS": "1"}  # what a program's environment says counts no more
    assert this.here({**environ, **started.environ}) == started  # before training
    ready = this.Prepared(gpus=2, workers=3, data_yaml=tmp_path / "data.yaml",
                          start=tmp_path / "best.pt")  # a teacher: none  # fmt: skip
    prepared = started.with_prepared(ready)
    assert this.here({**environ, **started.environ}) == prepared
    taught = started.with_prepared(replace(ready, start=None, teacher=tmp_path / "t.pt"))
    assert this.here({**environ, **started.environ}) == taught
    assert prepared.volume == Volume(cfg.workspace, 1)  # node 1's files
    monkeypatch.delenv(store.RUNTIME, raising=False)
    by_hand = this.here({**os.environ, "WORKSPACE": str(tmp_path), "EPOCHS": "1"})
    assert (by_hand.runtime, by_hand.prepared, by_hand.settings.epochs) == (None, None, 1)


def test_with_output_repo_the_bill_is_the_final_uploads(tmp_path: Path) -> None:
    cfg = settings(tmp_path, OUTPUT_REPO="org/w")
    store.mark(cfg.volume, fresh=True, started=100.0, first_step=130.0, last_step=500.0)
    uploaded = {"container_started": store.stamp(100.0), "before_training_s": 30,
                "after_training_s": 4}  # fmt: skip
    snapshot.write_manifest(cfg.run_dir, {"run": "run", "billed": [uploaded]})
    status.record(cfg.volume, "completed", fresh=True)
    pricing.report(cfg)
    assert status.read(cfg.volume)["billed"] == uploaded  # computed once, by the final upload


def test_without_output_repo_the_job_computes_and_keeps_the_bill(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    store.mark(cfg.volume, fresh=True, started=100.0, first_step=130.0, last_step=500.0)
    snapshot.write_manifest(cfg.run_dir, {"run": "run"})
    status.record(cfg.volume, "completed", fresh=True)
    pricing.report(cfg)
    bill = status.read(cfg.volume)["billed"]
    assert bill["before_training_s"] == 30
    assert store.manifest(publish.folder(cfg.run_dir))["billed"] == [bill]


def test_a_stop_before_training_raises_interrupted(tmp_path: Path) -> None:
    """(When the watchdog sent it, its code wins: tests/runtime/test_exits.py.)"""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainboxError) as stopped, boot._stoppable(_boot(tmp_path)):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises in the main thread, which a signal wakes
    assert stopped.value.code == ExitCode.INTERRUPTED
    assert str(stopped.value).startswith("SIGTERM received before training: stopped")
    assert signal.getsignal(signal.SIGTERM) == before  # put back as it was


def test_a_stop_that_a_library_caught_still_ends_the_start_after_its_step(tmp_path: Path) -> None:
    """The handler's error raised inside a library's ``try: ... except Exception: pass`` (torch's
    CUDA preload, at import: a SIGTERM there went unheard in a container test): the step goes
    on, and the start ends interrupted once it returns."""
    started = _boot(tmp_path)
    boot.heed(started)  # no stop: nothing happens
    with boot._stoppable(started):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
        except Exception:  # what the library did
            pass
        with pytest.raises(TrainboxError) as stopped:
            boot.heed(started)
    assert stopped.value.code == ExitCode.INTERRUPTED
    assert str(stopped.value).startswith("SIGTERM received before training: stopped")


def _boot(tmp_path: Path) -> boot.Boot:
    """A boot whose stop handler can be tried: no runtime folder (``this.start`` would leave one
    in /tmp for each test), as none of the handler's work needs one."""
    return boot.Boot(this.Run(settings(tmp_path / "ws")))


def test_a_run_the_volume_cannot_hold_stops_before_staging(hub: Hub, tmp_path: Path) -> None:
    """The dataset fits; the checkpoints of a million epochs, one kept for each, do not: a real
    `trainbox run` ends with exit 4 and each part named, before a byte is downloaded."""
    demo.ensure(tmp_path / "shapes")
    (tmp_path / "shapes" / "blob").write_bytes(os.urandom(20_000_000))
    archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
    tar = (tmp_path / "shapes.tar").stat().st_size
    hub.add("org/shapes", {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()})
    workspace = tmp_path / "ws"
    env = {"WORKSPACE": str(workspace), "DEVICE": "cpu", "HF_ENDPOINT": hub.url,
           "HF_TOKEN": "", "HF_HOME": str(workspace / "hf"), "TRAINBOX_CONFIG": "", "DATA": "",
           "DATASET_REPO": "org/shapes", "OUTPUT_REPO": "", "MODEL": "LibreYOLO9t.pt",
           "PRETRAINED": "false",
           "EPOCHS": "1000000", "SAVE_PERIOD": "1", "MONITOR": "false"}  # fmt: skip
    result = trainbox("run", env=env)
    assert result.returncode == ExitCode.DISK, result.stderr[-3000:]
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert f"not enough space on {workspace} for the whole run: it will still write" in line
    # the tar and 15%; 1,000,002 checkpoints of LibreYOLO9t's 35,310,808 bytes (its weights
    # x 4.3), twice (weights/ and the published copy): 70,621.7 GB
    assert f"(dataset {tar * 1.15 / 1e9:.2f} GB, checkpoints and exports 70621.7" in line
    assert "give the volume at least" in line
    assert not [p for m, p in hub.requests if m == "GET" and p.endswith("shapes.tar")]
    assert not (workspace / "data").exists() or not any((workspace / "data").iterdir())
    recorded = store.status(Volume(workspace))
    assert recorded["exit_code"] == ExitCode.DISK and recorded["reason"] in line


def test_the_job_makes_the_final_upload_an_uploader_left_undone(hub: Hub, cfg) -> None:
    """The uploader died before its flush (in a CI run the kernel killed it for memory right
    after the trainer, and supervisord's new one was stopped while it was starting): the job's
    own step pushes what it left. After an uploader's flush that left its word, it does not."""
    hub.add("org/w", {}, kind="models")
    started = this.start(cfg)
    (cfg.run_dir / "weights").mkdir(parents=True)
    (cfg.run_dir / "weights" / "last.pt").write_bytes(b"epoch 1")
    publish.publish(cfg.run_dir, 1)
    boot.final_upload(boot.Boot(started))
    repo = hub.repos["models/org/w"]
    assert repo.files["run/last.pt"] == b"epoch 1"
    assert store.code(started.runtime, "upload") == ExitCode.OK
    commits = len(repo.commits)
    (cfg.run_dir / "weights" / "last.pt").write_bytes(b"epoch 2")
    publish.publish(cfg.run_dir, 2)
    boot.final_upload(boot.Boot(started))  # the upload's word is there: nothing more
    assert len(repo.commits) == commits and repo.files["run/last.pt"] == b"epoch 1"
