"""The typed config: layers, parsing, and one-line errors that name the key."""

import json
from pathlib import Path

import pytest
import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import config
from tests.conftest import trainbox


def load(**environ: str) -> config.Config:
    return config.load(environ)


def error(**environ: str) -> str:
    with pytest.raises(TrainboxError) as caught:
        config.load(environ)
    assert caught.value.code == ExitCode.CONFIG
    return str(caught.value)


def test_nothing_configured_is_the_demo_preset() -> None:
    cfg = load()
    preset = yaml.safe_load(config.DEMO_PRESET.read_text())
    assert cfg.is_demo
    assert {key: getattr(cfg, key) for key in preset} == preset
    assert cfg.pretrained is False
    assert cfg.run_dir == Path("/workspace/runs/run")


def test_a_dataset_drops_the_demo_preset() -> None:
    cfg = load(DATA="/workspace/data/x/data.yaml")
    assert not cfg.is_demo
    assert (cfg.model, cfg.pretrained, cfg.epochs) == ("LibreYOLO9s.pt", True, 100)


def test_environment_overrides_file_overrides_preset(tmp_path: Path) -> None:
    file = tmp_path / "run.yaml"
    file.write_text("epochs: 7\nbatch: 16\ndevice: '0,1'\n")
    cfg = load(TRAINBOX_CONFIG=str(file), EPOCHS="9")
    assert (cfg.epochs, cfg.batch, cfg.device, cfg.imgsz) == (9, 16, "0,1", 128)


def test_values_are_typed() -> None:
    cfg = load(PRETRAINED="yes", WORKERS="0", BATCH="-1", DEVICE=" 0, 1 ", WORKSPACE="/w")
    assert cfg.pretrained is True
    assert (cfg.workers, cfg.batch, cfg.device) == (0, -1, "0,1")
    assert cfg.run_dir == Path("/w/runs/run")


def test_an_empty_variable_counts_as_unset() -> None:
    assert load(EPOCHS="", DEVICE="").epochs == 3


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"EPOCHS": "-1"}, "EPOCHS='-1': expected a whole number >= 1"),
        ({"EPOCHS": "3.5"}, "EPOCHS='3.5': expected a whole number >= 1"),
        ({"BATCH": "0"}, "BATCH='0': expected a whole number >= 1, or -1"),
        ({"DEVICE": "banana"}, "DEVICE='banana': expected auto, cpu, or GPU indices"),
        ({"PRETRAINED": "maybe"}, "PRETRAINED='maybe': expected true or false"),
        ({"RUN_NAME": "../x"}, "RUN_NAME='../x': expected a folder name"),
        ({"WORKSPACE": "rel"}, "WORKSPACE='rel': expected an absolute path"),
    ],
)
def test_bad_environment_values_name_key_and_accepted_values(
    environ: dict[str, str], expected: str
) -> None:
    message = error(**environ)
    assert message.startswith("environment: ")
    assert expected in message
    assert "\n" not in message


def test_unknown_yaml_key_names_it_and_the_accepted_keys(tmp_path: Path) -> None:
    file = tmp_path / "run.yaml"
    file.write_text("epoch: 3\n")
    message = error(TRAINBOX_CONFIG=str(file))
    assert message == f"{file}: unknown key 'epoch'; accepted keys: {', '.join(config.KEYS)}"


def test_bad_yaml_value_names_the_file_and_key(tmp_path: Path) -> None:
    file = tmp_path / "run.yaml"
    file.write_text("imgsz: big\n")
    assert error(TRAINBOX_CONFIG=str(file)) == f"{file}: imgsz='big': expected a whole number >= 32"


@pytest.mark.parametrize(
    ("text", "expected"), [("epochs: [1\n", "not valid YAML at line"), ("- 1\n", "a mapping")]
)
def test_malformed_yaml(tmp_path: Path, text: str, expected: str) -> None:
    file = tmp_path / "run.yaml"
    file.write_text(text)
    assert expected in error(TRAINBOX_CONFIG=str(file))


def test_missing_config_file() -> None:
    assert "cannot read it" in error(TRAINBOX_CONFIG="/nonexistent/run.yaml")


def test_example_config_is_valid() -> None:
    cfg = load(TRAINBOX_CONFIG=str(config.CONFIG_DIR / "example.yaml"))
    assert (cfg.run_name, cfg.save_period, cfg.data) == (
        "run1",
        5,
        "/workspace/data/my-dataset/data.yaml",
    )
    from entrypoint.settings import options

    assert options.effective(cfg) == {"optimizer": "adamw", "lr0": 0.002, "patience": 30}


def test_cli_prints_one_line_and_exits_2_before_anything_runs(tmp_path: Path) -> None:
    result = trainbox("run", env={"EPOCHS": "-1", "WORKSPACE": str(tmp_path)})
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr.strip() == (
        "[trainbox] error: environment: EPOCHS='-1': expected a whole number >= 1"
    )
    assert list(tmp_path.iterdir()) == []


def test_cli_config_shows_the_resolved_settings() -> None:
    result = trainbox("config", env={"EPOCHS": "12", "TRAINBOX_CONFIG": ""})
    assert result.returncode == 0
    assert "EPOCHS=12" in result.stdout.splitlines()
    assert "MODEL=LibreYOLO9t.pt" in result.stdout.splitlines()


def test_job_shape_comes_from_ours_or_the_launchers_names_and_is_checked() -> None:
    ours = config.load({"NNODES": "2", "NODE_RANK": "1", "PET_NODE_RANK": "0",
                        "OUTPUT_REPO": "o/r"})  # fmt: skip
    assert (ours.nnodes, ours.node_rank) == (2, 1)  # trainbox's own names win
    elastic = config.load({"PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "auto", "OUTPUT_REPO": "o/r"})
    assert (elastic.nnodes, elastic.nproc_per_node) == (3, 0)
    with pytest.raises(TrainboxError, match="NODE_RANK=2 with NNODES=2: node ranks go from 0 to 1"):
        config.load({"NNODES": "2", "NODE_RANK": "2", "OUTPUT_REPO": "o/r"})
    with pytest.raises(TrainboxError, match="NNODES=2 needs OUTPUT_REPO"):
        config.load({"NNODES": "2"})


@pytest.mark.parametrize(
    ("raw", "imgsz"),
    [("640", 640), ("480x640", (480, 640)), ("480,640", (480, 640)), ("640x640", 640)],
)
def test_imgsz_is_a_side_or_height_and_width_as_libreyolos_cli_reads_it(
    raw: str, imgsz: int | tuple[int, int]
) -> None:
    assert config.load({"IMGSZ": raw}).imgsz == imgsz


def test_a_rectangle_survives_the_settings_the_job_hands_on() -> None:
    cfg = config.load({"IMGSZ": "480x640"})
    assert config.restore(json.loads(json.dumps(cfg.dump()))) == cfg
    assert error(IMGSZ="480x") == (
        "environment: IMGSZ='480x': expected a whole number >= 32, or HEIGHTxWIDTH such as 480x640"
    )
