"""Dataset staging from the Hub, end to end: the real `trainbox` command and the real
huggingface_hub client against the test Hub on 127.0.0.1."""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from entrypoint.errors import ExitCode
from tests.conftest import REPO, trainbox
from tests.dataset.conftest import REPO_ID, digests, env_for
from tests.standins.hub import GOOD_TOKEN, Fault, Hub


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A small YOLO dataset folder named like the repo."""
    demo.ensure(tmp_path / "src" / "shapes")
    return tmp_path / "src" / "shapes"


@pytest.fixture
def packed(hub: Hub, source: Path, tmp_path: Path) -> bytes:
    """The dataset packed by `trainbox dataset pack` into the test Hub; its tar bytes."""
    result = trainbox(
        "dataset",
        "pack",
        str(source),
        "--repo",
        REPO_ID,
        "--no-doctor",
        env=env_for(hub, tmp_path / "ws", HF_TOKEN=GOOD_TOKEN),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"DATASET_REPO={REPO_ID}", "DATASET_FILE=shapes.tar"]
    return hub.repos[f"datasets/{REPO_ID}"].files["shapes.tar"]


def stage(hub: Hub, workspace: Path, **extra: str):
    return trainbox("dataset", "stage", env=env_for(hub, workspace, **extra))


def test_pack_then_stage_round_trip(hub: Hub, source: Path, packed: bytes, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    result = stage(hub, workspace)
    assert result.returncode == 0, result.stderr
    data_yaml = Path(result.stdout.strip())
    assert data_yaml == workspace / "data" / "shapes" / "shapes" / "data.yaml"
    staged = data_yaml.parent
    assert digests(staged) == digests(source)
    assert yaml.safe_load(data_yaml.read_text())["path"] == str(staged)
    marker = json.loads((workspace / "data" / "shapes" / ".trainbox-dataset.json").read_text())
    assert marker["commit"] == hub.repos[f"datasets/{REPO_ID}"].commits[-1]
    assert marker["sha256"] == hashlib.sha256(packed).hexdigest()
    assert [p.name for p in (workspace / "data").iterdir()] == ["shapes"]


def test_a_second_stage_downloads_nothing_and_a_new_commit_replaces_the_copy(
    hub: Hub, source: Path, packed: bytes, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    assert stage(hub, workspace).returncode == 0
    again = stage(hub, workspace)
    assert again.returncode == 0, again.stderr
    assert "already staged" in again.stderr
    assert len(hub.downloads("shapes.tar")) == 1

    (source / "extra.txt").write_text("new in this commit\n")
    archive.pack(source, tmp_path / "new.tar")
    hub.add(REPO_ID, {"shapes.tar": (tmp_path / "new.tar").read_bytes()})
    newer = stage(hub, workspace)
    assert newer.returncode == 0, newer.stderr
    assert len(hub.downloads("shapes.tar")) == 2
    assert (workspace / "data/shapes/shapes/extra.txt").read_text() == "new in this commit\n"
    assert [p.name for p in (workspace / "data").iterdir()] == ["shapes"]


def test_a_dropped_connection_and_hub_errors_are_survived(
    hub: Hub, source: Path, packed: bytes, tmp_path: Path
) -> None:
    hub.faults += [
        Fault("shapes.tar", status=503, methods=("HEAD",)),
        Fault("shapes.tar", status=429, methods=("GET",)),
        Fault("shapes.tar", drop_after=len(packed) // 2, methods=("GET",)),
    ]
    result = stage(hub, tmp_path / "ws")
    assert result.returncode == 0, result.stderr
    assert len(hub.downloads("shapes.tar")) == 3  # 429, cut halfway, resumed with a Range
    assert digests(Path(result.stdout.strip()).parent) == digests(source)


def test_a_staging_killed_midway_resumes_at_its_last_checkpoint(
    hub: Hub, source: Path, tmp_path: Path
) -> None:
    (source / "blobs").mkdir()
    for i in range(24):  # 12 MB that does not compress
        (source / "blobs" / f"{i}.bin").write_bytes(os.urandom(512 * 1024))
    archive.pack(source, tmp_path / "shapes.tar")
    data = (tmp_path / "shapes.tar").read_bytes()
    hub.add(REPO_ID, {"shapes.tar": data})
    hub.rate = 3_000_000  # about 4 s for the whole tar
    workspace = tmp_path / "ws"
    env = {**os.environ, **env_for(hub, workspace, STAGE_CHECKPOINT="1")}
    resume_file = workspace / "data" / ".shapes.partial" / ".trainbox-resume.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "dataset", "stage"], env=env, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60

    def checkpoint() -> dict:
        try:
            return json.loads(resume_file.read_text())["shards"]["shapes.tar"]
        except (OSError, KeyError):
            return {"offset": 0}

    while checkpoint()["offset"] < 4e6:
        assert time.monotonic() < deadline and first.poll() is None, "no checkpoint in time"
        time.sleep(0.05)
    first.kill()  # SIGKILL: no cleanup of any kind
    first.wait()
    point = checkpoint()

    hub.rate = None
    result = stage(hub, workspace, STAGE_CHECKPOINT="1")
    assert result.returncode == 0, result.stderr
    assert f"resuming at byte {point['offset']} ({point['members']} files" in result.stderr
    (_, start, _), (_, resumed_at, sent) = [s for s in hub.served if s[0] == "shapes.tar"]
    assert (start, resumed_at, sent) == (0, point["offset"], len(data) - point["offset"])
    assert digests(Path(result.stdout.strip()).parent) == digests(source)
    marker = json.loads((workspace / "data" / "shapes" / ".trainbox-dataset.json").read_text())
    assert marker["sha256"] == hashlib.sha256(data).hexdigest()
    assert not resume_file.exists()
    assert not list((workspace / "data").rglob(".trainbox-resume.json"))
    assert [p.name for p in (workspace / "data").iterdir()] == ["shapes"]


def test_an_unreachable_hub_trains_on_the_staged_copy(
    hub: Hub, packed: bytes, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    first = stage(hub, workspace)
    hub.faults.append(Fault("shapes.tar", status=503, times=99))
    result = stage(hub, workspace)
    assert result.returncode == 0, result.stderr
    assert result.stdout == first.stdout
    assert "training on the copy staged from commit" in result.stderr


def test_a_private_repo_reads_the_token_from_a_file_and_never_shows_it(
    hub: Hub, source: Path, tmp_path: Path
) -> None:
    archive.pack(source, tmp_path / "shapes.tar")
    hub.add(REPO_ID, {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()}, private=True)
    (tmp_path / "token").write_text(GOOD_TOKEN + "\n")
    workspace = tmp_path / "ws"
    result = stage(hub, workspace, HF_TOKEN_FILE=str(tmp_path / "token"))
    assert result.returncode == 0, result.stderr
    assert GOOD_TOKEN not in result.stdout + result.stderr
    for path in workspace.rglob("*"):
        assert not path.is_file() or GOOD_TOKEN.encode() not in path.read_bytes(), path


def tar_of(*members: tuple[str, bytes | str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            if isinstance(payload, str):
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


GOOD = tar_of(("shapes/data.yaml", b"names: {0: a}\n"), ("shapes/x.txt", b"x" * 20000))
BAD_INPUTS = {
    "bad token": ({"HF_TOKEN": "hf_wrong"}, GOOD, "the Hub refused HF_TOKEN"),
    "repo not found": ({"DATASET_REPO": "org/nope"}, GOOD, "DATASET_REPO=org/nope: not found"),
    "gated repo": ({}, "gated", "gated; accept its conditions"),
    "file not in repo": (
        {"DATASET_FILE": "other.tar"},
        GOOD,
        "DATASET_FILE=other.tar: not in org/shapes at main",
    ),
    "unknown revision": (
        {"DATASET_REVISION": "v9"},
        GOOD,
        "DATASET_REVISION=v9: no such branch, tag or commit",
    ),
    "truncated tar": ({}, GOOD[:15000], "truncated or corrupt"),
    "corrupt tar": ({}, b"\x1f\x8b" + bytes(range(256)) * 40, "truncated or corrupt"),
    "dot-dot": ({}, tar_of(("shapes/../../evil", b"x")), "has an absolute path or '..'"),
    "absolute": ({}, tar_of(("/tmp/evil", b"x")), "has an absolute path or '..'"),
    "escaping link": ({}, tar_of(("shapes/l", "../../../etc")), "links outside"),
    "no data.yaml": ({}, tar_of(("shapes/x.txt", b"x")), "holds no data.yaml"),
    "bad token file": ({"HF_TOKEN_FILE": "/nonexistent"}, GOOD, "HF_TOKEN_FILE=/nonexistent"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_each_bad_input_is_one_line_a_code_and_an_untouched_volume(
    hub: Hub, tmp_path: Path, case: str
) -> None:
    extra, payload, line = BAD_INPUTS[case]
    gated = payload == "gated"
    hub.add(REPO_ID, {"shapes.tar": GOOD if gated else payload}, gated=gated)
    workspace = tmp_path / "ws"
    (workspace / "data" / "kept").mkdir(parents=True)
    (workspace / "data" / "kept" / "file").write_text("from an earlier run\n")
    before = tree(workspace)
    result = stage(hub, workspace, **extra)
    expected = (
        ExitCode.CONFIG if "TOKEN_FILE" in case.upper().replace(" ", "_") else ExitCode.DATASET
    )
    assert result.returncode == expected, result.stderr
    [message] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert line in message
    assert tree(workspace) == before


def test_pack_stage_doctor_train_round_trip_on_the_host(
    hub: Hub, source: Path, packed: bytes, tmp_path: Path
) -> None:
    """`trainbox run` outside Docker: stage from the test Hub, doctor, train on the CPU."""
    workspace = tmp_path / "ws"
    settings = {
        "DOCTOR": "true", "DEVICE": "cpu", "MODEL": "LibreYOLO9t.pt", "PRETRAINED": "false",
        "EPOCHS": "1", "BATCH": "8", "IMGSZ": "128", "WORKERS": "0", "RUN_NAME": "host",
        "MONITOR_HOST": "127.0.0.1",
    }  # fmt: skip
    result = trainbox("run", env=env_for(hub, workspace, **settings), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    staged = workspace / "data" / "shapes" / "shapes"
    assert digests(staged) == digests(source)
    assert "doctor: the dataset is healthy" in result.stderr
    run = workspace / "runs" / "host"
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    assert (
        str(staged / "data.yaml") in yaml.safe_load((run / "train_config.yaml").read_text())["data"]
    )
    assert (run / "weights" / "best.pt").stat().st_size > 1_000_000
    assert len(hub.downloads("shapes.tar")) == 1


def test_a_stalled_staging_on_another_node_ends_that_node_by_its_own_watchdog(
    hub: Hub, source: Path, packed: bytes, tmp_path: Path
) -> None:
    """Node 1 of a two-machine job keeps its own status and watchdogs (it used to bill
    forever): its stuck download ends with exit 9, and its health check says why."""
    hub.faults.append(Fault("shapes.tar", stall_after=len(packed) // 2, times=99, methods=("GET",)))
    workspace = tmp_path / "node1"
    settings = {
        "DEVICE": "cpu",
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NODE_RANK": "1",
        "OUTPUT_REPO": "org/weights",
        "HF_TOKEN": GOOD_TOKEN,
        "STALL_TIMEOUT": "6",
        "NODE_RANK": "",
        "NNODES": "",
        "MODEL": "LibreYOLO9t.pt",
        "PRETRAINED": "false",
    }  # fmt: skip  (no start weights: the test Hub has none)
    result = trainbox("run", env=env_for(hub, workspace, **settings), timeout=120)
    assert result.returncode == ExitCode.STALLED, result.stderr[-3000:]  # its own watchdog
    own = json.loads((workspace / "trainbox" / "status-node1.json").read_text())
    assert (own["phase"], own["exit_code"]) == ("failed", ExitCode.STALLED)
    assert "during staging" in own["reason"]
    assert not (workspace / "trainbox" / "status.json").exists()  # node 0's is not touched
    health = trainbox("status", "--health", "--workspace", str(workspace),
                      env={"SKYPILOT_NODE_RANK": "1", "NODE_RANK": ""})  # fmt: skip
    assert health.returncode == 1 and "unhealthy: failed: no progress" in health.stdout
