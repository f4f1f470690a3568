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
import json
import pkgutil
import re
import sys
from dataclasses import dataclass, fields
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

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


# LibreYOLO's name lookup without LibreYOLO. Its registry is built by importing every family
# (torch, torchvision: 5.1 s idle and 9.4 s on a loaded 2-core machine, measured 2026-12-02),
# which the job's start check of the image size would pay at every start only to learn that a
# CNN such as LibreYOLO9t.pt needs no check. So the image's build (and tests/run on a host)
# writes what the lookup reads from LibreYOLO: each wrapper's filename regex in registry order,
# the CLI's short names, and per family and task the rectangle stride and the recipe's imgsz.
# A table of another LibreYOLO version, or none, is not used: the lookup imports LibreYOLO.
TABLE = Path(__file__).with_name("families.json")


@dataclass(frozen=True)
class Known:
    """What the table says of a model name, for the start checks."""

    name: str | None  # the family; None: LibreYOLO recognises no family in the name
    task: str = ""
    square: bool = False  # this family and task train on squares only
    imgsz: int | None = None  # its recipe's image size


def known(model: str) -> Known | None:
    """``model``'s family as the table says LibreYOLO resolves it; None without a usable table."""
    table = _table()
    if table is None:
        return None
    from libreyolo.tasks import normalize_task  # no torch: tasks.py is plain Python

    base = model.rpartition("/")[2]
    name = Path(table["names"].get(base.lower(), base)).name.lower()
    matched = next((c["family"] for c in table["classes"] if re.search(c["pattern"], name)), None)
    row = table["families"].get(matched) if matched else None
    if row is None:
        return None if matched else Known(None)
    found = re.search(row["pattern"], name)
    suffix = found.groupdict().get("task") if found else None
    task = normalize_task(suffix.lstrip("-")) if suffix else row["default_task"]
    facts = row["tasks"].get(task)
    return Known(matched, task, facts["square"], facts["imgsz"]) if facts else None


@cache
def _table() -> dict | None:
    try:
        table = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return None
    return table if table.get("libreyolo") == version("libreyolo") else None


def table() -> dict[str, Any]:
    """The table, from LibreYOLO itself (imports every family)."""
    import libreyolo.cli.config as lookup

    lookup._build_name_map()
    matchers = [(c, p) for c in lookup._iter_model_classes() if (p := c._filename_regex())]
    rows: dict[str, Any] = {}
    for cls, pattern in matchers:
        if cls.FAMILY in rows:
            continue
        tasks = {}
        for task in {cls.DEFAULT_TASK, *getattr(cls, "SUPPORTED_TASKS", ())}:
            try:
                facts = Family(cls.FAMILY, task, trainer_for(cls.FAMILY, task))
            except (ImportError, KeyError):  # no trainer: LibreYOLO cannot train it
                continue
            imgsz = {f.name: f.default for f in fields(facts.config)}.get("imgsz")
            tasks[task] = {"square": facts.rectangle_stride is None,
                           "imgsz": imgsz if isinstance(imgsz, int) else None}  # fmt: skip
        rows[cls.FAMILY] = {"pattern": pattern.pattern, "default_task": cls.DEFAULT_TASK,
                            "tasks": tasks}  # fmt: skip
    return {
        "libreyolo": version("libreyolo"),
        "names": dict(lookup._CLI_NAME_TO_WEIGHTS),
        "classes": [{"family": c.FAMILY, "pattern": p.pattern} for c, p in matchers],
        "families": rows,
    }


def write_table(path: Path = TABLE) -> None:
    """Write the table atomically (the image's build, tests/run)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(table(), indent=1, sort_keys=True) + "\n")
    partial.replace(path)


if __name__ == "__main__":  # python -m entrypoint.settings.family [PATH]
    write_table(Path(sys.argv[1]) if len(sys.argv) > 1 else TABLE)
