"""LibreYOLO's training options through trainbox: the YAML's ``train:`` mapping and TRAIN_ARGS,
checked by LibreYOLO's own config classes before anything is touched."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import config, options
from entrypoint.training import resume
from tests.conftest import trainbox
from tests.standins.hub import GOOD_TOKEN, Hub

DEMO = {"MODEL": "LibreYOLO9t.pt", "PRETRAINED": "false"}


def load(tmp_path: Path, yaml_text: str = "", **environ: str) -> config.Config:
    env = {"WORKSPACE": str(tmp_path / "ws"), **DEMO, **environ}
    if yaml_text:
        (tmp_path / "trainbox.yaml").write_text(yaml_text)
        env["TRAINBOX_CONFIG"] = str(tmp_path / "trainbox.yaml")
    return config.load(env)


def refusal(cfg: config.Config) -> str:
    with pytest.raises(TrainboxError) as caught:
        options.effective(cfg)
    assert caught.value.code == ExitCode.CONFIG
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_yaml_and_train_args_merge_key_by_key_the_environment_winning(
    tmp_path: Path,
) -> None:
    cfg = load(tmp_path, "train:\n  lr0: 0.01\n  optimizer: sgd\n  cache: disk\n",
               TRAIN_ARGS="optimizer=adamw lr0=0.002 mosaic=0.5 amp=false")  # fmt: skip
    assert options.effective(cfg) == {
        "lr0": 0.002,
        "optimizer": "adamw",
        "cache": "disk",
        "mosaic_prob": 0.5,  # LibreYOLO's alias for mosaic_prob
        "amp": False,
    }
    assert options.effective(load(tmp_path)) == {}


@pytest.mark.parametrize("key", sorted(options.OWNED))
def test_every_option_trainbox_owns_is_refused_with_its_setting(tmp_path: Path, key: str) -> None:
    line = refusal(load(tmp_path, TRAIN_ARGS=f"{key}=1"))
    assert line == f"TRAIN_ARGS: {key} is set by trainbox: use {options.OWNED[key]}"
    assert refusal(load(tmp_path, f"train:\n  {key}: 1\n")).startswith(f"train.{key}: {key} is")


def test_an_unknown_option_gets_libreyolos_closest_name(tmp_path: Path) -> None:
    line = refusal(load(tmp_path, TRAIN_ARGS="lrr0=0.1"))
    assert line.startswith("TRAIN_ARGS: lrr0 is not a training option of YOLO9Config")
    assert "(did you mean 'lr0'?)" in line
    assert "did you mean" in refusal(load(tmp_path, "train:\n  mosiac_prob: 0.5\n"))


def test_a_wrong_type_and_a_value_libreyolo_refuses_stop(tmp_path: Path) -> None:
    assert refusal(load(tmp_path, TRAIN_ARGS="lr0=fast")) == (
        "TRAIN_ARGS: lr0='fast': expected float (YOLO9Config)"
    )
    assert "amp='maybe': expected bool" in refusal(load(tmp_path, TRAIN_ARGS="amp=maybe"))
    # LibreYOLO's own validators, as its config class runs them:
    assert "cls_pw must be a finite number in [0, 1]" in refusal(
        load(tmp_path, TRAIN_ARGS="cls_pw=2")
    )
    assert "compile must be True, False or one of" in refusal(
        load(tmp_path, TRAIN_ARGS="compile=maybe")
    )
    assert "Conflicting mosaic values" in refusal(
        load(tmp_path, TRAIN_ARGS="mosaic=0.5 mosaic_prob=0.3")
    )
    # An optimizer LibreYOLO's trainer would refuse only once training starts:
    assert refusal(load(tmp_path, TRAIN_ARGS="optimizer=lion")) == (
        "TRAIN_ARGS: optimizer=lion: YOLO9Trainer knows sgd, adam, adamw"
    )
    assert options.effective(load(tmp_path, TRAIN_ARGS="optimizer=AdamW"))  # lowercased by it
    assert refusal(load(tmp_path, TRAIN_ARGS="lr0")) == (
        "TRAIN_ARGS: 'lr0' is not key=value (e.g. lr0=0.002)"
    )
    with pytest.raises(TrainboxError, match="expected a mapping of LibreYOLO training options"):
        load(tmp_path, "train: [lr0]\n")


# What LibreYOLO would refuse only once training started, on the billed card: each refused at
# start, with its setting's line.
AT_START = {
    "a value": ({"TRAIN_ARGS": "lr0=fast"},
                "TRAIN_ARGS: lr0='fast': expected float (YOLO9Config)"),
    "lora where the family has none": (
        {"TRAIN_ARGS": "lora=true"},
        "TRAIN_ARGS: lora=true: YOLO9Trainer has no LoRA fine-tuning (yolo9); LibreYOLO has it "
        "for transformer families such as RF-DETR, D-FINE, DEIM and RT-DETR"),
    "a teacher that cannot teach": (
        {"TRAIN_ARGS": "distill_model=LibreDFINEn.pt"},
        "TRAIN_ARGS: distill_model=LibreDFINEn.pt: LibreYOLO has no distillation for dfine as "
        "the teacher (it has it for yolo9, yolox and rfdetr)"),
    "an export format's package": (
        {"EXPORT": "openvino"},
        "EXPORT=openvino: OpenVINO export requires the 'openvino' package; LibreYOLO's extra "
        "for it is a build argument: LIBREYOLO_EXTRAS=openvino"),
    "a rectangle where the family takes squares": (
        {"MODEL": "LibreDFINEn.pt", "IMGSZ": "480x640"},
        "IMGSZ=480x640: dfine trains on squares only for detect: set one number, e.g. "
        "IMGSZ=640"),
    "an image too small for the queries": (
        {"MODEL": "LibreDFINEn.pt", "IMGSZ": "128"},
        "IMGSZ=128 is too small for LibreDFINEn.pt: selected index k out of range (LibreYOLO "
        "trains it at 640): raise IMGSZ"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(AT_START))
def test_what_would_fail_in_training_stops_before_anything_is_touched(
    tmp_path: Path, hub: Hub, case: str
) -> None:
    settings, line = AT_START[case]
    env = {"WORKSPACE": str(tmp_path / "ws"), **DEMO, "HF_ENDPOINT": hub.url,
           "OUTPUT_REPO": "org/weights", "HF_TOKEN": "hf_x", **settings}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "entrypoint", "run"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == ExitCode.CONFIG, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == f"[trainbox] error: {line}"
    assert not (tmp_path / "ws").exists()  # no run folder, no lock, no status
    assert hub.requests == []  # no Hub request


@pytest.mark.parametrize(("option", "package"), [("lora", "peft"), ("export_check", "onnxruntime")])
def test_an_option_whose_package_the_image_lacks_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, package: str
) -> None:
    """The default image has both (LIBREYOLO_EXTRAS); one built without them says so."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package
                        else real(name, *a))  # fmt: skip
    line = refusal(load(tmp_path, MODEL="LibreDFINEn.pt", TRAIN_ARGS=f"{option}=true"))
    assert line == (
        f"TRAIN_ARGS: {option}=true needs the {package} package, not in this image: build it "
        f"with LIBREYOLO_EXTRAS={ {p: e for _, p, e in options.NEEDS}[package] }"
    )


