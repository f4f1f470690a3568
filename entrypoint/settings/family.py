"""The LibreYOLO family ``MODEL`` names, and what its trainer trains with: the config class
whose options and defaults apply, the task, LoRA, rectangular image sizes.

LibreYOLO has no public "model name to trainer" lookup: each wrapper imports its trainer inside
``train()``, chosen by its task (``models/ec/model.py``: ``ECSegTrainer`` for ``-seg``). Its
CLI takes the wrapper's ``TRAIN_CONFIG`` instead, which is None for D-FINE, EC, YOLO-NAS,
PP-LiteSeg, SegFormer, LingBotVision and V-JEPA2 and one class for GTR's six tasks. So the
trainer is found the way LibreYOLO 1.6.0 lays them out: the ``BaseTrainer`` subclasses defined
in ``libreyolo/models/FAMILY/*trainer*.py`` whose ``get_model_family()`` is the family, the one
in ``TASK_trainer.py`` for a task that has its own (``seg_trainer.py``), else ``trainer.py``.
``tests/settings/test_family.py`` checks it against the trainer each wrapper's ``train()``
really builds. Only imports: no network is built, nothing is downloaded.
"""

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# The modules a task's own trainer lives in (libreyolo/models/*/), by the task they serve.
TASK_MODULES = {
    "seg_trainer": "segment",
    "pose_trainer": "pose",
    "obb_trainer": "obb",
    "depth_trainer": "depth",
    "sem_trainer": "semantic",
}


@dataclass(frozen=True)
class Family:
    """A LibreYOLO family as one model name trains it."""

    name: str  # LibreYOLO's family key, e.g. "dfine"
    task: str  # "detect", "segment", "classify", ...
    trainer: type  # the BaseTrainer subclass its wrapper's train() builds

    @property
    def config(self) -> type:
        """The training config class the trainer builds its options into."""
        return self.trainer._config_class()

    @property
    def lora(self) -> bool:
        return bool(self.trainer.supports_lora)

    @property
    def rectangle_stride(self) -> int | None:
        """The stride both sides of a rectangular image size must divide by; None where this
        family and task train on squares only (LibreYOLO's ``BaseTrainer.setup``)."""
        from libreyolo.training import trainer as base

        tasks = base.RECTANGULAR_TRAINING_TASKS.get(
            self.name, base._DEFAULT_RECTANGULAR_TRAINING_TASKS
        )
        return base.RECTANGULAR_TRAINING_FAMILIES.get(self.name) if self.task in tasks else None


def name_of(model: str) -> str | None:
    """The family ``model``'s file name says, as LibreYOLO's CLI finds it (None: it does not)."""
    from libreyolo.cli.config import detect_family_from_model_ref

    return detect_family_from_model_ref(model.rpartition("/")[2])


def of(model: str) -> Family | None:
    """The family ``model`` (a name such as LibreDFINEn.pt, hf://…/LibreECs-seg.pt) trains as;
    None when its name does not say (run/best.pt)."""
    from libreyolo.cli.config import get_model_class

    family = name_of(model)
    if family is None:
        return None
    wrapper = get_model_class(family)
    task = wrapper.detect_task_from_filename(Path(model).name) or wrapper.DEFAULT_TASK
    return Family(family, task, trainer_for(family, task))


def trainer_for(family: str, task: str) -> type:
    """The trainer class LibreYOLO trains ``family`` with on ``task``."""
    found = _trainers(family)
    for module, trainer in found.items():
        if TASK_MODULES.get(module) == task:
            return trainer
    return found["trainer"]


@cache
def _trainers(family: str) -> dict[str, type]:
    """{module: trainer class} for the trainers ``libreyolo.models.FAMILY`` defines."""
    from libreyolo.training.trainer import BaseTrainer

    package = importlib.import_module(f"libreyolo.models.{family}")
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        if "trainer" not in info.name:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, BaseTrainer)
                and cls.__module__ == module.__name__
                and cls.get_model_family(None) == family
            ):
                found[info.name] = cls
    return found
