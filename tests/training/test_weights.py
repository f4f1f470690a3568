"""Start weights from anywhere, fetched once onto the volume through the Hub gateway, while
the dataset stages: published LibreYOLO names, hf://ORG/NAME/PATH.pt, a path."""

from pathlib import Path

import huggingface_hub
import pytest

from entrypoint.dataset import stage
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.runtime import boot
from entrypoint.settings import config
from entrypoint.state import run as this
from entrypoint.training import weights
from tests.conftest import client_at, tar_on_hub
from tests.standins.hub import GOOD_TOKEN, Hub


def before_training(cfg: config.Config) -> None:
    """The job's steps after the watchdog's start and before supervision, on this volume."""
    started = boot.Boot(this.start(cfg))
    for step in boot.STEPS[boot.STEPS.index(boot.completed) : boot.STEPS.index(boot.supervision)]:
        step(started)


CHECKPOINT = b"an earlier run's best weights" * 40_000  # ~1.2 MB


def load(tmp_path: Path, **environ: str) -> config.Config:
    return config.load({"WORKSPACE": str(tmp_path / "ws"), "PRETRAINED": "true", **environ})


def test_what_model_names(tmp_path: Path) -> None:
    published = weights.source(load(tmp_path, MODEL="LibreYOLO9s.pt"))
    # What LibreYOLO itself would download (its get_download_url), through the gateway.
    assert published.target.repo == "LibreYOLO/LibreYOLO9s"
    assert (published.target.name, published.target.revision) == ("LibreYOLO9s.pt", "main")
    assert published.target.repo_type == "model" and published.target.setting == "MODEL"
    assert published.path == tmp_path / "ws/weights/LibreYOLO/LibreYOLO9s/LibreYOLO9s.pt"
    earlier = weights.source(load(tmp_path, MODEL="hf://org/w/run/best.pt"))
    assert (earlier.target.repo, earlier.target.name) == ("org/w", "run/best.pt")
    assert earlier.path == tmp_path / "ws/weights/org/w/run/best.pt"
    assert weights.source(load(tmp_path, MODEL="LibreYOLO9t.pt", PRETRAINED="false")) is None
    mine = tmp_path / "mine.pt"
    mine.write_bytes(b"x")
    assert weights.source(load(tmp_path, MODEL=str(mine))) == weights.Source(
        None, mine, f"MODEL={mine}"
    )


@pytest.mark.parametrize(
    ("model", "line"),
    [
        ("hf://org/w", "MODEL='hf://org/w': expected hf://ORG/NAME/PATH.pt"),
        ("/nowhere/x.pt", "MODEL=/nowhere/x.pt: no such file in the container"),
        ("Mystery9s.pt", "MODEL='Mystery9s.pt': LibreYOLO publishes no weights by that name"),
    ],
)
def test_a_model_that_cannot_be_is_a_config_error(tmp_path: Path, model: str, line: str) -> None:
    with pytest.raises(TrainboxError) as caught:
        weights.source(load(tmp_path, MODEL=model))
    assert caught.value.code == ExitCode.CONFIG and str(caught.value).startswith(line)


