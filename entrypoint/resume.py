"""Resume anywhere: from the newest checkpoint that loads, on this volume or on the Hub.

On this volume, an interrupted run goes on from ``weights/last.pt``, or from the published
copy when that file was torn by a kill in the middle of ``torch.save``. On an empty volume,
the run's ``last.pt`` and manifest come down from OUTPUT_REPO first.
"""

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import errors as hub_errors
from huggingface_hub import hf_hub_download

from . import hub
from .config import Config
from .errors import ExitCode, TrainboxError
from .publish import FOLDER, MANIFEST
from .status import run_state

log = logging.getLogger("trainbox")


def loads(path: Path) -> bool:
    """Whether a checkpoint loads (a torn file does not)."""
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception:
        return False
    return True


def checkpoint(cfg: Config) -> Path | None:
    """The checkpoint an interrupted run resumes from, put back in weights/; None: start anew."""
    last = cfg.run_dir / "weights" / "last.pt"
    published = cfg.run_dir / FOLDER / "last.pt"
    if run_state(cfg.run_dir) == "completed" or not (last.is_file() or published.is_file()):
        return None
    if last.is_file() and loads(last):
        return last
    if published.is_file() and loads(published):
        log.warning("%s is torn (killed while saving): resuming from the published copy", last)
        last.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(published, last)
        return last
    log.warning("no checkpoint of %s loads: training starts from the beginning", cfg.run_dir)
    return None


def fetch(cfg: Config) -> dict[str, Any] | None:
    """On a volume without this run, bring its last.pt and manifest down from OUTPUT_REPO.

    Returns the run's manifest when there was one to resume. A run the Hub says completed
    gets its status.json only, so that it is not trained again. A Hub that cannot be asked
    stops the run: starting over would overwrite the Hub's newer weights with epoch 1.
    """
    local = run_state(cfg.run_dir) or (cfg.run_dir / "weights").exists()
    # Several machines all take the Hub's copy, so that every rank starts from the same one.
    if not cfg.output_repo or (local and cfg.nnodes == 1):
        return None
    with tempfile.TemporaryDirectory(dir=cfg.workspace) as scratch:
        remote_status = _download(cfg, "status.json", scratch)
        if remote_status is None:
            return None  # nothing to resume: a new run
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        if json.loads(remote_status.read_text()).get("state") == "completed":
            shutil.move(remote_status, cfg.run_dir / "status.json")
            log.info("run %s is completed on %s", cfg.run_name, cfg.output_repo)
            return None
        manifest, last = _download(cfg, MANIFEST, scratch), _download(cfg, "last.pt", scratch)
        if manifest is None or last is None:
            return None
        (cfg.run_dir / "weights").mkdir(exist_ok=True)
        shutil.move(last, cfg.run_dir / "weights" / "last.pt")  # replaces a local one
        log.info("resuming run %s from the last.pt on %s", cfg.run_name, cfg.output_repo)
        return json.loads(manifest.read_text())


def _download(cfg: Config, name: str, folder: str) -> Path | None:
    """One file of this run from OUTPUT_REPO, or None when it is not there."""
    try:
        return Path(hub.retrying(
            lambda: hf_hub_download(cfg.output_repo, f"{cfg.run_name}/{name}", local_dir=folder,
                                    token=hub.token()),
            f"download {name}",
        ))  # fmt: skip
    except (hub_errors.EntryNotFoundError, hub_errors.RepositoryNotFoundError):
        return None
    except Exception as err:
        if not hub.is_hub_failure(err):
            raise
        if hub.status_of(err) in (401, 403):
            raise TrainboxError(
                f"the Hub refused HF_TOKEN for OUTPUT_REPO={cfg.output_repo} "
                f"({hub.status_of(err)}): use a token with write access to it",
                ExitCode.UPLOAD,
            ) from None
        raise TrainboxError(
            f"cannot ask OUTPUT_REPO={cfg.output_repo} for run {cfg.run_name!r} to resume "
            f"({hub.status_of(err) or type(err).__name__}): start again later, or set a new "
            "RUN_NAME",
            ExitCode.HUB,
        ) from None


def check_dataset(cfg: Config, previous: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse to resume a run on other data than its manifest's, unless allowed."""
    before, now = previous.get("dataset"), current.get("dataset")
    if before == now or cfg.allow_dataset_change:
        return
    raise TrainboxError(
        f"run {cfg.run_name!r} on OUTPUT_REPO was trained on {_describe(before)}, this "
        f"container has {_describe(now)}: set ALLOW_DATASET_CHANGE=true to resume on it, or "
        "a new RUN_NAME",
        ExitCode.CONFIG,
    )


def _describe(dataset: dict[str, Any] | None) -> str:
    if not dataset:
        return "an unknown dataset"
    if "repo" in dataset:
        return f"{dataset['repo']}@{str(dataset.get('commit', '?'))[:12]}"
    return str(dataset.get("data", "the built-in demo"))
