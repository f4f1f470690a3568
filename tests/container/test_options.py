"""LibreYOLO's training options in a real container: TRAIN_ARGS reaches LibreYOLO's own
train_config.yaml and the manifest on the Hub, and a resume with other options is refused."""

import json

import pytest
import yaml

from entrypoint.errors import ExitCode
from tests.container.conftest import OUTPUT, docker, env_for, in_volume, logs, run_container
from tests.standins.hub import Hub

pytestmark = pytest.mark.container

OPTIONS = "optimizer=adamw lr0=0.002 mosaic_prob=0"


def test_train_args_reach_libreyolo_and_the_manifest_and_a_changed_resume_is_refused(
    image: str, volume: str, hub: Hub
) -> None:
    done = run_container(image, volume, env=env_for(hub, EPOCHS="2", TRAIN_ARGS=OPTIONS))
    assert done.returncode == 0, logs(done)[-3000:]
    used = yaml.safe_load(in_volume(image, volume, "cat", "/workspace/runs/run/train_config.yaml"))
    assert (used["optimizer"], used["lr0"], used["mosaic_prob"]) == ("adamw", 0.002, 0)
    files = hub.repos[f"models/{OUTPUT}"].files
    manifest = json.loads(files["run/manifest.json"])
    assert manifest["train_options"] == {"optimizer": "adamw", "lr0": 0.002, "mosaic_prob": 0}

    # The run on the Hub, as a machine that was stopped would leave it; a new volume resumes it.
    hub.add(OUTPUT, {"run/status.json": b'{"state": "running"}\n'}, kind="models")
    other = OPTIONS.replace("lr0=0.002", "lr0=0.01")
    refused = run_container(image, f"{volume}-2", env=env_for(hub, EPOCHS="3", TRAIN_ARGS=other))
    try:
        assert refused.returncode == ExitCode.CONFIG, logs(refused)[-3000:]
        [line] = [m for m in refused.stderr.splitlines() if m.startswith("[trainbox] error:")]
        assert "trained with other options (lr0 0.002 -> 0.01)" in line
        assert "ALLOW_OPTIONS_CHANGE=true" in line
    finally:
        docker("volume", "rm", "-f", f"{volume}-2")


def test_export_onnx_leaves_a_loadable_model_in_the_run_and_on_the_hub(
    image: str, volume: str, hub: Hub, tmp_path
) -> None:
    import onnx

    done = run_container(image, volume, env=env_for(hub, EPOCHS="1", EXPORT="onnx"))
    assert done.returncode == 0, logs(done)[-3000:]
    listed = in_volume(image, volume, "ls", "/workspace/runs/run/export").split()
    assert listed == ["best.onnx"]
    held = hub.repos[f"models/{OUTPUT}"].files["run/best.onnx"]
    (tmp_path / "best.onnx").write_bytes(held)
    onnx.checker.check_model(onnx.load(tmp_path / "best.onnx"))  # loadable, on the host
    state = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert state["export"] == {"onnx": "export/best.onnx"} and state["exit_code"] == 0


def test_an_rf_detr_trains_an_epoch_with_lora_in_the_default_image(
    image: str, volume: str, hub: Hub
) -> None:
    """RF-DETR exists only with transformers and LoRA needs peft: the default image has both
    (LIBREYOLO_EXTRAS). Its architecture is built offline (PRETRAINED=false: LibreYOLO's
    ``_from_scratch``, no backbone download), LoRA goes on its DINOv2 backbone, and one epoch
    of the demo reaches the Hub."""
    env = env_for(hub, EPOCHS="1", MODEL="LibreRFDETRn.pt", TRAIN_ARGS="lora=true val=false")
    done = run_container(image, volume, env=env)
    assert done.returncode == 0, logs(done)[-3000:]
    assert "Applied LoRA to RF-DETR backbone" in logs(done)
    used = yaml.safe_load(in_volume(image, volume, "cat", "/workspace/runs/run/train_config.yaml"))
    assert used["lora"] is True and used["size"] == "n"
    files = hub.repos[f"models/{OUTPUT}"].files
    assert "run/last.pt" in files and json.loads(files["run/index.json"])["epoch"] == 1
