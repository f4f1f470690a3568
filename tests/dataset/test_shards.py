"""Sharded datasets through the real `trainbox` command and the test Hub: pack, stage in
parallel, resume each shard at its own checkpoint, fail without touching the staged copy."""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from entrypoint.dataset.packed import shards
from entrypoint.errors import ExitCode
from tests.conftest import REPO, trainbox
from tests.dataset.conftest import digests
from tests.dataset.conftest import env_for as dataset_env
from tests.standins.hub import GOOD_TOKEN, Fault, Hub

REPO_ID = "org/big"
MIB = 1 << 20
BLOCK = 512


def env_for(hub: Hub, workspace: Path, **extra: str) -> dict[str, str]:
    """test_dataset's settings, for this module's repo, with a token that writes."""
    mine = {"DATASET_REPO": REPO_ID, "HF_TOKEN": GOOD_TOKEN, "DATASET_FILE": ""}
    return dataset_env(hub, workspace, **{**mine, **extra})


def pack(hub: Hub, folder: Path, tmp_path: Path, *args: str, **extra: str):
    return trainbox("dataset", "pack", str(folder), "--repo", REPO_ID, "--no-doctor", *args,
                    env=env_for(hub, tmp_path / "packer", **extra))  # fmt: skip


def stage(hub: Hub, workspace: Path, **extra: str):
    return trainbox("dataset", "stage", env=env_for(hub, workspace, **extra))


def files_of(hub: Hub) -> dict[str, bytes]:
    return hub.repos[f"datasets/{REPO_ID}"].files


def index_of(hub: Hub) -> dict:
    return json.loads(files_of(hub)["big.shards.json"])


@pytest.fixture
def boundary(tmp_path: Path) -> Path:
    """A folder for 1 MiB shards: the first shard's members (data.yaml, images/, images/a.bin,
    each a 512-byte header and its data in whole blocks) take exactly 1 MiB; b.bin is larger
    than a shard; then a few small files."""
    folder = tmp_path / "src" / "big"
    (folder / "images").mkdir(parents=True)
    (folder / "data.yaml").write_text("names: {0: a}\n")  # header + 1 block
    (folder / "images" / "a.bin").write_bytes(os.urandom(MIB - 4 * BLOCK))  # ends at 1 MiB
    (folder / "images" / "b.bin").write_bytes(os.urandom(3 * MIB + 5))
    (folder / "labels").mkdir()
    for name in "cde":
        (folder / "labels" / f"{name}.txt").write_text(f"0 0.5 0.5 0.1 0.{name == 'c'}\n" * 999)
    return folder


def test_pack_then_stage_round_trip_with_a_file_at_the_boundary_and_one_too_large(
    hub: Hub, boundary: Path, tmp_path: Path
) -> None:
    packed = pack(hub, boundary, tmp_path, "--shard-size", "1MiB")
    assert packed.returncode == 0, packed.stderr
    assert packed.stdout.splitlines() == [f"DATASET_REPO={REPO_ID}", "DATASET_FILE=big.shards.json"]
    index = index_of(hub)
    assert [s["file"] for s in index["shards"]] == ["big-00000.tar", "big-00001.tar",
                                                    "big-00002.tar"]  # fmt: skip
    held = files_of(hub)
    assert "big.tar" not in held
    members = []
    for shard in index["shards"]:
        data = held[shard["file"]]
        assert len(data) == shard["size"]
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # each one opens alone
            members.append(tar.getnames())
    assert members[0] == ["big/data.yaml", "big/images", "big/images/a.bin"]
    assert members[1] == ["big/images/b.bin"]  # larger than a shard: alone
    assert members[2] == ["big/labels", "big/labels/c.txt", "big/labels/d.txt", "big/labels/e.txt"]
    assert [s["members"] for s in index["shards"]] == [3, 1, 4]

    workspace = tmp_path / "ws"
    result = stage(hub, workspace, STAGE_PARALLEL="2")
    assert result.returncode == 0, result.stderr
    staged = Path(result.stdout.strip()).parent
    assert staged == workspace / "data" / "big" / "big"
    assert digests(staged) == digests(boundary)
    assert "in 3 shards, 2 at once" in result.stderr
    assert "download+extract big.shards.json" in result.stderr  # one progress line for all
    assert "download+extract big-0" not in result.stderr
    marker = json.loads((workspace / "data/big/.trainbox-dataset.json").read_text())
    assert (marker["file"], marker["shards"], marker["members"]) == ("big.shards.json", 3, 8)
    assert marker["sha256"] == hashlib.sha256(held["big.shards.json"]).hexdigest()
    assert [p.name for p in (workspace / "data").iterdir()] == ["big"]
    again = stage(hub, workspace)
    assert again.returncode == 0 and "already staged" in again.stderr
    assert len([s for s in hub.served if s.name.endswith(".tar")]) == 3


def uploads(hub: Hub) -> int:
    """Files the Hub has received: a Xet shard registers one upload's files, an LFS PUT one."""
    return len([1 for method, path in hub.requests if (path.startswith("/cas/v") and
                path.endswith("/shards")) or method == "PUT"])  # fmt: skip


