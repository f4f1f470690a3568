"""Weights on the Hub never go backwards: the fault matrix (every step that talks to the Hub,
against every kind of Hub failure), and volumes older or newer than the Hub.

Each step runs in this process through the real huggingface_hub client against the test Hub,
with ``HUB_WAIT=3`` and a 1 s request timeout. A fault that outlasts the wait ends the step
with its documented exit code (or, for an upload cycle, leaves the push to the next cycle);
a brief one is waited out and the step goes on. Whatever happens, the epoch inside the Hub's
``last.pt`` never decreases from one commit to the next. docs/resume-and-uploads.md says the same.
"""

import hashlib
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import huggingface_hub
import pytest
import torch

from entrypoint.dataset import stage as dataset
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways.hub import session, writes
from entrypoint.settings import config
from entrypoint.training import publish, resume
from entrypoint.upload import uploader as upload
from tests.conftest import client_at, finishes, settings, tar_on_hub
from tests.standins.hub import GOOD_TOKEN, READ_TOKEN, Fault, Hub

HUB_EPOCH = 3  # the run on the Hub; this volume has published epoch 4 (or nothing)
LONG, BRIEF = 60.0, 1.5  # seconds a fault lasts: past HUB_WAIT (3 s), or within it


def checkpoint(epochs: int) -> bytes:
    """A libreyolo-like checkpoint: ``epoch`` is the last one trained, 0-based."""
    buffer = io.BytesIO()
    torch.save({"epoch": epochs - 1, "model": {"w": torch.zeros(4)}}, buffer)
    return buffer.getvalue()


def hub_epochs(server: Hub) -> list[int]:
    """The epoch inside ``run/last.pt`` at every commit of the weights repo that changed it."""
    repo = server.repos["models/org/w"]
    found, before = [], None
    for commit in repo.commits:
        data = repo.snapshots[commit].files.get("run/last.pt")
        if data is not None and data != before:
            found.append(int(torch.load(io.BytesIO(data), weights_only=False)["epoch"]) + 1)
        before = data
    return found


