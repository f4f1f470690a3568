"""Datasets as they are published on the Hub, staged with DATASET_REPO alone: the real
``datasets`` library pushes them to the test Hub, the real ``trainbox`` command stages them,
and what LibreYOLO will read is checked against what was published."""

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from PIL import Image

from entrypoint.dataset import forms
from entrypoint.dataset.published import boxes, images, layout, parquet
from entrypoint.errors import ExitCode, TrainboxError
from tests.conftest import REPO
from tests.dataset.conftest import env_for
from tests.dataset.published import (
    NAMES,
    H,
    W,
    centres,
    coco_folder,
    detections,
    picture,
    push_classification,
    push_detection,
    roboflow_yolo,
    upload_folder,
    yolo_labels,
)  # fmt: skip
from tests.standins.hub import Fault, Hub

DET = "org/det"


def stage(hub: Hub, workspace: Path, repo: str, **extra: str) -> subprocess.CompletedProcess:
    env = env_for(hub, workspace, DATASET_REPO=repo, **extra)
    return subprocess.run([sys.executable, "-m", "entrypoint", "dataset", "stage"], env=env,
                          capture_output=True, text=True, cwd=REPO)  # fmt: skip


def error_line(result: subprocess.CompletedProcess) -> str:
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    return line


@pytest.mark.parametrize("listed", [False, True], ids=["struct of lists", "list of structs"])
def test_a_pushed_detection_set_stages_as_yolo_labels(
    hub: Hub, tmp_path: Path, listed: bool
) -> None:
    train, validation = detections(12, 1), detections(5, 2)
    push_detection(hub, DET, {"train": train, "validation": validation}, listed=listed)
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == 0, result.stderr[-3000:]
    root = tmp_path / "ws" / "data" / "det"
    spec = yaml.safe_load((root / "data.yaml").read_text())
    assert spec["names"] == NAMES and spec["nc"] == 3  # the ClassLabel's order, not sorted
    assert (spec["train"], spec["val"], spec["path"]) == ("images/train", "images/val", str(root))
    for split, rows in (("train", train), ("val", validation)):
        labels = yolo_labels(root / "labels" / split)
        lines = [line for found in labels.values() for line in found]
        count, total = centres(rows)
        assert len(lines) == count
        assert sum(x + y for _, x, y, _, _ in lines) == pytest.approx(total, abs=1e-3)
        published = sorted(c for r in rows for c in r["category"])
        assert sorted(int(line[0]) for line in lines) == published
        assert len(list((root / "images" / split).iterdir())) == len(rows)
    assert "boxes read as xywh" in result.stderr
    assert not list(root.glob(".fetch")) and not (root / "parquet").exists()


def test_a_parquet_without_features_takes_its_class_names_from_the_card(
    hub: Hub, tmp_path: Path
) -> None:
    """A parquet file another tool wrote (no ``huggingface`` schema metadata) beside the card
    ``push_to_hub`` wrote: the card's ClassLabel names, in their order."""
    import pyarrow.parquet as pq

    push_detection(hub, DET, {"train": detections(6, 31), "validation": detections(2, 32)})
    files = hub.repos[f"datasets/{DET}"].files
    assert "class_label" in files["README.md"].decode()
    stripped = {}
    for name, data in files.items():
        if name.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(data))
            assert b"huggingface" in (table.schema.metadata or {})
            out = io.BytesIO()
            pq.write_table(table.replace_schema_metadata(None), out)
            stripped[name] = out.getvalue()
    hub.add(DET, stripped)
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "class names from the dataset card" in result.stderr
    spec = yaml.safe_load((tmp_path / "ws" / "data" / "det" / "data.yaml").read_text())
    assert spec["names"] == NAMES

    hub.add(DET, {"README.md": b"---\nlicense: mit\n---\n# no features\n"})
    result = stage(hub, tmp_path / "ws2", DET)
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    assert "no ClassLabel names in the file's features nor in the dataset card" in error_line(
        result
    )  # fmt: skip