def test_a_pack_cut_midway_goes_on_and_switching_layouts_leaves_one(
    hub: Hub, boundary: Path, tmp_path: Path
) -> None:
    single = pack(hub, boundary, tmp_path)  # 4.2 MB, under the default 10GB: one tar
    assert single.returncode == 0 and single.stdout.endswith("DATASET_FILE=big.tar\n")
    commits = len(hub.repos[f"datasets/{REPO_ID}"].commits)
    # The Hub takes two shard commits, then answers 503: HUB_WAIT=1 gives up fast, exit 5.
    hub.faults += [Fault("/commit/main", times=2, methods=("POST",)),
                   Fault("/commit/main", status=503, seconds=600, methods=("POST",))]  # fmt: skip
    cut = pack(hub, boundary, tmp_path, "--shard-size", "1MiB", HUB_WAIT="1")
    assert cut.returncode == ExitCode.HUB, cut.stderr
    assert len(hub.repos[f"datasets/{REPO_ID}"].commits) == commits + 2
    assert "big.shards.json" not in files_of(hub)  # the index comes last: nothing half-found
    hub.faults.clear()
    sent = uploads(hub)
    resumed = pack(hub, boundary, tmp_path, "--shard-size", "1MiB")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("already on the Hub") == 2
    assert uploads(hub) == sent + 1  # the third tar alone
    assert set(files_of(hub)) == {
        "big.shards.json",
        "big-00000.tar",
        "big-00001.tar",
        "big-00002.tar",
    }  # fmt: skip  (big.tar deleted)
    back = pack(hub, boundary, tmp_path)
    assert back.returncode == 0, back.stderr
    assert set(files_of(hub)) == {"big.tar"}