@pytest.fixture
def on_hub(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    client_at(monkeypatch, hub.url)
    hub.add("org/w", {"run/best.pt": CHECKPOINT}, kind="models")
    yield hub
    huggingface_hub.close_session()


def test_fetched_once_through_the_gateway(tmp_path: Path, on_hub: Hub) -> None:
    cfg = load(tmp_path, MODEL="hf://org/w/run/best.pt", HUB_WAIT="2")
    found = weights.source(cfg)
    assert weights.check(found, cfg.hub_wait) == len(CHECKPOINT)  # the bytes still to fetch
    path = weights.fetch(found, cfg.hub_wait)
    assert path.read_bytes() == CHECKPOINT and weights.local(weights.source(cfg)) == path
    asked = len(on_hub.requests)
    assert weights.check(weights.source(cfg), cfg.hub_wait) == 0  # a restart: on the volume already
    assert weights.fetch(weights.source(cfg), cfg.hub_wait) == path
    assert len(on_hub.requests) == asked


def test_a_missing_file_ends_before_staging_with_its_line(tmp_path: Path, on_hub: Hub) -> None:
    cfg = load(tmp_path, MODEL="hf://org/w/run/nope.pt", HUB_WAIT="2")
    with pytest.raises(TrainboxError) as caught:
        weights.check(weights.source(cfg), cfg.hub_wait)
    assert caught.value.code == ExitCode.DATASET
    assert str(caught.value) == (
        "MODEL=hf://org/w/run/nope.pt: run/nope.pt is not in the Hub model repo org/w (or the "
        "repo is private and HF_TOKEN cannot read it): check the name, or set HF_TOKEN"
    )
    assert not (tmp_path / "ws" / "weights").exists()


def test_the_weights_download_while_the_dataset_stages(
    tmp_path: Path, on_hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the job's own preparation: the test Hub serves the dataset while the start
    weights and a distillation teacher come, each once, through the gateway."""
    tar_on_hub(on_hub, "org/shapes", tmp_path / "shapes", 1_200_000)
    on_hub.add("org/t", {"LibreYOLO9m.pt": CHECKPOINT[::-1]}, kind="models")
    on_hub.rate = 600_000  # each body takes about 2 s
    settings = {"WORKSPACE": str(tmp_path / "ws"), "DEVICE": "cpu", "DOCTOR": "false",
                "DATASET_REPO": "org/shapes", "MODEL": "hf://org/w/run/best.pt",
                "TRAIN_ARGS": "distill_model=hf://org/t/LibreYOLO9m.pt",
                "HF_ENDPOINT": on_hub.url}  # fmt: skip
    for name, value in settings.items():
        monkeypatch.setenv(name, value)  # the preflight's child process reads them
    cfg = config.load()
    before_training(cfg)
    assert stage.data_yaml(stage.Wanted.of(cfg)).is_file()  # what training reads
    [start] = [s for s in on_hub.served if s.name == "run/best.pt"]  # fetched once
    [teacher] = [s for s in on_hub.served if s.name == "LibreYOLO9m.pt"]
    [dataset] = [s for s in on_hub.served if s.name == "shapes.tar"]
    assert start.overlaps(dataset), "the two downloads never overlapped"
    assert teacher.overlaps(dataset), "the teacher did not come while the dataset staged"
    assert (tmp_path / "ws/weights/org/w/run/best.pt").read_bytes() == CHECKPOINT
    taught = weights.local_teacher(weights.teacher(cfg))  # what the job prepares for training
    assert taught == tmp_path / "ws/weights/org/t/LibreYOLO9m.pt"
    assert taught.read_bytes() == CHECKPOINT[::-1]


def tiny_dinov2(folder: Path) -> Path:
    """A DINOv2 as transformers saves one (config.json, model.safetensors), about 60 kB."""
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, image_size=56)  # fmt: skip
    Dinov2Model(config).save_pretrained(folder)
    return folder


def test_a_dinov2_teacher_is_fetched_where_transformers_finds_it_with_the_hub_down(
    tmp_path: Path, on_hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LibreYOLO's DINOv2Teacher loads ``facebook/dinov2-base`` by its Hub id (transformers'
    ``from_pretrained``): the gateway fetches what that reads into the Hub client's cache, by
    the client itself through Xet as the Hub serves it, and LibreYOLO then builds the teacher
    from there while the Hub refuses every connection."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    api = huggingface_hub.HfApi(endpoint=on_hub.url, token=GOOD_TOKEN)
    api.create_repo("facebook/dinov2-base")
    api.upload_folder(repo_id="facebook/dinov2-base", folder_path=tiny_dinov2(tmp_path / "dino"))
    cfg = load(tmp_path, TRAIN_ARGS="distill_model=dinov2", HUB_WAIT="2")
    files = weights.teacher(cfg)
    assert [(f.target.repo, f.target.name, f.path) for f in files] == [
        ("facebook/dinov2-base", "config.json", None),
        ("facebook/dinov2-base", "model.safetensors", None),
    ]
    for each in files:
        weights.check(each, cfg.hub_wait)
    weights.Background(cfg.hub_wait, *files).result()
    assert any("/reconstructions/" in path for _, path in on_hub.requests), "not through Xet"
    assert weights.local_teacher(weights.teacher(cfg)) is None  # LibreYOLO gets the name
    asked = len(on_hub.requests)
    for each in weights.teacher(cfg):  # a restart: in the cache already, nothing asked
        weights.check(each, cfg.hub_wait)
        weights.fetch(each, cfg.hub_wait)
    assert len(on_hub.requests) == asked
    on_hub.refuse(600)  # the Hub cannot be asked once training starts
    from libreyolo.distillation.teachers import DINOv2Teacher

    assert DINOv2Teacher("dinov2").hidden_size == 32  # as LibreYOLO's trainer builds it


def test_a_missing_dinov2_teacher_ends_before_staging(tmp_path: Path, on_hub: Hub) -> None:
    cfg = load(tmp_path, TRAIN_ARGS="distill_model=dinov2_vits14", HUB_WAIT="2")
    with pytest.raises(TrainboxError) as caught:
        for each in weights.teacher(cfg):
            weights.check(each, cfg.hub_wait)
    assert caught.value.code == ExitCode.DATASET
    assert str(caught.value).startswith(
        "distill_model=dinov2_vits14: config.json is not in the Hub model repo "
        "facebook/dinov2-small"
    )


def test_a_local_dataset_is_checked_before_the_hub_is_asked_for_weights(
    tmp_path: Path, on_hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DATA in the container is checked in an instant; the start weights come after it."""
    for name, value in {"WORKSPACE": str(tmp_path / "ws"), "DEVICE": "cpu",
                        "DATA": str(tmp_path / "no.yaml"), "MODEL": "LibreYOLO9s.pt",
                        "HF_ENDPOINT": on_hub.url}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    asked = len(on_hub.requests)
    with pytest.raises(TrainboxError) as caught:
        before_training(config.load())
    assert caught.value.code == ExitCode.DATASET and "DATA=" in str(caught.value)
    assert len(on_hub.requests) == asked
