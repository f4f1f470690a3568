"""What a run's training writes on the volume: the checkpoints it keeps and the exports, each
with its published copy. ``trainbox plan disk`` sizes a disk with it; the start checks that
what is still to be written fits."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.settings.config import Config

if TYPE_CHECKING:
    from entrypoint.training import weights

# A libreyolo checkpoint holds the model's weights, their training copy, their EMA and the
# optimizer's state: LibreYOLO9t's 8.2 MB of weights gave 35.3 MB checkpoints (libreyolo 1.6.0).
CHECKPOINT_FACTOR = 4.3


def checkpoint_bytes(model: str) -> int:
    """A training checkpoint's size for ``model``, from its architecture built on the CPU."""
    from entrypoint.training.weights import architecture

    network = architecture(model)
    net = getattr(network, "model", network)
    weights = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    return int(weights * CHECKPOINT_FACTOR)


@dataclass(frozen=True)
class Outputs:
    """A whole run's: ``checkpoint`` bytes each, ``epochs`` / ``save_period`` snapshots beside
    best and last, ``exports`` formats."""

    checkpoint: int
    epochs: int
    save_period: int
    exports: int

    @property
    def snapshots(self) -> int:
        return self.epochs // self.save_period if self.save_period else 0

    @property
    def kept(self) -> int:
        return 2 + self.snapshots  # best, last and the snapshots

    @property
    def checkpoints(self) -> int:
        return self.kept * self.checkpoint * 2  # in weights/ and in the published copy

    @property
    def model(self) -> float:
        return self.checkpoint / CHECKPOINT_FACTOR  # an export holds the weights once

    @property
    def exported(self) -> float:
        return self.exports * self.model * 2  # in export/ and in the published copy

    @property
    def total(self) -> int:
        return int(self.checkpoints + self.exported)


def left(cfg: Config, start: "weights.Source | None", fetching: int) -> int:
    """At start: the bytes this node's training will still write, less what the run holds
    already. Only node 0 writes them (LibreYOLO saves on rank 0). ``start``: the start
    weights, ``fetching`` bytes of them still to come."""
    from entrypoint.state import snapshot
    from entrypoint.training import export

    if cfg.node_rank:
        return 0
    checkpoint = _checkpoint(cfg.run_dir, cfg.model, start, fetching)
    whole = Outputs(checkpoint, cfg.epochs, cfg.save_period, len(export.formats(cfg.export)))
    held = sum(f.stat().st_size for folder in (cfg.run_dir, snapshot.folder(cfg.run_dir))
               for f in folder.rglob("*") if f.is_file())  # fmt: skip
    return max(0, whole.total - held)


def _checkpoint(run_dir: Path, model: str, start: "weights.Source | None", fetching: int) -> int:
    """A checkpoint's bytes: a resumed run's ``last.pt``'s; else estimated from the
    architecture MODEL names; else (hf://... or a path, whose name does not say it) the start
    weights' own, a lower bound: a checkpoint holds at least the weights."""
    from entrypoint.training.weights import PREFIX

    last = run_dir / "weights" / "last.pt"
    if last.is_file():
        return last.stat().st_size
    if not (model.startswith(PREFIX) or Path(model).is_absolute()):
        return checkpoint_bytes(model)  # a LibreYOLO name, checked at start
    here = start is not None and start.path is not None and start.path.is_file()
    return start.path.stat().st_size if here else fetching
