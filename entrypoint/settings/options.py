"""LibreYOLO's own training options, from the YAML's ``train:`` mapping and ``TRAIN_ARGS``,
checked by LibreYOLO's rules before the card bills.

``TRAIN_ARGS`` is LibreYOLO's ``key=value`` syntax (``optimizer=adamw lr0=1e-3 cache=ram``).
Each value is read as YAML reads a scalar (``[1, 2]`` a list, ``true`` a boolean), then, where
that is not the type the option is annotated with, converted to it the way LibreYOLO's CLI
converts its options (typer, through pydantic: ``1e-3`` is the float 0.001, which YAML reads as
a string). The environment wins key by key. The checks are LibreYOLO's, against the config
class of the trainer the family of ``MODEL`` trains with (``family.py``): its option names and
types, its aliases for the model's task (``mixup`` is ``mixup_prob`` for a detector), its
spelling hints, and its validators, which run when the config is built. What the trainer would
refuse only once training started is refused now: LoRA on a family without it, an option whose
package the image lacks, a teacher that cannot teach this model. Options trainbox sets itself
are refused with the setting to use instead.
"""

import re
import shlex
import types
import typing
from dataclasses import MISSING, fields
from typing import Any

import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import family
from entrypoint.settings.config import Config

LOGGERS = "loggers"  # LibreYOLO's experiment loggers: a train() argument beside its config
VAL = "val"  # val=false: no validation while training (TrainConfig.from_kwargs: eval_interval=0)

# LibreYOLO's options that trainbox sets from its own settings, and the setting to use instead.
OWNED = {
    "data": "DATA or DATASET_REPO",
    "device": "DEVICE",
    "epochs": "EPOCHS",
    "batch": "BATCH",
    "imgsz": "IMGSZ",
    "workers": "WORKERS",
    "save_period": "SAVE_PERIOD",
    "project": "RUN_NAME (the run folder is /workspace/runs/RUN_NAME)",
    "name": "RUN_NAME",
    "exist_ok": "nothing: trainbox reuses the run folder to resume",
    "resume": "nothing: trainbox resumes an interrupted run by itself",
}


def _fail(where: str, message: str) -> TrainboxError:
    return TrainboxError(f"{where}: {message}", ExitCode.CONFIG)


def parse_args(text: str) -> dict[str, Any]:
    """``TRAIN_ARGS`` as a mapping: ``key=value`` words, each value a YAML scalar."""
    parsed: dict[str, Any] = {}
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise _fail("TRAIN_ARGS", f"{err}: quote values with spaces") from None
    for word in words:
        key, equals, raw = word.partition("=")
        if not equals or not key.isidentifier():
            raise _fail("TRAIN_ARGS", f"{word!r} is not key=value (e.g. lr0=0.002)")
        try:
            parsed[key] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            parsed[key] = raw
    return parsed