def test_a_repo_of_several_configs_needs_dataset_config(hub: Hub, tmp_path: Path) -> None:
    """Two configs pushed by ``datasets`` (``data/`` and ``small/``): different datasets, never
    mixed; DATASET_CONFIG picks one (``default`` names ``data/``)."""
    push_detection(hub, DET, {"train": detections(4, 41), "validation": detections(2, 42)})
    small = {"train": detections(3, 43), "validation": detections(1, 44)}
    push_detection(hub, DET, small, config="small")
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    assert error_line(result).endswith("holds 2 configs (subsets): data, small; set "
                                       "DATASET_CONFIG to one")  # fmt: skip
    assert stage(hub, tmp_path / "none", DET, DATASET_CONFIG="large").returncode == 3
    result = stage(hub, tmp_path / "ws", DET, DATASET_CONFIG="small")
    assert result.returncode == 0, result.stderr[-3000:]
    labels = yolo_labels(tmp_path / "ws" / "data" / "det" / "labels")
    assert (
        len(labels) == 4
        and sum(map(len, labels.values())) == centres(small["train"] + small["validation"])[0]
    )


def test_a_train_only_set_holds_out_a_seeded_validation_share(hub: Hub, tmp_path: Path) -> None:
    push_detection(hub, DET, {"train": detections(40, 3)})
    first = stage(hub, tmp_path / "a", DET, VAL_FRACTION="0.25")
    second = stage(hub, tmp_path / "b", DET, VAL_FRACTION="0.25")
    assert first.returncode == second.returncode == 0, first.stderr[-3000:]
    held = [sorted(p.name for p in (ws / "data/det/images/val").iterdir())
            for ws in (tmp_path / "a", tmp_path / "b")]  # fmt: skip
    assert held[0] == held[1] and 0 < len(held[0]) < 40  # the same split on every machine
    trained = len(list((tmp_path / "a/data/det/images/train").iterdir()))
    assert trained + len(held[0]) == 40
    assert "holding out 25% of train" in first.stderr


def test_a_pushed_classification_set_stages_as_class_folders(hub: Hub, tmp_path: Path) -> None:
    rows = {"train": [(picture(i), i % 3) for i in range(9)],
            "validation": [(picture(100 + i), i % 3) for i in range(3)]}  # fmt: skip
    push_classification(hub, "org/cls", rows)
    result = stage(hub, tmp_path / "ws", "org/cls")
    assert result.returncode == 0, result.stderr[-3000:]
    root = tmp_path / "ws" / "data" / "cls"
    assert Path(result.stdout.strip()) == root
    for split, count in (("train", 3), ("val", 1)):
        assert {p.name: len(list(p.iterdir())) for p in (root / split).iterdir()} == {
            name: count for name in NAMES
        }
    published = picture(0)  # bytes kept as published: a PNG is not re-encoded
    assert (root / "train" / "cat" / "00000-0000000.png").read_bytes() == published


def test_a_kill_mid_conversion_resumes_without_fetching_finished_files(
    hub: Hub, tmp_path: Path
) -> None:
    rows = detections(30, 4)
    push_detection(hub, DET, {"train": rows, "validation": detections(3, 5)}, shard_size="20KB")
    names = sorted(n for n in hub.repos[f"datasets/{DET}"].files if n.endswith(".parquet"))
    assert len(names) >= 3, names
    hub.faults.append(Fault(names[1], hang=3600))  # the second file's download never answers
    env = env_for(hub, tmp_path / "ws", DATASET_REPO=DET)
    process = subprocess.Popen([sys.executable, "-m", "entrypoint", "dataset", "stage"],
                               env=env, cwd=REPO, stderr=subprocess.DEVNULL)  # fmt: skip
    checkpoint = tmp_path / "ws" / "data" / ".det.partial" / ".trainbox-resume.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and names[0] not in _done(checkpoint):
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert _done(checkpoint) == [names[0]]
    hub.faults.clear()
    before = len(hub.requests)
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming" in result.stderr
    asked = [path for _, path in hub.requests[before:]]
    assert not [p for p in asked if p.endswith(names[0])]  # converted before the kill
    assert [p for p in asked if p.endswith(names[1])]
    labels = yolo_labels(tmp_path / "ws" / "data" / "det" / "labels" / "train")
    assert sum(len(lines) for lines in labels.values()) == centres(rows)[0]


