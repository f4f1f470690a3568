"""What the job prepared, once, for the programs it starts: the resolved settings first, then
the GPU count and dataloader workers the preflight chose, and the data.yaml staged.

The job writes them into the start's runtime folder: the settings as it starts (the watchdog
needs them from the preflight on), the rest before supervisord starts. The programs (the
watchdog, train and its ranks, the uploader, the dashboard) read them instead of building the
config again from the environment.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from entrypoint.settings import config
from entrypoint.settings.config import Config
from entrypoint.state import store


@dataclass(frozen=True)
class Prepared:
    settings: Config
    gpus: int  # the GPUs the preflight proved (0: CPU)
    workers: int  # the dataloader workers per GPU (the preflight may have lowered WORKERS)
    data_yaml: Path  # what training reads


def write_settings(folder: Path, settings: Config) -> None:
    store.write_settings(folder, config.dump(settings))


def write(folder: Path, prepared: Prepared) -> None:
    store.write_prepared(folder, {"gpus": prepared.gpus, "workers": prepared.workers,
                                  "data_yaml": str(prepared.data_yaml)})  # fmt: skip


def _folder() -> Path | None:
    named = os.environ.get(store.RUNTIME)
    return Path(named) if named else None


def settings() -> Config | None:
    """The job's settings, for a program it started; None for one run by hand."""
    folder = _folder()
    found = store.settings(folder) if folder else {}
    return config.restore(found) if found else None


def read() -> Prepared | None:
    """This start's preparation, for a program started after it; None before, or by hand."""
    folder, chosen = _folder(), settings()
    found = store.prepared(folder) if folder else {}
    if not found or chosen is None:
        return None
    return Prepared(chosen, int(found["gpus"]), int(found["workers"]),
                    Path(found["data_yaml"]))  # fmt: skip