def requested(train: dict, train_args: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The options asked for, the environment over the YAML key by key, and where each came
    from (for error lines)."""
    from_env = parse_args(train_args)
    merged = {**train, **from_env}
    where = {key: "TRAIN_ARGS" if key in from_env else f"train.{key}" for key in merged}
    return merged, where


def _family(model: str) -> family.Family | None:
    """``model``'s family, or None for a checkpoint whose name does not tell (run/best.pt);
    a name that is no LibreYOLO model's is refused."""
    found = family.of(model)
    if found is None and not (model.startswith("hf://") or model.startswith("/")):
        raise TrainboxError(
            f"MODEL={model!r}: not a LibreYOLO model, so its training options cannot be "
            "checked: use a name such as LibreYOLO9s.pt",
            ExitCode.CONFIG,
        )
    return found


def config_class(model: str) -> type:
    """The training config class of the trainer ``model``'s family trains with. For a
    checkpoint whose family its name does not tell, LibreYOLO's options common to every family
    (``TrainConfig``); the rest are checked by LibreYOLO when it loads."""
    from libreyolo.training.config import TrainConfig

    found = _family(model)
    return found.config if found else TrainConfig


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` (from YAML) has the type a config field is annotated with."""
    origin = typing.get_origin(kind)
    if kind is Any or kind is object:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(kind))
    if origin is typing.Literal:
        return value in typing.get_args(kind)
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple) or kind in (list, tuple):
        inner = typing.get_args(kind)
        items = inner[:1] if origin is list or Ellipsis in inner else ()
        if not isinstance(value, list | tuple):
            return False
        return not items or all(_fits(item, items[0]) for item in value)
    if origin is dict or kind is dict:
        return isinstance(value, dict)
    if isinstance(kind, type):
        return isinstance(value, kind)
    return True  # an annotation this check does not know: LibreYOLO's validators decide


def _check_loggers(value: Any, where: str) -> None:
    """LibreYOLO's ``loggers=`` (a ``train()`` argument, not a config field): each a name it
    knows, with its package in the image. The Hub logger (``hf:ORG/REPO``) is not built here:
    building it asks the Hub for the token's rights."""
    from libreyolo.training.loggers import resolve_loggers

    names = value if isinstance(value, list) else [value]
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise _fail(where, f"loggers={value!r}: expected logger names, e.g. tensorboard")
        if name.strip().lower().startswith(("hf:", "huggingface:")):
            if "/" not in name:
                raise _fail(where, f"loggers={name}: expected hf:ORG/REPO")
            continue
        try:
            resolve_loggers(name)
        except ImportError as err:
            package = re.search(r"requires the '([^']+)' package", str(err))
            needed = package[1] if package else name
            raise _fail(
                where,
                f"loggers={name} needs the {needed} package, not in this image: build it with "
                f"EXTRA_PACKAGES={needed}",
            ) from None
        except ValueError as err:
            raise _fail(where, str(err)) from None


def effective(cfg: Config) -> dict[str, Any]:
    """The training options LibreYOLO will be given, checked; a bad one raises one line."""
    _check_image_size(cfg.model, cfg.imgsz)
    wanted, where = requested(cfg.train, cfg.train_args)
    if not wanted:
        return {}
    passed = {key: wanted.pop(key) for key in (LOGGERS, VAL) if key in wanted}
    if LOGGERS in passed:
        _check_loggers(passed[LOGGERS], where[LOGGERS])
    if VAL in passed and not isinstance(passed[VAL], bool):
        raise _fail(where[VAL], f"val={passed[VAL]!r}: expected true or false")
    for key in wanted:
        if key in OWNED:
            raise _fail(f"{where[key]}", f"{key} is set by trainbox: use {OWNED[key]}")
    if not wanted:
        return passed
    found = _family(cfg.model)
    options, origin = _named(wanted, where, found.task if found else None)
    cls = found.config if found else config_class(cfg.model)
    _check_names(options, origin, cls)
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        options[key] = _typed(key, value, hints[key], origin.get(key, "TRAIN_ARGS"), cls)
    try:
        cls(**options)  # LibreYOLO's own validators run here (__post_init__)
    except (ValueError, TypeError) as err:
        first = str(err).strip().splitlines()[0]
        raise _fail("TRAIN_ARGS" if "TRAIN_ARGS" in where.values() else "train", first) from None
    if found:
        _check_trainer(found, options, origin)
    _check_packages(options, origin)
    if teacher := options.get("distill_model"):
        _check_teacher(found, teacher, origin.get("distill_model", "TRAIN_ARGS"))
    return {**options, **passed}


def _check_image_size(model: str, imgsz: int | tuple[int, int]) -> None:
    """A rectangular IMGSZ only where the family trains on rectangles, both sides divisible
    by its largest stride: LibreYOLO's ``BaseTrainer.setup`` refuses it once training starts."""
    if isinstance(imgsz, int) or (found := _family(model)) is None:
        return  # a square, or a checkpoint whose family its name does not tell
    height, width = imgsz
    stride = found.rectangle_stride
    if stride is None:
        raise TrainboxError(
            f"IMGSZ={height}x{width}: {found.name} trains on squares only for {found.task}: "
            f"set one number, e.g. IMGSZ={max(height, width)}",
            ExitCode.CONFIG,
        )
    if height % stride or width % stride:
        near = "x".join(str(max(stride, round(side / stride) * stride)) for side in (height, width))
        raise TrainboxError(
            f"IMGSZ={height}x{width}: both sides must divide by {stride}, the largest stride of "
            f"{found.name}: e.g. IMGSZ={near}",
            ExitCode.CONFIG,
        )


def _named(
    wanted: dict[str, Any], where: dict[str, str], task: str | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The options under their field names, LibreYOLO's aliases for ``task`` applied as its
    model's ``train()`` applies them (``mixup`` is ``mixup_prob`` for a detector, the batch
    MixUp of the same name for a classifier), and where each came from."""
    from libreyolo.training.config import apply_train_aliases

    try:
        options = apply_train_aliases(wanted, task=task)
    except ValueError as err:
        raise _fail("TRAIN_ARGS", str(err)) from None
    origin = {apply_train_aliases({k: None}, task=task).popitem()[0]: w for k, w in where.items()}
    return options, origin


def _check_names(options: dict[str, Any], origin: dict[str, str], cls: type) -> None:
    from libreyolo.training.config import _typo_hint

    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        hint = _typo_hint({unknown[0]}, known)
        raise _fail(
            origin.get(unknown[0], "TRAIN_ARGS"),
            f"{unknown[0]} is not a training option of {cls.__name__}{hint}; "
            "LibreYOLO's options: https://www.libreyolo.com (docs, training)",
        )


def _typed(key: str, value: Any, kind: Any, where: str, cls: type) -> Any:
    """``value`` as the option's type: as read when it is one, else converted the way
    LibreYOLO's CLI converts an option (pydantic's lax mode, which typer uses: ``"1e-3"`` is
    0.001, ``1`` is true); one line when it cannot be."""
    if _fits(value, kind):
        return value
    from pydantic import TypeAdapter

    try:
        converted = TypeAdapter(kind).validate_python(value)
    except Exception:  # a ValidationError, or an annotation pydantic has no schema for
        converted = None
    if converted is None or not _fits(converted, kind):
        raise _fail(where, f"{key}={value!r}: expected {_shown(kind)} ({cls.__name__})")
    return converted


# What LibreYOLO 1.6.0's base trainer builds (training/trainer.py, BaseTrainer._setup_optimizer,
# after the model's train() lowercases the name); its config validators accept any string.
BASE_OPTIMIZERS = ("sgd", "adam", "adamw")


def _check_trainer(found: family.Family, options: dict[str, Any], origin: dict[str, str]) -> None:
    """What the family's trainer would refuse only once training started, refused now."""
    from libreyolo.training.trainer import BaseTrainer

    trainer = found.trainer
    if options.get("lora") and not found.lora:  # BaseTrainer.setup raises it
        raise _fail(
            origin.get("lora", "TRAIN_ARGS"),
            f"lora=true: {trainer.__name__} has no LoRA fine-tuning ({found.name}); LibreYOLO "
            "has it for transformer families such as RF-DETR, D-FINE, DEIM and RT-DETR",
        )
    name = options.get("optimizer")
    own = trainer._setup_optimizer is not BaseTrainer._setup_optimizer
    if name and not own and name.lower() not in BASE_OPTIMIZERS:
        known = ", ".join(BASE_OPTIMIZERS)
        raise _fail(origin.get("optimizer", "TRAIN_ARGS"),
                    f"optimizer={name}: {trainer.__name__} knows {known}")  # fmt: skip


# An option's value that needs a package the default image may lack: (option, the package it
# imports, LibreYOLO's extra that installs it). LibreYOLO imports them only once training starts.
NEEDS = (
    ("lora", "peft", "lora"),  # training/lora.py: _require_peft
    ("export_check", "onnxruntime", "onnx"),  # training/export_check.py
)


def _check_packages(options: dict[str, Any], origin: dict[str, str]) -> None:
    import importlib.util

    for option, package, extra in NEEDS:
        if options.get(option) and importlib.util.find_spec(package) is None:
            raise _fail(
                origin.get(option, "TRAIN_ARGS"),
                f"{option}=true needs the {package} package, not in this image: build it with "
                f"LIBREYOLO_EXTRAS={extra}",
            )


def _check_teacher(found: family.Family | None, teacher: str, where: str) -> None:
    """A teacher LibreYOLO can distil into this model (``BaseTrainer._setup_distillation``):
    DINOv2 (with transformers) into a model with a backbone tap, or a LibreYOLO detector
    into one, both with distillation points (``get_distill_config``)."""
    import importlib.util

    from libreyolo.cli.config import get_model_class
    from libreyolo.distillation.teachers import is_foundation_teacher
    from libreyolo.models.base.model import BaseModel

    student = get_model_class(found.name) if found else None
    if is_foundation_teacher(teacher):
        if importlib.util.find_spec("transformers") is None:
            raise _fail(where, f"distill_model={teacher} needs the transformers package, not in "
                               "this image: build it with LIBREYOLO_EXTRAS=rfdetr")  # fmt: skip
        if student and not hasattr(student, "get_backbone_distill_config"):
            raise _fail(where, f"distill_model={teacher}: LibreYOLO distils a foundation model "
                               f"into YOLO9 only, not {found.name}")  # fmt: skip
        return
    taught = family.of(teacher)
    if taught is None and not teacher.startswith(("hf://", "/")):
        raise _fail(where, f"distill_model={teacher}: not a LibreYOLO model, dinov2, hf://ORG/"
                           "NAME/PATH.pt or a path")  # fmt: skip
    for role, model in (("student", found), ("teacher", taught)):
        wrapper = get_model_class(model.name) if model else None
        if wrapper and wrapper.get_distill_config is BaseModel.get_distill_config:
            raise _fail(where, f"distill_model={teacher}: LibreYOLO has no distillation for "
                               f"{model.name} as the {role} (it has it for yolo9, yolox and "
                               "rfdetr)")  # fmt: skip


def _shown(kind: Any) -> str:
    text = str(kind).replace("typing.", "")
    return text.removeprefix("<class '").removesuffix("'>")


def defaults(model: str) -> dict[str, Any]:
    """LibreYOLO's defaults for ``model``'s family, for ``trainbox config``."""
    cls = config_class(model)
    return {
        f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        for f in fields(cls)
        if f.default is not MISSING or f.default_factory is not MISSING
    }