def _done(checkpoint: Path) -> list[str]:
    try:
        return json.loads(checkpoint.read_text()).get("done", [])
    except (OSError, ValueError):
        return []


def test_a_second_stage_of_the_same_commit_fetches_nothing(hub: Hub, tmp_path: Path) -> None:
    push_detection(hub, DET, {"train": detections(6, 6)})
    assert stage(hub, tmp_path / "ws", DET).returncode == 0
    before = len(hub.requests)
    again = stage(hub, tmp_path / "ws", DET)
    assert again.returncode == 0 and "already staged" in again.stderr
    assert not [p for m, p in hub.requests[before:] if "/resolve/" in p]


def test_undecodable_images_are_one_line_exit_3_and_nothing_half_staged(
    hub: Hub, tmp_path: Path
) -> None:
    rows = [{"image": b"not an image at all", "bbox": [[1, 1, 5, 5]], "category": [0]}] * 3
    push_detection(hub, DET, {"train": rows})
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    assert "3 of 3 images do not decode" in error_line(result)
    assert list((tmp_path / "ws" / "data").iterdir()) == []


def test_a_class_id_outside_the_names_is_one_line_exit_3(hub: Hub, tmp_path: Path) -> None:
    """Written by hand (pyarrow, with the features ``datasets`` would record): ``datasets``
    itself refuses such an id at push time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    value = {"dtype": "float32", "_type": "Value"}
    box = {"feature": {"feature": value, "length": 4, "_type": "List"}, "_type": "List"}
    category = {"feature": {"names": NAMES, "_type": "ClassLabel"}, "_type": "List"}
    features = {"image": {"_type": "Image"}, "objects": {"bbox": box, "category": category}}
    table = pa.table(
        {
            "image": [{"bytes": picture(1), "path": None}],
            "objects": [{"bbox": [[1.0, 1.0, 5.0, 5.0]], "category": [7]}],
        }
    )
    metadata = {"huggingface": json.dumps({"info": {"features": features}})}
    table = table.replace_schema_metadata(metadata)
    out = io.BytesIO()
    pq.write_table(table, out)
    hub.add(DET, {"data/train-00000-of-00001.parquet": out.getvalue()})
    result = stage(hub, tmp_path / "ws", DET)
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    assert "class id 7 is not one of the dataset's 3 classes" in error_line(result)
    assert list((tmp_path / "ws" / "data").iterdir()) == []


def test_the_hubs_parquet_conversion_branch_stages(hub: Hub, tmp_path: Path) -> None:
    """``refs/convert/parquet``: the dataset viewer's copy, ``CONFIG/SPLIT/NNNN.parquet``."""
    train, validation = detections(6, 15), detections(3, 16)
    push_detection(hub, DET, {"train": train, "validation": validation})
    files = hub.repos[f"datasets/{DET}"].files
    hub.branch(DET, "refs/convert/parquet", {
        "default/train/0000.parquet": files["data/train-00000-of-00001.parquet"],
        "default/validation/0000.parquet": files["data/validation-00000-of-00001.parquet"],
    })  # fmt: skip
    hub.add(DET, {"README.md": b"main moved on"}, lfs=set())
    result = stage(hub, tmp_path / "ws", DET, DATASET_REVISION="refs/convert/parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    _check_labels(Path(result.stdout.strip()), {"train": train, "val": validation})
    marker = json.loads((tmp_path / "ws/data/det/.trainbox-dataset.json").read_text())
    assert marker["revision"] == "refs/convert/parquet"
    assert marker["commit"] == hub.repos[f"datasets/{DET}"].branches["refs/convert/parquet"]


def _check_labels(data_yaml: Path, splits: dict[str, list[dict]]) -> None:
    """The labels LibreYOLO will read (found by swapping /images/ for /labels/) against the
    published boxes: count, classes, the sum of normalized centres."""
    spec = yaml.safe_load(data_yaml.read_text())
    assert spec["names"] == NAMES
    base = Path(spec["path"])
    for split, rows in splits.items():
        folder = base / spec[split]
        labels = sorted(folder.rglob("*.txt")) if folder.is_dir() else []
        if not folder.is_dir():  # a list of images
            pictures = [base / line for line in folder.read_text().split()]
            labels = [Path(str(p).replace("/images/", "/labels/")).with_suffix(".txt")
                      for p in pictures]  # fmt: skip
        else:
            labels = [Path(str(p).replace("/images/", "/labels/")).with_suffix(".txt")
                      for p in sorted(folder.rglob("*.png"))]  # fmt: skip
        lines = [
            [float(v) for v in line.split()] for p in labels for line in p.read_text().splitlines()
        ]
        count, total = centres(rows)
        assert len(lines) == count, split
        assert sum(x + y for _, x, y, _, _ in lines) == pytest.approx(total, abs=1e-3)
        assert sorted(int(line[0]) for line in lines) == sorted(
            c for r in rows for c in r["category"]
        )


def test_a_roboflow_yolo_folder_uploaded_as_files_is_mended_and_kept(
    hub: Hub, tmp_path: Path
) -> None:
    splits = {"train": detections(8, 7), "valid": detections(3, 8)}
    upload_folder(hub, "org/rf", roboflow_yolo(tmp_path / "export", splits))
    result = stage(hub, tmp_path / "ws", "org/rf")
    assert result.returncode == 0, result.stderr[-3000:]
    data_yaml = Path(result.stdout.strip())
    spec = yaml.safe_load(data_yaml.read_text())
    assert (spec["train"], spec["val"]) == ("train/images", "valid/images") and "test" not in spec
    assert "'../test/images' is not in the dataset; left out" in result.stderr
    _check_labels(data_yaml, {"train": splits["train"], "val": splits["valid"]})


def test_a_yolo_folders_turned_and_cmyk_images_are_mended_in_place_and_a_broken_one_stops(
    hub: Hub, tmp_path: Path
) -> None:
    splits = {"train": detections(6, 13), "valid": detections(2, 14)}
    export = roboflow_yolo(tmp_path / "export", splits)
    exif = Image.Exif()
    exif[images.ORIENTATION] = 6
    turned = export / "train" / "images" / "im000.png"  # a phone's JPEG, under its own name
    turned.write_bytes(picture(5, (W, H), "JPEG", exif=exif.tobytes()))
    cmyk = io.BytesIO()
    Image.new("CMYK", (W, H), (0, 255, 255, 0)).save(cmyk, "JPEG")
    (export / "train" / "images" / "im001.png").write_bytes(cmyk.getvalue())
    upload_folder(hub, "org/mend", export)
    result = stage(hub, tmp_path / "ws", "org/mend")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dataset: 2 image(s) rewritten upright or as RGB" in result.stderr
    images_dir = Path(result.stdout.strip()).parent / "train" / "images"
    with Image.open(images_dir / "im000.png") as upright:
        assert upright.size == (H, W) and upright.getexif().get(images.ORIENTATION, 1) == 1
    with Image.open(images_dir / "im001.png") as rgb:
        assert rgb.mode == "RGB"
    assert (images_dir / "im002.png").read_bytes() == splits["train"][2]["image"]  # as published

    (export / "train" / "images" / "im003.png").write_bytes(b"\x89PNG broken")
    upload_folder(hub, "org/broken-yolo", export)
    result = stage(hub, tmp_path / "bad", "org/broken-yolo")
    assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
    assert "1 of 8 images do not decode" in error_line(result)
    assert "train/images/im003.png" in error_line(result)
    assert list((tmp_path / "bad" / "data").iterdir()) == []


def test_a_roboflow_zip_is_extracted_and_trained_from(hub: Hub, tmp_path: Path) -> None:
    import shutil

    splits = {"train": detections(8, 9), "valid": detections(3, 10)}
    export = roboflow_yolo(tmp_path / "export", splits)
    (tmp_path / "up").mkdir()
    shutil.make_archive(str(tmp_path / "up" / "shapes.v1i.yolov8"), "zip", export)
    upload_folder(hub, "org/zipped", tmp_path / "up")
    result = stage(hub, tmp_path / "ws", "org/zipped")
    assert result.returncode == 0, result.stderr[-3000:]
    _check_labels(Path(result.stdout.strip()), {"train": splits["train"], "val": splits["valid"]})
    assert not list((tmp_path / "ws" / "data" / "zipped").rglob("*.zip"))


def test_a_tar_export_is_extracted_and_an_unsafe_or_broken_archive_is_one_line(
    hub: Hub, tmp_path: Path
) -> None:
    import tarfile
    import zipfile

    splits = {"train": detections(6, 17), "valid": detections(2, 18)}
    export = roboflow_yolo(tmp_path / "export", splits)
    (tmp_path / "up").mkdir()
    with tarfile.open(tmp_path / "up" / "export.tar.gz", "w:gz") as tar:
        tar.add(export, arcname="export")
    upload_folder(hub, "org/tarred", tmp_path / "up")
    result = stage(hub, tmp_path / "ws", "org/tarred")
    assert result.returncode == 0, result.stderr[-3000:]
    _check_labels(Path(result.stdout.strip()), {"train": splits["train"], "val": splits["valid"]})

    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zipped:
        zipped.writestr("data.yaml", "names: [a]\n")
        zipped.writestr("../outside.txt", "x")
    bad = [("org/evil", (tmp_path / "evil.zip").read_bytes(), "'../outside.txt' leaves its folder"),
           ("org/broken", b"not a zip", "not a readable zip or tar")]  # fmt: skip
    for repo, data, line in bad:
        hub.add(repo, {"export.zip": data})
        result = stage(hub, tmp_path / "bad", repo)
        assert result.returncode == ExitCode.DATASET, result.stderr[-3000:]
        assert line in error_line(result)
        assert not (tmp_path / "outside.txt").exists()
        assert list((tmp_path / "bad" / "data").iterdir()) == []


def test_a_coco_folder_with_ids_from_1_becomes_yolo_labels(hub: Hub, tmp_path: Path) -> None:
    splits = {"train": detections(8, 11), "val": detections(3, 12)}
    upload_folder(hub, "org/coco", coco_folder(tmp_path / "coco", splits, ids=[1, 3, 7]))
    result = stage(hub, tmp_path / "ws", "org/coco")
    assert result.returncode == 0, result.stderr[-3000:]
    _check_labels(Path(result.stdout.strip()), splits)


def test_an_imagefolder_becomes_class_folders(hub: Hub, tmp_path: Path) -> None:
    for split, count in (("train", 2), ("validation", 1)):
        for name in NAMES:
            folder = tmp_path / "folder" / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                (folder / f"{i}.jpg").write_bytes(picture(i, fmt="JPEG"))
    upload_folder(hub, "org/folder", tmp_path / "folder")
    result = stage(hub, tmp_path / "ws", "org/folder")
    assert result.returncode == 0, result.stderr[-3000:]
    root = Path(result.stdout.strip())
    assert {p.name: len(list(p.iterdir())) for p in (root / "val").iterdir()} == dict.fromkeys(
        NAMES, 1
    )  # fmt: skip


# What the repo's file list says.


@pytest.mark.parametrize(
    ("files", "form"),
    [
        (["README.md", "data/train-00000-of-00001.parquet"], "parquet"),
        (["shapes.tar"], "trainbox"),
        (["data.yaml", "images/train/a.jpg", "labels/train/a.txt"], "yolo"),
        (["annotations/instances_train.json", "images/train/a.jpg"], "coco"),
        (["train/_annotations.coco.json", "train/a.jpg"], "coco"),
        (["train/cat/a.jpg", "val/dog/b.png"], "imagefolder"),
        (["README.md", "export.zip"], "archive"),
        (["README.md", "export.tar.gz"], "archive"),
    ],
)  # fmt: skip
def test_the_form_is_told_by_the_file_list(files: list[str], form: str) -> None:
    assert forms.decide("org/shapes", "main", files, "auto")[0] == form


def test_a_repo_that_fits_several_forms_or_none_names_what_it_found() -> None:
    files = ["data/train-00000-of-00001.parquet", "data.yaml", "images/a.jpg", "labels/a.txt"]
    with pytest.raises(TrainboxError) as several:
        forms.decide("org/x", "main", files, "auto")
    assert several.value.code == ExitCode.DATASET
    assert "fits several forms" in str(several.value)
    assert "set DATASET_FORMAT to one of parquet, yolo" in str(several.value)
    assert forms.decide("org/x", "main", files, "parquet")[0] == "parquet"
    with pytest.raises(TrainboxError, match=r"no dataset form found at main \(2 file\(s\): a.txt"):
        forms.decide("org/x", "main", ["a.txt", "b.csv"], "auto")
    with pytest.raises(TrainboxError, match="DATASET_FORMAT=coco: org/x at main does not"):
        forms.decide("org/x", "main", files, "coco")


def test_parquet_file_names_give_their_split() -> None:
    assert parquet.split_of("data/train-00000-of-00002.parquet") == "train"
    assert parquet.split_of("default/validation/0000.parquet") == "validation"
    assert parquet.split_of("default/partial-test/0001.parquet") == "test"
    assert [layout.split_of(s) for s in ("validation", "valid", "dev", "val")] == ["val"] * 4


# The boxes' layout, proved by the values.


def _voc(rows: int) -> list[tuple[list[float], int, int]]:
    """Pascal VOC boxes on 100x80 images, spread over the image (x1 + x2 > width for many)."""
    return [([10.0 + i, 5.0, 60.0 + i * 1.5, 70.0], 100, 80) for i in range(rows)]


def test_voc_and_normalized_boxes_are_detected_and_coco_is_the_default() -> None:
    assert boxes.decide(_voc(20)).format == "xyxy"
    coco = [([70.0, 5.0, 20.0, 10.0], 100, 80), ([3.0, 3.0, 50.0, 40.0], 100, 80)]
    assert boxes.decide(coco).format == "xywh"  # [70, 5, 20, 10] cannot be a VOC box
    both = [([10.0, 10.0, 20.0, 20.0], 100, 80)]
    assert boxes.decide(both).format == "xywh"  # fits both: COCO's, as the Hub's guide
    normalized = [([0.6, 0.1, 0.2, 0.3], 640, 480), ([0.1, 0.5, 0.3, 0.4], 640, 480)]
    assert boxes.decide(normalized).format == "xywhn"  # 0.6 + 0.2 fits, [0.6 .. 0.2] does not
    centred = [([0.95, 0.5, 0.1, 0.2], 640, 480)]
    assert boxes.decide(centred).format == "cxcywhn"
    assert boxes.decide(_voc(3), "xywh").format == "xywh"  # BBOX_FORMAT wins


def test_an_ambiguous_normalized_set_needs_bbox_format() -> None:
    ambiguous = [([0.1, 0.1, 0.3, 0.3], 640, 480)]  # xywhn, xyxyn and cxcywhn all fit
    with pytest.raises(TrainboxError, match=r"fit several normalized layouts.*set BBOX_FORMAT"):
        boxes.decide(ambiguous)
    assert boxes.decide(ambiguous, "xyxyn").format == "xyxyn"


def test_boxes_are_clamped_to_the_image_and_empty_ones_dropped() -> None:
    (cx, cy, w, h), clamped = boxes.yolo([90, 70, 20, 20], "xywh", 100, 80)
    assert clamped and (cx, w) == pytest.approx((0.95, 0.1)) and (cy, h) == pytest.approx(
        (0.9375, 0.125)
    )  # fmt: skip
    assert boxes.yolo([120, 10, 5, 5], "xywh", 100, 80) is None
    assert boxes.yolo([10, 10, 0, 5], "xywh", 100, 80) is None


# Images LibreYOLO would read wrong.


def test_an_exif_rotated_image_is_turned_upright_and_a_cmyk_one_made_rgb() -> None:
    exif = Image.Exif()
    exif[images.ORIENTATION] = 6  # stored sideways: viewers turn it 90 degrees clockwise
    rotated = picture(1, (60, 40), "JPEG", exif=exif.tobytes())
    ready = images.prepare(rotated)
    assert (ready.width, ready.height) == (40, 60) and ready.rewritten == "EXIF orientation 6"
    assert Image.open(io.BytesIO(ready.data)).getexif().get(images.ORIENTATION, 1) == 1
    out = io.BytesIO()
    Image.new("CMYK", (30, 20), (0, 255, 255, 0)).save(out, "JPEG")
    cmyk = images.prepare(out.getvalue())
    assert Image.open(io.BytesIO(cmyk.data)).mode == "RGB" and "CMYK" in cmyk.rewritten
    plain = picture(2, (30, 20), "JPEG")
    assert images.prepare(plain).data == plain  # anything else: the bytes as published


def test_an_image_past_the_pixel_limit_or_truncated_is_bad(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "MAX_PIXELS", 100)
    with pytest.raises(images.BadImage, match="past Pillow's pixel limit"):
        images.prepare(picture(1, (20, 20)))
    monkeypatch.undo()
    with pytest.raises(images.BadImage):
        images.prepare(picture(1)[:60])


def test_a_parquet_file_without_an_image_column_is_one_line(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a"], "score": [1]}), tmp_path / "t.parquet")
    with pytest.raises(TrainboxError, match="no image column among text, score"):
        parquet.schema(tmp_path / "t.parquet", "t.parquet")


def test_inspect_tells_the_form_counts_classes_and_boxes_before_renting(
    hub: Hub, tmp_path: Path
) -> None:
    train, validation = detections(20, 13), detections(4, 14)
    push_detection(hub, DET, {"train": train, "validation": validation})
    env = env_for(hub, tmp_path / "ws", DATASET_REPO="")
    command = [sys.executable, "-m", "entrypoint", "dataset", "inspect", DET, "--json"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (report["form"], report["task"], report["classes"]) == ("parquet", "detect", NAMES)
    assert report["splits"] == {
        "train": {"images": 20, "boxes": centres(train)[0]},
        "val": {"images": 4, "boxes": centres(validation)[0]},
    }
    assert report["box_format"] == "xywh" and "xyxy puts" in report["box_evidence"]
    parquet_bytes = sum(len(d) for n, d in hub.repos[f"datasets/{DET}"].files.items()
                        if n.endswith(".parquet"))  # fmt: skip
    assert report["bytes"] == parquet_bytes and report["disk"] > parquet_bytes
    assert not (tmp_path / "ws" / "data").exists()  # nothing written
    planned = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "disk",
                              "--dataset-repo", DET, "--checkpoint-mb", "10", "--start-mb", "0"],
                             env=env, capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert f"dataset      parquet files: {parquet_bytes / 1e9:.3f} GB in 2 files" in planned.stdout
