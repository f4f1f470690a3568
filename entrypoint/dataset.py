"""Stage the training data: the configured data.yaml, or the built-in demo."""

import logging
from pathlib import Path

from .config import Config
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")


def data_yaml(cfg: Config) -> Path:
    """The data.yaml that training reads."""
    return Path(cfg.data) if cfg.data else cfg.workspace / "data" / "demo" / "data.yaml"


def stage(cfg: Config) -> Path:
    """Make the dataset ready on the volume, once; return its data.yaml."""
    path = data_yaml(cfg)
    if not cfg.is_demo:
        if not path.is_file():
            raise TrainboxError(
                f"DATA={cfg.data}: no such file in the container; mount the dataset "
                "under /workspace and point DATA at its data.yaml, or unset DATA for the demo",
                ExitCode.DATASET,
            )
        return path
    from . import demo  # numpy and PIL load only when the demo is used

    _, written = demo.ensure(path.parent)
    log.info("demo dataset %s %s", "written to" if written else "reused from", path.parent)
    return path
