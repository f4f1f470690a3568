"""The built-in demo dataset: valid YOLO data, the same bytes every time, written once."""

import hashlib
from pathlib import Path

import yaml
from PIL import Image

from entrypoint.dataset import demo


def digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "data.yaml"
    }


def test_demo_is_a_valid_yolo_dataset(tmp_path: Path) -> None:
    data_yaml, written = demo.ensure(tmp_path / "demo")
    assert written
    spec = yaml.safe_load(data_yaml.read_text())
    assert spec["names"] == dict(enumerate(demo.CLASSES))
    for split, count in demo.SPLITS.items():
        images = sorted((tmp_path / "demo" / spec[split]).iterdir())
        assert len(images) == count
        for image in images:
            assert Image.open(image).size == (demo.SIZE, demo.SIZE)
            label = tmp_path / "demo" / "labels" / split / f"{image.stem}.txt"
            for line in label.read_text().splitlines():
                cls, *box = line.split()
                assert int(cls) in range(len(demo.CLASSES))
                assert all(0 < float(v) < 1 for v in box)


def test_demo_is_deterministic(tmp_path: Path) -> None:
    demo.ensure(tmp_path / "a")
    demo.ensure(tmp_path / "b")
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert len(digest(tmp_path / "a")) == 2 * sum(demo.SPLITS.values())


def test_demo_is_written_once_and_leaves_no_staging(tmp_path: Path) -> None:
    data_yaml, _ = demo.ensure(tmp_path / "demo")
    before = data_yaml.stat().st_mtime_ns
    again, written = demo.ensure(tmp_path / "demo")
    assert (again, written) == (data_yaml, False)
    assert data_yaml.stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_a_half_written_demo_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "demo" / "images").mkdir(parents=True)  # a crash before data.yaml landed
    data_yaml, written = demo.ensure(tmp_path / "demo")
    assert written and data_yaml.is_file()
    assert len(digest(tmp_path / "demo")) == 2 * sum(demo.SPLITS.values())
