"""Which checkpoint a run goes on from: the job's decision (whether to fetch MODEL's start
weights) and the train program's (what to load) are one test of the same files."""

from pathlib import Path

import pytest
import torch

from entrypoint.settings import config
from entrypoint.state.snapshot import folder
from entrypoint.training import resume


@pytest.fixture
def cfg(tmp_path: Path) -> config.Config:
    return config.load({"WORKSPACE": str(tmp_path)})


def save(path: Path, epoch: int) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": epoch}, path)
    return path.read_bytes()


def test_a_torn_checkpoint_alone_leaves_the_start_weights_to_be_fetched(cfg) -> None:
    """Killed while saving, with nothing published: no checkpoint, so the job fetches MODEL
    through the gateway, where LibreYOLO would otherwise download it itself at training."""
    last = cfg.run_dir / "weights" / "last.pt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"half a checkpoint")
    assert resume.has_checkpoint(cfg.run_dir) is False
    assert resume.checkpoint(cfg.run_dir) is None


def test_a_torn_checkpoint_goes_on_from_its_published_copy(cfg) -> None:
    last = cfg.run_dir / "weights" / "last.pt"
    kept = save(folder(cfg.run_dir) / "last.pt", 2)
    last.parent.mkdir(parents=True)
    last.write_bytes(b"half a checkpoint")
    assert resume.has_checkpoint(cfg.run_dir) is True
    assert resume.checkpoint(cfg.run_dir) == last and last.read_bytes() == kept


def test_a_whole_checkpoint_is_the_one_and_nothing_is_copied(cfg) -> None:
    last = cfg.run_dir / "weights" / "last.pt"
    mine = save(last, 3)
    save(folder(cfg.run_dir) / "last.pt", 2)
    assert resume.has_checkpoint(cfg.run_dir) and resume.checkpoint(cfg.run_dir) == last
    assert last.read_bytes() == mine
