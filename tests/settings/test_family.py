"""Every family LibreYOLO can train: the trainer trainbox finds for a model name is the one its
wrapper's ``train()`` really builds, its config class is the one whose options and defaults
apply, and that family's own options pass the start check."""

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from entrypoint.dataset import demo
from entrypoint.settings import config, family, options
from entrypoint.training.weights import architecture

# One model name per family and task LibreYOLO 1.6.0 trains (libreyolo/models/registry.py,
# groups g0-g2), as its published files are named.
MODELS = {
    "LibreYOLO9t.pt": "yolo9",
    "LibreRFDETRn.pt": "rfdetr",
    "LibreYOLO9E2Et.pt": "yolo9_e2e",
    "LibreYOLO9P2t.pt": "yolo9_p2",
    "LibreECs.pt": "ec",
    "LibreECs-seg.pt": "ec",
    "LibreECs-pose.pt": "ec",
    "LibreGTRs.pt": "gtr",
    "LibreGTRs-seg.pt": "gtr",
    "LibreGTRs-obb.pt": "gtr",
    "LibreGTRs-pose.pt": "gtr",
    "LibreGTRs-depth.pt": "gtr",
    "LibreGTRs-sem.pt": "gtr",
    "LibreRTDETRr18.pt": "rtdetr",
    "LibreRTDETRv2r18.pt": "rtdetrv2",
    "LibreRTDETRv4s.pt": "rtdetrv4",
    "LibreDFINEn.pt": "dfine",
    "LibreDEIMn.pt": "deim",
    "LibreDEIMv2atto.pt": "deimv2",
    "LibreTinyFormers.pt": "tinyformer",
    "LibreYOLONASs.pt": "yolonas",
    "LibreYOLONASs-pose.pt": "yolonas",
    "LibreYOLONASs-obb.pt": "yolonas",
    "LibreYOLOXn.pt": "yolox",
    "LibreYOLO7b.pt": "yolo7",
    "LibreRTMDett.pt": "rtmdet",
    "LibrePICODETs.pt": "picodet",
    "LibrePPYOLOEs.pt": "ppyoloe",
    "LibreFOMOs-point.pt": "fomo",
    "LibrePPLiteSegt50-sem.pt": "ppliteseg",
    "LibreUNets-sem.pt": "unet",
    "LibreSegformerb0-sem.pt": "segformer",
    "LibreLingBotVisions-sem.pt": "lingbotvision",
    "LibreDINOv2s-cls.pt": "dinov2",
    "LibreNAFNets-restore.pt": "nafnet",
    "LibreResNet18-cls.pt": "resnet",
    "LibreConvNeXtt-cls.pt": "convnext",
    "LibreConvNeXtV2atto-cls.pt": "convnextv2",
    "LibreMobileNetV4s-cls.pt": "mobilenetv4",
    "LibreEfficientNetV2b0-cls.pt": "efficientnetv2",
    "LibreDOMEDETRs.pt": "domedetr",
    "LibreVJEPA2l256-cls.pt": "vjepa2",
}


def test_every_trainable_family_has_a_model_here() -> None:
    from libreyolo.models.registry import MODEL_GROUPS

    trainable = {name for name, group in MODEL_GROUPS.items() if group in ("g0", "g1", "g2")}
    assert trainable == set(MODELS.values())
    assert len(trainable) == 33


class Built(Exception):
    """Raised where LibreYOLO's trainer would start: which trainer, with what."""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.ensure(tmp_path_factory.mktemp("demo"))[0]


def _data_for(model: str, shapes: Path) -> Path:
    """The demo's data.yaml; for a pose model, one class with the keypoints its wrapper checks
    for before it builds the trainer."""
    if "-pose" not in model:
        return shapes
    posed = shapes.with_name("pose.yaml")
    head = shapes.read_text().partition("names:")[0]
    posed.write_text(head + "names:\n  0: person\nkpt_shape: [17, 3]\n")
    return posed


def _trainer_built(model: str, data: Path, monkeypatch: pytest.MonkeyPatch) -> type:
    """The trainer class the model's own train() constructs (stopped there)."""
    from libreyolo.training.trainer import BaseTrainer

    def stop(self: Any, *args: Any, **kwargs: Any) -> None:
        raise Built(type(self))

    monkeypatch.setattr(BaseTrainer, "__init__", stop)
    with pytest.raises(Built) as built:
        architecture(model).train(data=str(data), epochs=1, batch=2, workers=0)
    return built.value.args[0]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_trainer_found_is_the_one_libreyolo_builds(
    model: str, shapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = family.of(model)
    assert found is not None and found.name == MODELS[model]
    built = _trainer_built(model, _data_for(model, shapes), monkeypatch)
    assert found.trainer is built
    assert options.config_class(model) is built._config_class()


def _own_options(cls: type) -> dict[str, Any]:
    """The options the family's config class adds to LibreYOLO's common ones, at their
    defaults (the values its recipe trains with)."""
    from libreyolo.training.config import TrainConfig

    common = {f.name for f in dataclasses.fields(TrainConfig)}
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
        if f.name not in common and f.name not in options.OWNED
        and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
    }  # fmt: skip


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_familys_own_options_pass_at_start(model: str, tmp_path: Path) -> None:
    cfg = config.load({"WORKSPACE": str(tmp_path), "MODEL": model, "PRETRAINED": "false"})
    own = _own_options(family.of(model).config)
    chosen = options.effective(dataclasses.replace(cfg, train=own))
    assert chosen == own


def test_trainbox_config_shows_the_familys_own_defaults() -> None:
    """D-FINE's recipe, not LibreYOLO's generic TrainConfig (300 epochs, sgd, lr 0.01)."""
    shown = options.defaults("LibreDFINEn.pt")
    assert (shown["epochs"], shown["optimizer"], shown["lr0"]) == (132, "adamw", 2e-4)
    assert "backbone_lr_mult" in shown


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A table written here from this LibreYOLO, read by family.known instead of the package's."""
    path = tmp_path_factory.mktemp("table") / "families.json"
    family.write_table(path)
    family._table.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(family, "TABLE", path)
        yield path
    family._table.cache_clear()


@pytest.mark.parametrize("model", [*sorted(MODELS), "run/best.pt", "hf://org/w/LibreECs-seg.pt",
                                   "yolox-s", "nothing.pt"])  # fmt: skip
def test_the_table_resolves_a_name_as_libreyolo_does(model: str, table: Path) -> None:
    """The start check's lookup without LibreYOLO (family.known) agrees with LibreYOLO's."""
    told = family.known(model)
    found = family.of(model)
    assert told is not None
    assert told.name == (found.name if found else None)
    if found:
        recipe = options.defaults(model).get("imgsz")
        assert (told.task, told.square) == (found.task, found.rectangle_stride is None)
        assert told.imgsz == (recipe if isinstance(recipe, int) else None)