def test_packing_holds_one_shard_on_disk_at_a_time(
    hub: Hub, boundary: Path, tmp_path: Path
) -> None:
    """Each shard is written, uploaded and deleted before the next: the pack's scratch never
    holds two (sampled while each commit is held up for half a second)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    hub.faults.append(Fault("/commit/main", hang=0.5, times=99, methods=("POST",)))
    most, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            most[0] = max(most[0], len(list(scratch.glob("trainbox-pack-*/*.tar"))))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        packed = pack(hub, boundary, tmp_path, "--shard-size", "1MiB", TMPDIR=str(scratch))
    finally:
        done.set()
        sampler.join()
    assert packed.returncode == 0, packed.stderr
    assert most[0] == 1
    assert list(scratch.iterdir()) == []


def test_a_file_over_the_hubs_limit_is_refused_before_any_shard_is_written(
    hub: Hub, tmp_path: Path
) -> None:
    """A sparse 50 GB file (no disk used): one line and exit 3 at once, nothing uploaded."""
    folder = tmp_path / "src" / "big"
    folder.mkdir(parents=True)
    (folder / "data.yaml").write_text("names: {0: a}\n")
    with open(folder / "huge.bin", "wb") as huge:
        huge.truncate(shards.MAX_FILE + 1)
    packed = pack(hub, folder, tmp_path)
    assert packed.returncode == ExitCode.DATASET, packed.stderr
    line = packed.stderr.strip().splitlines()[-1]
    assert line.endswith(f"{folder}/huge.bin: 50.00 GB, over the Hub's 50 GB per file; split it")
    assert not any(method == "POST" for method, _ in hub.requests)  # refused before any upload


def many_shards(hub: Hub, tmp_path: Path, count: int, size: int) -> Path:
    """A folder packed into ``count`` shards of about ``size`` bytes (512 KB random files)."""
    folder = tmp_path / "src" / "big"
    folder.mkdir(parents=True)
    (folder / "data.yaml").write_text("names: {0: a}\n")
    for shard in range(count):
        (folder / f"part{shard}").mkdir()
        for index in range(size // (512 * 1024)):
            (folder / f"part{shard}" / f"{index}.bin").write_bytes(os.urandom(512 * 1024 - 2048))
    packed = pack(hub, folder, tmp_path, "--shard-size", str(size))
    assert packed.returncode == 0, packed.stderr
    assert len(index_of(hub)["shards"]) == count
    return folder


def test_a_parallel_staging_killed_midway_resumes_each_shard_at_its_own_checkpoint(
    hub: Hub, tmp_path: Path
) -> None:
    folder = many_shards(hub, tmp_path, count=6, size=4 * MIB)
    # Per connection: about 8 s a shard, so that four shards are past 1.5 MB and not done for
    # about 5 s (at 4 s a shard, a 2.5 s window less the checkpoints' second: once, on a 2-core
    # machine loaded by two test runs, the staging ended before the test saw four of them).
    hub.rate = 500_000
    workspace = tmp_path / "ws"
    env = {**os.environ, **env_for(hub, workspace, STAGE_CHECKPOINT="1", STAGE_PARALLEL="4")}
    resume_file = workspace / "data" / ".big.partial" / ".trainbox-resume.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "dataset", "stage"], env=env, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def points() -> dict:
        try:
            return json.loads(resume_file.read_text())["shards"]
        except (OSError, ValueError):
            return {}

    deadline = time.monotonic() + 60
    while len([p for p in points().values() if p.get("offset", 0) > 1.5e6]) < 4:
        assert time.monotonic() < deadline and first.poll() is None, "no checkpoints in time"
        time.sleep(0.05)
    first.kill()  # SIGKILL: no cleanup of any kind
    first.wait()
    saved = points()
    cut = {name: p["offset"] for name, p in saved.items() if not p.get("done")}
    assert len(cut) >= 4  # four shards were streaming at once, each with its own checkpoint

    hub.rate = None
    served_before = len(hub.served)
    result = stage(hub, workspace, STAGE_CHECKPOINT="1", STAGE_PARALLEL="4")
    assert result.returncode == 0, result.stderr
    assert f"{len(cut)} at their last checkpoint" in result.stderr
    again = {s.name: s.start for s in hub.served[served_before:]}
    for name, offset in cut.items():
        assert again[name] == offset > 0, name  # a Range request from its own checkpoint
    done = {name for name, p in saved.items() if p.get("done")}
    assert not done & again.keys()  # a finished shard is not fetched again
    assert digests(Path(result.stdout.strip()).parent) == digests(folder)
    assert not resume_file.exists() and not resume_file.parent.exists()


def test_a_corrupt_shard_fails_with_exit_3_and_leaves_the_staged_copy(
    hub: Hub, tmp_path: Path
) -> None:
    folder = many_shards(hub, tmp_path, count=3, size=2 * MIB)
    workspace = tmp_path / "ws"
    assert stage(hub, workspace).returncode == 0
    before = digests(workspace / "data" / "big" / "big")
    marker = (workspace / "data" / "big" / ".trainbox-dataset.json").read_text()
    damaged = bytearray(files_of(hub)["big-00001.tar"])
    damaged[len(damaged) // 2] ^= 0xFF  # a flipped bit: same size, another sha256
    hub.add(REPO_ID, {"big-00001.tar": bytes(damaged)})
    result = stage(hub, workspace)
    assert result.returncode == ExitCode.DATASET, result.stderr
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert "big-00001.tar: the download does not match the Hub's size and sha256" in line
    assert digests(workspace / "data" / "big" / "big") == before == digests(folder)
    assert (workspace / "data" / "big" / ".trainbox-dataset.json").read_text() == marker
    assert [p.name for p in (workspace / "data").iterdir()] == ["big"]


def test_free_space_is_checked_for_all_shards_before_any_download(hub: Hub, tmp_path: Path) -> None:
    listed = [{"file": f"big-{n:05d}.tar", "size": 10**14, "sha256": "0" * 64, "members": 1}
              for n in range(3)]  # fmt: skip
    hub.add(REPO_ID, {"big.shards.json": shards.make_index("big", 10**14, listed)})
    workspace = tmp_path / "ws"
    result = stage(hub, workspace)
    assert result.returncode == ExitCode.DISK, result.stderr
    assert "the dataset needs about 345000.00 GB more" in result.stderr
    assert not [s for s in hub.served if s.name.endswith(".tar")]

    plan = trainbox("plan", "disk", "--dataset-repo", REPO_ID, "--checkpoint-mb", "1",
                    "--start-mb", "0", env=env_for(hub, workspace))  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "dataset      big.shards.json: 300000.000 GB in 3 shards" in plan.stdout
    assert not [s for s in hub.served if s.name.endswith(".tar")]


@pytest.mark.parametrize(
    ("files", "extra", "line"),
    [
        ({"other.csv": b"x"}, {},
         "DATASET_REPO=org/big: no dataset form found at main (1 file(s): other.csv)"),
        ({"big.shards.json": b"{}"}, {}, "DATASET_FILE=big.shards.json: not a shard index"),
        ({"x.shards.json": b'{"format": "trainbox-shards", "version": 1, "shards": '
          b'[{"file": "../x.tar", "size": 1, "sha256": "' + b"0" * 64 + b'"}]}'},
         {"DATASET_FILE": "x.shards.json"}, "bad shard name '../x.tar'"),
    ],
    ids=["neither", "not an index", "bad name"],
)  # fmt: skip
def test_a_bad_index_is_one_line_and_exit_3(
    hub: Hub, tmp_path: Path, files: dict, extra: dict, line: str
) -> None:
    hub.add(REPO_ID, files)
    result = stage(hub, tmp_path / "ws", **extra)
    assert result.returncode == ExitCode.DATASET, result.stderr
    [message] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert line in message


def test_shard_sizes_are_read_as_people_write_them(
    hub: Hub, boundary: Path, tmp_path: Path
) -> None:
    assert shards.parse_size("10GB") == 10**10
    assert shards.parse_size("1.5GiB") == 3 * 2**29
    assert shards.parse_size("500mb") == 5 * 10**8
    bad = pack(hub, boundary, tmp_path, "--shard-size", "60GB")
    assert bad.returncode == ExitCode.CONFIG
    assert "at most 50GB" in bad.stderr
    assert f"datasets/{REPO_ID}" not in hub.repos