@pytest.fixture
def cfg(
    cfg: config.Config, hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[config.Config]:
    """The shared run (tests/conftest.py) on a volume of its own, with short Hub timeouts, a
    run of epoch 3 on the Hub and a dataset there."""
    monkeypatch.setattr(session, "TIMEOUT", 1)
    monkeypatch.setattr(writes, "SLACK", 2.0)  # a stuck transfer is given up after 2 s
    huggingface_hub.close_session()  # the next client takes the 1 s timeout
    last = checkpoint(HUB_EPOCH)
    index = {"epoch": HUB_EPOCH, "files": {"last.pt": hashlib.sha256(last).hexdigest()}}
    hub.add("org/w", {
        "run/status.json": b'{"state": "running", "completed_epochs": 3}\n',
        "run/index.json": json.dumps(index).encode(), "run/last.pt": last,
        "run/manifest.json": b'{"run": "run", "dataset": {"data": "the built-in demo"}}\n',
    }, kind="models")  # fmt: skip
    tar_on_hub(hub, "org/shapes", tmp_path / "shapes", 300_000)
    yield settings(tmp_path / "ws", OUTPUT_REPO=cfg.output_repo, HUB_WAIT="3",
                   DATASET_REPO="org/shapes", DOCTOR="false", UPLOAD_INTERVAL="3",
                   STOP_GRACE="15")  # fmt: skip
    huggingface_hub.close_session()


def published(cfg: config.Config, epochs: int) -> None:
    """This volume's run, trained and published up to ``epochs``."""
    (cfg.run_dir / "weights").mkdir(parents=True, exist_ok=True)
    (cfg.run_dir / "weights" / "last.pt").write_bytes(checkpoint(epochs))
    (cfg.run_dir / "status.json").write_text('{"state": "running"}\n')
    publish.publish(cfg.run_dir, epochs)


def outcome(step: Callable[[], object]) -> object:
    try:
        return step()
    except TrainboxError as err:
        return err.code


def _resume(cfg: config.Config) -> object:
    resume.fetch(cfg)
    return resume.local_epoch(cfg.run_dir)  # HUB_EPOCH once the Hub's last.pt is taken


def _write_check(cfg: config.Config) -> object:
    upload.prepare(upload.Uploads.of(cfg), {"run": "run"})
    return "written"


def _staging(cfg: config.Config) -> object:
    wanted = dataset.Wanted.of(cfg)
    return dataset.stage(wanted, dataset.pending(wanted)).name


def _cycle(cfg: config.Config) -> object:
    published(cfg, 4)
    return upload.Uploader(upload.Uploads.of(cfg)).push()


def _flush(cfg: config.Config) -> object:
    published(cfg, 4)
    return upload.flush(upload.Uploads.of(cfg))


def _verify(cfg: config.Config) -> object:
    published(cfg, 4)
    assert upload.Uploader(
        upload.Uploads.of(cfg)
    ).push()  # before the fault: the Hub holds the volume's files
    return "armed"


STEPS = {  # step: (the route its fault hits, the run, what it gives when it goes on, when not)
    "resume": ("/resolve/", _resume, HUB_EPOCH, ExitCode.HUB),
    "write check": ("/api/repos/create", _write_check, "written", ExitCode.HUB),
    "staging": ("shapes.tar", _staging, "data.yaml", ExitCode.HUB),
    "upload cycle": ("/commit/", _cycle, True, False),  # the next cycle pushes it
    "final flush": ("/commit/", _flush, ExitCode.OK, ExitCode.UPLOAD),
    "ON_EXIT verification": ("/paths-info/", _verify, True, False),  # False: ON_EXIT does nothing
}
FAULTS = ("5xx", "429", "refused", "hang")


def inject(server: Hub, kind: str, route: str, seconds: float) -> None:
    if kind == "refused":
        huggingface_hub.close_session()  # a pooled connection would outlive the listener
        server.refuse(seconds)
        return
    fault = {"5xx": {"status": 503}, "429": {"status": 429}, "hang": {"hang": 30.0}}[kind]
    server.faults.append(Fault(route, seconds=seconds, **fault))


CASES = [(step, kind, LONG) for step in STEPS for kind in FAULTS]
CASES += [(step, "5xx", BRIEF) for step in STEPS]


@pytest.mark.parametrize(
    ("step", "kind", "seconds"),
    CASES,
    ids=[f"{step}-{kind}-{'outlasts' if s == LONG else 'brief'}" for step, kind, s in CASES],
)
def test_a_hub_fault_is_waited_out_or_ends_the_step_and_weights_never_go_back(
    hub: Hub, cfg: config.Config, step: str, kind: str, seconds: float
) -> None:
    route, run, went_on, ended = STEPS[step]
    if step == "ON_EXIT verification":
        run(cfg)
        run = lambda _cfg: upload.verify(upload.Uploads.of(_cfg))  # noqa: E731
    commits = len(hub.repos["models/org/w"].commits)
    inject(hub, kind, route, seconds)
    result = outcome(lambda: run(cfg))
    assert result == (went_on if seconds == BRIEF else ended), (step, kind)
    epochs = hub_epochs(hub)
    assert epochs == sorted(epochs) and epochs[-1] >= HUB_EPOCH, epochs
    if step in ("resume", "write check", "staging") and seconds == LONG:
        assert len(hub.repos["models/org/w"].commits) == commits  # nothing committed
        assert not (cfg.run_dir / "weights").exists()  # nothing to train from


def test_an_older_volume_takes_the_hubs_later_last_pt_and_a_later_one_keeps_its_own(
    hub: Hub, cfg: config.Config
) -> None:
    published(cfg, 2)  # a volume reattached after another machine trained to epoch 3
    resume.fetch(cfg)
    assert resume.local_epoch(cfg.run_dir) == HUB_EPOCH
    assert not publish.folder(cfg.run_dir).exists()  # its epoch-2 snapshot can never be pushed
    published(cfg, 5)  # this volume went further than the Hub (its upload failed, say)
    resume.fetch(cfg)
    assert resume.local_epoch(cfg.run_dir) == 5


def test_the_uploader_never_commits_an_epoch_older_than_the_hubs(
    hub: Hub, cfg: config.Config
) -> None:
    published(cfg, 2)
    commits = len(hub.repos["models/org/w"].commits)
    uploader = upload.Uploader(upload.Uploads.of(cfg))
    assert uploader.push() is False and uploader.behind
    assert "the Hub holds epoch 3 of run run, later than this volume's epoch 2" in (
        uploader.last_error
    )
    assert (
        upload.flush(upload.Uploads.of(cfg), uploader) == ExitCode.UPLOAD
    )  # at once, not after STOP_GRACE
    assert len(hub.repos["models/org/w"].commits) == commits
    assert hub_epochs(hub) == [HUB_EPOCH]


def test_a_commit_on_a_moved_branch_looks_again(hub: Hub, cfg: config.Config) -> None:
    published(cfg, 4)
    uploader = upload.Uploader(upload.Uploads.of(cfg))
    uploader.seen = resume.hub_epoch(
        cfg.output_repo, cfg.run_name, wait=3
    )  # what it read; then the branch moves:
    hub.add("org/w", {"other-run/status.json": b"{}\n"}, kind="models")  # another run's commit
    assert uploader.push() is True  # refused on the old parent (412), read again, committed
    assert len(hub.downloads("run/index.json")) == 2
    assert hub_epochs(hub) == [HUB_EPOCH, 4]
    published(cfg, 5)
    hub.add("org/w", {"run/last.pt": checkpoint(6), "run/index.json": b'{"epoch": 6}'},
            kind="models")  # another machine pushed epoch 6 of this very run meanwhile  # fmt: skip
    assert uploader.push() is False and uploader.behind
    assert hub_epochs(hub) == [HUB_EPOCH, 4, 6]


# The Xet rows: hf_xet's own routes (the write token, the CAS) failing under the two steps that
# upload. A cycle leaves the push to the next one (False, one line in the status); the final
# flush ends within STOP_GRACE with exit 7; a brief fault is waited out.
XET_FAULTS = {
    "token 5xx": {"path": "/xet-write-token/", "status": 503},
    "token hangs": {"path": "/xet-write-token/", "hang": 600.0},
    "CAS 5xx": {"path": "/cas/", "status": 503},
    "CAS hangs": {"path": "/cas/", "hang": 600.0},
    "xorb cut midway": {"path": "/cas/v1/xorbs/", "drop_after": 1000},
    "shard refused": {"path": "/cas/v2/shards", "status": 400},
}
XET_CASES = [(step, kind) for step in ("upload cycle", "final flush") for kind in XET_FAULTS]


@pytest.mark.parametrize(("step", "kind"), XET_CASES, ids=[f"{s}-{k}" for s, k in XET_CASES])
def test_a_xet_fault_leaves_the_push_to_the_next_try_and_weights_never_go_back(
    hub: Hub, cfg: config.Config, step: str, kind: str
) -> None:
    _, run, _, ended = STEPS[step]
    hub.faults.append(Fault(**XET_FAULTS[kind], seconds=LONG))
    limit = cfg.upload_interval if step == "upload cycle" else cfg.stop_grace
    # Bounded, whatever hf_xet does meanwhile (a hang lasts 600 s): the guard is far past the
    # step's own deadline, only there so that an unbounded step fails instead of hanging.
    assert finishes(lambda: outcome(lambda: run(cfg)), guard=limit + 30) == ended, (step, kind)
    assert hub_epochs(hub) == [HUB_EPOCH]
    if step == "upload cycle":
        assert upload.read_ledger(cfg.workspace, cfg.output_repo, cfg.run_name)["state"][
            "last_error"
        ]  # what `trainbox status` shows


def test_a_slow_upload_outlasts_the_cycle_and_a_stop_abandons_a_stuck_one(
    hub: Hub, cfg: config.Config
) -> None:
    """A cycle waits UPLOAD_INTERVAL for an unreachable Hub, but lets a transfer that moves
    (here 3 MB/s: longer than the cycle) finish; a stop gives up one that is stuck at once."""
    published(cfg, 4)
    hub.upload_rate = 3e6
    torch.save({"epoch": 3, "model": {"w": torch.randn(3_000_000)}},  # epoch 4, 12 MB
               cfg.run_dir / "weights" / "last.pt")  # fmt: skip
    publish.publish(cfg.run_dir, 4)
    # 12 MB at 3 MB/s: about 4 s, longer than the 3 s cycle by construction.
    assert cfg.upload_interval * hub.upload_rate < 12e6
    assert upload.Uploader(upload.Uploads.of(cfg)).push() is True
    hub.upload_rate = None
    published(cfg, 5)
    hub.faults.append(Fault("/cas/", hang=600.0, seconds=LONG))
    uploader, result = upload.Uploader(upload.Uploads.of(cfg)), []
    pushing = threading.Thread(target=lambda: result.append(uploader.push(wait=600)),
                               daemon=True)  # fmt: skip
    pushing.start()
    time.sleep(1)
    uploader.transfers.abandon()
    pushing.join(30)  # a guard: abandoned, it gives up at once (the hang lasts 600 s)
    assert not pushing.is_alive() and result == [False]
    assert uploader.last_error == "upload given up for the final upload"
    assert hub_epochs(hub) == [HUB_EPOCH, 4]


def test_a_brief_cas_fault_is_waited_out(hub: Hub, cfg: config.Config) -> None:
    hub.faults.append(Fault("/cas/", status=503, seconds=BRIEF))
    assert outcome(lambda: _flush(cfg)) == ExitCode.OK
    assert hub_epochs(hub) == [HUB_EPOCH, 4]


@pytest.mark.parametrize(("token", "status"), [(READ_TOKEN, 403), ("hf_wrong", 401)])
def test_a_refused_xet_token_fails_the_push_with_the_tokens_line(
    hub: Hub, cfg: config.Config, monkeypatch: pytest.MonkeyPatch, token: str, status: int
) -> None:
    monkeypatch.setenv("HF_TOKEN", token)
    uploader = upload.Uploader(upload.Uploads.of(cfg))  # its own Transfers: no Xet token held yet
    published(cfg, 4)
    assert uploader.push() is False
    assert f"the Hub refused HF_TOKEN for OUTPUT_REPO=org/w ({status})" in uploader.last_error
    assert hub_epochs(hub) == [HUB_EPOCH]


def test_an_unwritable_xet_cache_is_its_own_line_and_the_next_push_goes_on(
    hub: Hub, cfg: config.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub.utils import _xet

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("HF_XET_CACHE", str(blocker / "xet"))  # read when a session starts
    monkeypatch.setattr("huggingface_hub.constants.HF_XET_CACHE", str(blocker / "xet"))
    _xet._GLOBAL_XET_HOLDER.sigint_abort()  # the process's session: a new one reads it
    uploader = upload.Uploader(upload.Uploads.of(cfg))
    published(cfg, 4)
    assert uploader.push() is False
    assert "the xet cache" in uploader.last_error and str(blocker) in uploader.last_error
    monkeypatch.undo()
    _xet._GLOBAL_XET_HOLDER.sigint_abort()
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    client_at(monkeypatch, hub.url)
    assert uploader.push() is True  # the cache writable again: the same uploader goes on
    assert hub_epochs(hub) == [HUB_EPOCH, 4]
