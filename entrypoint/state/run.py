"""This process's run, as one object: the job's settings, the volume as this node sees it, the
start's runtime folder, and what the job prepared for its programs.

``trainbox run`` (the job) builds it as it starts, and writes into the runtime folder, a fresh
one per start and never the volume, what its programs (the watchdog, train and its ranks, the
uploader, the dashboard) need: the resolved settings first (the watchdog needs them from the
preflight on), then, before training starts, the GPU count and dataloader workers the preflight
chose, the data.yaml staged and the start weights and teacher fetched. Each program builds its
own ``Run`` once, with ``here`` (the one reader of ``TRAINBOX_RUNTIME``), and passes it down;
nothing else in the package reads the environment for it.
"""

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from entrypoint.settings import config
from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume
from entrypoint.state import store


@dataclass(frozen=True)
class Prepared:
    """What the job prepared before training, once."""

    gpus: int  # the GPUs the preflight proved (0: CPU)
    workers: int  # the dataloader workers per GPU (the preflight may have lowered WORKERS)
    data_yaml: Path  # what training reads
    start: Path | None = None  # the start weights MODEL names, fetched while staging
    teacher: Path | None = None  # distill_model's file, fetched while staging (DINOv2: none)


@dataclass(frozen=True)
class Run:
    """One process's run: built once, passed down."""

    settings: Config
    runtime: Path | None = None  # this start's runtime folder; None for a command run by hand
    prepared: Prepared | None = None  # None until the job has prepared the run

    @property
    def volume(self) -> Volume:
        return self.settings.volume

    @property
    def environ(self) -> dict[str, str]:
        """The environment for a process this run starts: it names the runtime folder."""
        return {**os.environ, **({store.RUNTIME: str(self.runtime)} if self.runtime else {})}

    def with_prepared(self, prepared: Prepared) -> "Run":
        """This run, prepared: written once into the runtime folder for the programs."""
        assert self.runtime is not None, "only the job prepares a run"
        store.write_prepared(self.runtime, {
            "gpus": prepared.gpus, "workers": prepared.workers,
            **{k: str(v) for k, v in vars(prepared).items() if isinstance(v, Path)},
        })  # fmt: skip
        return replace(self, prepared=prepared)


def start(settings: Config) -> Run:
    """The job's run: a new runtime folder for this start, its settings written there."""
    runtime = Path(tempfile.mkdtemp(prefix="trainbox-"))
    store.write_settings(runtime, settings.dump())
    return Run(settings, runtime)


def here(environ: Mapping[str, str] = os.environ) -> Run:
    """This program's run: the job's settings and preparation when ``trainbox run`` started
    it (its runtime folder named by TRAINBOX_RUNTIME), else the settings, for one run by hand."""
    named = environ.get(store.RUNTIME)
    runtime = Path(named) if named else None
    found = store.settings(runtime) if runtime else {}
    if not found:
        return Run(config.load(environ))
    done = store.prepared(runtime)
    prepared = done and Prepared(int(done["gpus"]), int(done["workers"]), Path(done["data_yaml"]),
                                 *(Path(done[k]) if done.get(k) else None
                                   for k in ("start", "teacher")))  # fmt: skip
    return Run(config.restore(found), runtime, prepared or None)
