"""LibreYOLO's own training options, from the YAML's ``train:`` mapping and ``TRAIN_ARGS``,
checked by LibreYOLO's rules before the card bills.

``TRAIN_ARGS`` is LibreYOLO's ``key=value`` syntax (``optimizer=adamw lr0=0.002 cache=ram``);
each value reads as YAML reads a scalar (``0.002`` a number, ``true`` a boolean, ``[1, 2]`` a
list), the types a ``train:`` mapping gives too, and the environment wins key by key. The
checks are LibreYOLO's: the option names and types of the training config class of the model
family ``MODEL`` resolves to (``libreyolo/training/config.py``), its aliases (``mosaic`` is
``mosaic_prob``), its spelling hints, and its validators, which run when the config is built.
Options trainbox sets itself are refused with the setting to use instead.
"""

import re
import shlex
import types
import typing
from dataclasses import MISSING, fields
from typing import Any

import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings.config import Config

LOGGERS = "loggers"  # LibreYOLO's experiment loggers: a train() argument beside its config

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


def requested(cfg: Config) -> tuple[dict[str, Any], dict[str, str]]:
    """The options asked for, the environment over the YAML key by key, and where each came
    from (for error lines)."""
    from_env = parse_args(cfg.train_args)
    merged = {**cfg.train, **from_env}
    where = {key: "TRAIN_ARGS" if key in from_env else f"train.{key}" for key in merged}
    return merged, where


def _family(model: str) -> str | None:
    """The LibreYOLO family ``model`` names, as its CLI finds it (None: its name does not say)."""
    from libreyolo.cli.config import detect_family_from_model_ref

    return detect_family_from_model_ref(model.rpartition("/")[2])


def config_class(model: str) -> type:
    """LibreYOLO's training config class for the family ``model`` names (as its CLI finds it)."""
    from libreyolo.cli.config import get_train_config_class

    family = _family(model)
    if family is None and (model.startswith("hf://") or model.startswith("/")):
        # A checkpoint whose family its name does not tell (run/best.pt): LibreYOLO's
        # options common to every family are checked; the rest by LibreYOLO when it loads.
        from libreyolo.training.config import TrainConfig

        return TrainConfig
    if family is None:
        raise TrainboxError(
            f"MODEL={model!r}: not a LibreYOLO model, so its training options cannot be "
            "checked: use a name such as LibreYOLO9s.pt",
            ExitCode.CONFIG,
        )
    return get_train_config_class(family)


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
    wanted, where = requested(cfg)
    if not wanted:
        return {}
    loggers = {LOGGERS: wanted.pop(LOGGERS)} if LOGGERS in wanted else {}
    if loggers:
        _check_loggers(loggers[LOGGERS], where[LOGGERS])
        if not wanted:
            return loggers
    for key in wanted:
        if key in OWNED:
            raise _fail(f"{where[key]}", f"{key} is set by trainbox: use {OWNED[key]}")
    from libreyolo.training.config import _typo_hint, apply_train_aliases

    cls = config_class(cfg.model)
    try:
        options = apply_train_aliases(wanted)
    except ValueError as err:
        raise _fail("TRAIN_ARGS", str(err)) from None
    origin = {apply_train_aliases({k: None}).popitem()[0]: w for k, w in where.items()}
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        hint = _typo_hint({unknown[0]}, set(known))
        raise _fail(
            origin.get(unknown[0], "TRAIN_ARGS"),
            f"{unknown[0]} is not a training option of {cls.__name__}{hint}; "
            "LibreYOLO's options: https://www.libreyolo.com (docs, training)",
        )
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        if not _fits(value, hints[key]):
            raise _fail(
                origin.get(key, "TRAIN_ARGS"),
                f"{key}={value!r}: expected {_shown(hints[key])} ({cls.__name__})",
            )
    try:
        cls(**options)  # LibreYOLO's own validators run here (__post_init__)
    except (ValueError, TypeError) as err:
        first = str(err).strip().splitlines()[0]
        raise _fail("TRAIN_ARGS" if "TRAIN_ARGS" in where.values() else "train", first) from None
    if "optimizer" in options:
        _check_optimizer(cfg.model, options["optimizer"], origin.get("optimizer", "TRAIN_ARGS"))
    return {**options, **loggers}


# What LibreYOLO 1.6.0's base trainer builds (training/trainer.py, BaseTrainer._setup_optimizer,
# after the model's train() lowercases the name); its config validators accept any string.
BASE_OPTIMIZERS = ("sgd", "adam", "adamw")


def _check_optimizer(model: str, name: str, where: str) -> None:
    """An optimizer the family's trainer would refuse only once training starts, refused now.
    A family whose trainer builds its own optimizer, or one this cannot tell, is left to it."""
    from libreyolo.cli.config import get_model_class
    from libreyolo.training.trainer import BaseTrainer

    try:
        wrapper = get_model_class(_family(model))
        trainer = wrapper._trainer_class(None)  # a class hook that does not use the instance
    except (AttributeError, TypeError, ImportError):
        return
    own = trainer._setup_optimizer is not BaseTrainer._setup_optimizer
    if not own and name.lower() not in BASE_OPTIMIZERS:
        known = ", ".join(BASE_OPTIMIZERS)
        raise _fail(where, f"optimizer={name}: {trainer.__name__} knows {known}")


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