def test_a_resume_with_other_options_is_refused_unless_allowed(tmp_path: Path) -> None:
    previous = {"train_options": {"lr0": 0.002, "optimizer": "adamw"}}
    same = {"optimizer": "adamw", "lr0": 0.002}
    other = {"lr0": 0.01, "optimizer": "adamw"}
    cfg = load(tmp_path)
    resume.check_options(cfg.run_name, False, previous, same)
    resume.check_options(
        cfg.run_name, False, {}, other
    )  # a manifest from before options were recorded
    with pytest.raises(TrainboxError) as caught:
        resume.check_options(cfg.run_name, cfg.allow_options_change, previous, other)
    assert caught.value.code == ExitCode.CONFIG
    assert str(caught.value) == (
        "run 'run' on OUTPUT_REPO was trained with other options (lr0 0.002 -> 0.01): set "
        "ALLOW_OPTIONS_CHANGE=true to resume with these, or a new RUN_NAME"
    )
    allowed = load(tmp_path, ALLOW_OPTIONS_CHANGE="true")
    resume.check_options(allowed.run_name, allowed.allow_options_change, previous, other)


def test_trainbox_config_prints_the_effective_training_options(tmp_path: Path) -> None:
    env = {"WORKSPACE": str(tmp_path / "ws"), **DEMO, "TRAIN_ARGS": "lr0=0.002 mosaic=0"}
    done = subprocess.run([sys.executable, "-m", "entrypoint", "config"], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    lines = done.stdout.splitlines()
    assert "train.lr0=0.002  (set)" in lines and "train.mosaic_prob=0  (set)" in lines
    assert "train.optimizer=sgd" in lines  # LibreYOLO's default for the YOLO9 family
    assert not any(line.startswith(("train.epochs=", "train.data=")) for line in lines)
    json.dumps(options.defaults("LibreYOLO9t.pt"), default=str)  # printable


def test_loggers_are_libreyolos_with_their_package_in_the_image(tmp_path: Path) -> None:
    assert options.effective(load(tmp_path, TRAIN_ARGS="loggers=tensorboard lr0=0.01")) == {
        "lr0": 0.01,
        "loggers": "tensorboard",
    }
    assert refusal(load(tmp_path, TRAIN_ARGS="loggers=wandb")) == (
        "TRAIN_ARGS: loggers=wandb needs the wandb package, not in this image: build it with "
        "EXTRA_PACKAGES=wandb"
    )
    assert "Unknown logger 'nope'" in refusal(
        load(tmp_path, TRAIN_ARGS="loggers=[tensorboard,nope]")
    )
    # The Hub logger is not built at start (that asks the Hub); its form is checked.
    assert options.effective(load(tmp_path, TRAIN_ARGS="loggers=hf:org/metrics")) == {
        "loggers": "hf:org/metrics"
    }
    assert "expected hf:ORG/REPO" in refusal(load(tmp_path, TRAIN_ARGS="loggers=hf:metrics"))


def test_options_reach_libreyolo_as_its_cli_reads_them_and_tensorboard_the_hub(
    tmp_path: Path, hub: Hub
) -> None:
    """A whole `trainbox run` of the demo with LibreYOLO's TensorBoard logger and two options
    its CLI reads otherwise than YAML or LibreYOLO's task-blind aliases would."""
    env = {"WORKSPACE": str(tmp_path / "ws"), "DEVICE": "cpu", "EPOCHS": "1", "MONITOR": "false",
           "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
           "OUTPUT_REPO": "org/weights", "UPLOAD_INTERVAL": "1",
           "TRAIN_ARGS": "loggers=tensorboard lr0=1e-3 mixup=0.5", "EVALUATE": "none"}  # fmt: skip
    done = trainbox("run", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # As `libreyolo train lr0=1e-3 mixup=0.5` writes it: typer makes 1e-3 the float 0.001
    # (YAML reads a string), and its detection aliases make mixup mixup_prob (cli/aliases.py),
    # leaving the classifiers' batch MixUp field at its default.
    written = yaml.safe_load((tmp_path / "ws/runs/run/train_config.yaml").read_text())
    assert (written["lr0"], written["mixup_prob"], written["mixup"]) == (0.001, 0.5, 0.0)
    events = sorted(p.name for p in (tmp_path / "ws/runs/run/tensorboard").glob("events.*"))
    assert events
    on_hub = hub.repos["models/org/weights"].files
    assert all(f"run/{name}" in on_hub for name in events)
    manifest = json.loads(on_hub["run/manifest.json"])
    assert manifest["train_options"] == {"loggers": "tensorboard", "lr0": 0.001, "mixup_prob": 0.5}
