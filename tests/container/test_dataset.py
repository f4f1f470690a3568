"""A Hub dataset in the real container: pack, stage, doctor, train, and staging only once."""

import base64
import json
from pathlib import Path

import pytest

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from entrypoint.errors import ExitCode
from tests.conftest import tar_on_hub
from tests.container.conftest import TRAIN, docker, in_volume, run_container
from tests.standins.hub import GOOD_TOKEN, Hub
from tests.standins.webhook import Webhook

pytestmark = pytest.mark.container

# A Hub dataset drops the demo preset: train the same tiny model from scratch.
TINY = {"DEVICE": "cpu", "MODEL": "LibreYOLO9t.pt", "PRETRAINED": "false", "EPOCHS": "1",
        "IMGSZ": "128", "BATCH": "8", "WORKERS": "0", "EVALUATE": "none"}  # fmt: skip


def hub_env(hub: Hub, **extra: str) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, **TINY, **extra}


def test_pack_stage_and_train_from_the_hub(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    demo.ensure(tmp_path / "shapes")
    pack = docker(
        "run", "--rm", "--network", "host", "-v", f"{tmp_path / 'shapes'}:/pack/shapes:ro",
        "-e", f"HF_ENDPOINT={hub.url}",
        "-e", f"HF_TOKEN={GOOD_TOKEN}", image,
        "dataset", "pack", "/pack/shapes", "--repo", "org/shapes", "--private",
    )  # fmt: skip
    assert pack.returncode == 0, pack.stderr[-3000:]
    assert pack.stdout.splitlines() == ["DATASET_REPO=org/shapes", "DATASET_FILE=shapes.tar"]
    assert GOOD_TOKEN not in pack.stdout + pack.stderr

    env = hub_env(hub, DATASET_REPO="org/shapes", HF_TOKEN=GOOD_TOKEN)
    first = run_container(image, volume, env=env)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert "doctor: the dataset is healthy" in first.stderr
    assert "epoch 1/1 done" in first.stdout
    status = json.loads(in_volume(image, volume, "cat", "/workspace/runs/run/status.json"))
    assert status["state"] == "completed"

    second = run_container(image, volume, env={**env, "RUN_NAME": "again"})
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert "already staged" in second.stderr
    assert len(hub.downloads("shapes.tar")) == 1
    assert GOOD_TOKEN not in in_volume(
        image, volume, "sh", "-c", "cat -v $(find /workspace -type f -size -1M)"
    )


def test_a_sharded_dataset_stages_in_parallel_passes_doctor_and_trains(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    demo.ensure(tmp_path / "shapes")  # 1.5 MB: two shards of at most 1 MB
    pack = docker(
        "run", "--rm", "--network", "host", "-v", f"{tmp_path / 'shapes'}:/pack/shapes:ro",
        "-e", f"HF_ENDPOINT={hub.url}",
        "-e", f"HF_TOKEN={GOOD_TOKEN}", image,
        "dataset", "pack", "/pack/shapes", "--repo", "org/shapes", "--shard-size", "1MB",
    )  # fmt: skip
    assert pack.returncode == 0, pack.stderr[-3000:]
    assert pack.stdout.splitlines() == [
        "DATASET_REPO=org/shapes",
        "DATASET_FILE=shapes.shards.json",
    ]
    index = json.loads(hub.repos["datasets/org/shapes"].files["shapes.shards.json"])
    assert len(index["shards"]) == 2

    result = run_container(image, volume, env=hub_env(hub, DATASET_REPO="org/shapes"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "in 2 shards, 2 at once" in result.stderr
    assert "doctor: the dataset is healthy" in result.stderr
    assert "epoch 1/1 done" in result.stdout
    fetched = sorted(s.name for s in hub.served if s.name.endswith(".tar"))
    assert fetched == ["shapes-00000.tar", "shapes-00001.tar"]  # each once, no single tar


def test_doctor_errors_stop_the_run_and_leave_the_volume_as_it_was(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    demo.ensure(tmp_path / "shapes")
    (tmp_path / "shapes" / "labels" / "train" / "0000.txt").write_text("7 0.5 0.5 3.0 3.0\n")
    archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
    hub.add("org/shapes", {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()})
    result = run_container(image, volume, env=hub_env(hub, DATASET_REPO="org/shapes"))
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert "libreyolo doctor found 2 error(s)" in line and "DOCTOR=false" in line
    assert in_volume(image, volume, "find", "/workspace/data").split() == ["/workspace/data"]


def test_not_enough_disk_stops_before_downloading(image: str, hub: Hub, tmp_path: Path) -> None:
    tar_on_hub(hub, "org/big", tmp_path / "big", 8_000_000)
    result = docker(
        "run", "--rm", "--network", "host", "--mount",
        "type=tmpfs,destination=/workspace,tmpfs-size=4000000",
        *[f for k, v in hub_env(hub, DATASET_REPO="org/big").items() for f in ("-e", f"{k}={v}")],
        image,
    )  # fmt: skip
    assert result.returncode == ExitCode.DISK, result.stderr[-3000:]
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert "not enough space on /workspace for the whole run: it will still write" in line
    assert "(dataset 0.01 GB, " in line  # 8 MB of tar and 15%, with what training writes
    assert hub.downloads("big.tar") == []


@pytest.mark.parametrize("published", ["parquet", "roboflow zip", "coco folder", "yolo files"])
def test_a_dataset_as_published_on_the_hub_trains(
    image: str, volume: str, hub: Hub, tmp_path: Path, published: str
) -> None:
    """DATASET_REPO alone, the dataset made by the tools that make them: ``datasets``'
    push_to_hub (detection, a ``validation`` split), a Roboflow YOLO export zipped, a COCO
    folder (category ids from 1) and a YOLO folder uploaded by the Hub client; the labels
    LibreYOLO reads are the published boxes, the classes in the dataset's order."""
    from tests.dataset.published import NAMES, centres, detections

    splits = {"train": detections(16, 21), "validation": detections(4, 22)}
    _publish(published, hub, tmp_path, splits)
    scored = published == "parquet"  # the result is checked on one form: EVALUATE=auto there
    env = hub_env(hub, DATASET_REPO="org/det", **({"EVALUATE": "auto"} if scored else {}))
    result = run_container(image, volume, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "doctor: the dataset is healthy" in result.stderr
    assert "epoch 1/1 done" in result.stdout
    lines = in_volume(image, volume, "sh", "-c", "cat $(find /workspace/data/det -path "
                      "'*/labels/*' -name '*.txt')").split("\n")  # fmt: skip
    boxes = [[float(v) for v in line.split()] for line in lines if line.strip()]
    count, total = centres(splits["train"] + splits["validation"])
    assert len(boxes) == count
    assert sum(b[1] + b[2] for b in boxes) == pytest.approx(total, abs=1e-3)
    names = in_volume(image, volume, "sh", "-c", "cat $(find /workspace/data/det -name data.yaml)")
    assert f"names:\n- {NAMES[0]}\n- {NAMES[1]}\n- {NAMES[2]}" in names
    if scored:  # no test split: a validation score, never called a test score
        evaluated = card_scores(image, volume)
        assert set(evaluated) == {"validation"} and "mAP50-95" in evaluated["validation"]


def card_scores(image: str, volume: str) -> dict[str, dict[str, float]]:
    """The scores the card of the volume's run claims (``trainbox card``), by split."""
    from huggingface_hub import ModelCard

    text = in_volume(image, volume, "trainbox", "card")
    scores: dict[str, dict[str, float]] = {}
    for each in ModelCard(text).data.eval_results or []:
        scores.setdefault(each.dataset_split, {})[each.metric_type] = each.metric_value
    return scores


def _publish(published: str, hub: Hub, tmp_path: Path, splits: dict[str, list[dict]]) -> None:
    """``splits`` on the test Hub as ``org/det``, in the ``published`` form."""
    import shutil

    from tests.dataset.published import coco_folder, push_detection, roboflow_yolo, upload_folder

    if published == "parquet":
        push_detection(hub, "org/det", splits)
        return
    renamed = {"train": splits["train"], "valid" if "roboflow" in published or "yolo" in published
               else "val": splits["validation"]}  # fmt: skip
    if published == "coco folder":
        upload_folder(hub, "org/det", coco_folder(tmp_path / "coco", renamed, ids=[1, 4, 9]))
        return
    export = roboflow_yolo(tmp_path / "export", renamed)
    if published == "yolo files":
        upload_folder(hub, "org/det", export)
        return
    (tmp_path / "up").mkdir()
    shutil.make_archive(str(tmp_path / "up" / "det.v1i.yolov8"), "zip", export)
    upload_folder(hub, "org/det", tmp_path / "up")


def test_a_classification_set_pushed_by_datasets_trains_a_classifier(
    image: str, volume: str, hub: Hub
) -> None:
    """``push_to_hub`` of images with a ``label`` ClassLabel: one folder per class, every
    image in its class's folder, and a classifier trains an epoch from them."""
    from tests.dataset.published import NAMES, picture, push_classification

    splits = {s: [(picture(seed * 100 + i), i % 3) for i in range(n)]
              for s, seed, n in (("train", 1, 12), ("validation", 2, 6))}  # fmt: skip
    push_classification(hub, "org/cls", splits)
    env = hub_env(hub, DATASET_REPO="org/cls", MODEL="libremobilenetv4s-cls.pt", IMGSZ="64",
                  EVALUATE="auto")  # fmt: skip
    result = run_container(image, volume, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "epoch 1/1 done" in result.stdout
    found = in_volume(image, volume, "sh", "-c", "cd /workspace/data/cls && "
                      "for f in */*/*; do echo $f; done").split()  # fmt: skip
    counted = {(path.split("/")[0], path.split("/")[1]) for path in found}
    assert counted == {(s, n) for s in ("train", "val") for n in NAMES}
    for split, rows in (("train", splits["train"]), ("val", splits["validation"])):
        for index, name in enumerate(NAMES):
            mine = [p for p in found if p.startswith(f"{split}/{name}/")]
            assert len(mine) == sum(1 for _, c in rows if c == index), (split, name)
    written = json.loads(in_volume(image, volume, "cat", "/workspace/runs/run/evaluation/val.json"))
    assert written["images"] == len(splits["validation"])
    top1 = card_scores(image, volume)["validation"]["accuracy_top1"]
    assert top1 == written["metrics"]["metrics/accuracy_top1"]


def test_a_dataset_repo_that_does_not_exist_is_one_message_with_no_secret(
    image: str, volume: str, hub: Hub
) -> None:
    """NOTIFY hears a failure at staging once: the exit code and the repo, the same words as
    the last line; the webhook's password is in no output, no file and no message."""
    with Webhook("me", "s3cret-hook-pw") as hook:
        env = {**TRAIN, "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
               "DATASET_REPO": "org/nothing", "NOTIFY": hook.url}  # fmt: skip
        result = run_container(image, volume, env=env)
    logs = result.stdout + result.stderr
    assert result.returncode == ExitCode.DATASET, logs[-3000:]
    [message] = hook.messages
    assert message["title"] == "trainbox: run failed (exit 3)"
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert message["message"] == "exit 3: " + line.removeprefix("[trainbox] error: ")
    assert "DATASET_REPO=org/nothing" in message["message"]
    assert hook.auth == ["Basic " + base64.b64encode(b"me:s3cret-hook-pw").decode()]
    holding = in_volume(image, volume, "sh", "-c", "grep -rlF s3cret-hook-pw /workspace /tmp; true")
    assert "s3cret-hook-pw" not in logs + holding + json.dumps(hook.messages)
