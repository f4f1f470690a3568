"""EXPORT: deployable files made after training from best.pt, by LibreYOLO's own exporters;
formats checked at start; a failed export never fails the completed training."""

from pathlib import Path

import onnx
import pytest

from entrypoint.dataset import demo
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import config
from entrypoint.state import status, store
from entrypoint.training import export, publish
from entrypoint.training.weights import architecture


def load(workspace: Path, formats: str) -> config.Config:
    settings = {"DEVICE": "cpu", "MODEL": "LibreYOLO9t.pt", "PRETRAINED": "false", "IMGSZ": "128"}
    return config.load({"WORKSPACE": str(workspace), "EXPORT": formats, **settings})


def test_formats_are_libreyolos_and_checked_at_start(tmp_path: Path) -> None:
    export.check("ONNX, torchscript", "LibreYOLO9t.pt")  # LibreYOLO's names, any case
    with pytest.raises(TrainboxError) as caught:
        export.check("onnx,onxx", "LibreYOLO9t.pt")
    assert caught.value.code == ExitCode.CONFIG
    assert str(caught.value).startswith("EXPORT=onnx,onxx: 'onxx' is not a LibreYOLO export "
                                        "format; it has coreai, coreml,")  # fmt: skip
    with pytest.raises(TrainboxError, match="expected export format names"):
        load(tmp_path, "onnx;torchscript")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one real (1-epoch, CPU) LibreYOLO9t run in runs/run."""
    workspace = tmp_path_factory.mktemp("ws")
    data_yaml, _ = demo.ensure(workspace / "data" / "demo")
    architecture("LibreYOLO9t.pt").train(data=str(data_yaml), epochs=1, batch=8, imgsz=128,
                                         workers=0, device="cpu", project=str(workspace / "runs"),
                                         name="run", exist_ok=True, sync_bn=False)  # fmt: skip
    return workspace


def test_best_pt_is_exported_published_and_a_failure_keeps_training_complete(
    trained: Path,
) -> None:
    cfg = load(trained, "onnx,torchscript,openvino")  # openvino: not installed here
    status.record(cfg.volume, "training")
    results = export.run(cfg)
    assert results["onnx"] == "export/best.onnx" and results["torchscript"] == (
        "export/best.torchscript"
    )
    onnx.checker.check_model(onnx.load(cfg.run_dir / results["onnx"]))  # a loadable model
    assert results["openvino"].startswith("failed: ")
    assert store.export_report(trained) == results  # its own file: the job puts it in the status
    assert "export" not in status.read(cfg.volume)  # the train program never writes the status
    published = publish.read_index(cfg.run_dir)["files"]
    assert {"best.onnx", "best.torchscript"} <= set(published)  # the uploader pushes them
