"""What the run wants of the dataset stage: the few settings staging reads, taken from the run's
config once, at the stage's door (``Wanted.of``), so that no function of the stage holds the
whole config."""

from dataclasses import dataclass
from pathlib import Path

from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume


@dataclass(frozen=True)
class Wanted:
    """The dataset's settings: where it comes from, how it is published, how it is fetched."""

    workspace: Path  # the volume's root
    volume: Volume  # the volume as this node sees it: its status gets the staging's progress
    data: str  # DATA: a data.yaml in the container ("" with a Hub dataset or the demo)
    repo: str  # DATASET_REPO
    file: str  # DATASET_FILE
    revision: str  # DATASET_REVISION
    form: str  # DATASET_FORMAT
    config: str  # DATASET_CONFIG
    bbox_format: str  # BBOX_FORMAT
    val_fraction: float  # VAL_FRACTION
    hub_wait: float  # HUB_WAIT
    parallel: int  # STAGE_PARALLEL
    checkpoint: int  # STAGE_CHECKPOINT

    @classmethod
    def of(cls, cfg: Config) -> "Wanted":
        return cls(cfg.workspace, cfg.volume, cfg.data, cfg.dataset_repo, cfg.dataset_file,
                   cfg.dataset_revision, cfg.dataset_format, cfg.dataset_config,
                   cfg.bbox_format, cfg.val_fraction, cfg.hub_wait, cfg.stage_parallel,
                   cfg.stage_checkpoint)  # fmt: skip

    @property
    def folder(self) -> Path:
        """Where the dataset lives on the volume."""
        return self.workspace / "data" / (self.repo.rpartition("/")[2] if self.repo else "demo")

    @property
    def is_demo(self) -> bool:
        return not (self.data or self.repo)
