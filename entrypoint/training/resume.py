"""Resume anywhere: from the newest checkpoint that loads, on this volume or on the Hub.

Before training, ``fetch`` compares the run's epoch on OUTPUT_REPO (its ``index.json``) with
the epoch inside this volume's checkpoint, and brings the Hub's ``last.pt`` down when it is
later (a volume reattached after another machine trained further, or an empty one). Then
an interrupted run goes on from ``weights/last.pt``, or from the published copy when that
file was torn by a kill in the middle of ``torch.save``.
"""

import json
import logging
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import copy_atomic
from entrypoint.gateways import hub
from entrypoint.settings import options
from entrypoint.settings.config import Config
from entrypoint.state import store
from entrypoint.state.snapshot import INDEX, MANIFEST, NOTIFIED
from entrypoint.state.snapshot import folder as published
from entrypoint.training.progress import run_state

log = logging.getLogger("trainbox")


def loads(path: Path) -> bool:
    """Whether a checkpoint loads (a torn file does not)."""
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception:
        return False
    return True


def _last(run_dir: Path) -> tuple[Path, Path]:
    """This volume's checkpoints of the run: weights/last.pt and its published copy."""
    return run_dir / "weights" / "last.pt", published(run_dir) / "last.pt"


def _loading(run_dir: Path) -> Path | None:
    """The checkpoint of the run on this volume that loads, weights/last.pt first; None when
    none does (a torn file, killed while saving, does not) or the run is completed (which
    the job ends at its ``completed`` step, before anything asks)."""
    found = next((path for path in _last(run_dir) if path.is_file() and loads(path)), None)
    return None if run_state(run_dir) == "completed" else found


def checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint an interrupted run resumes from, put back in weights/; None: start anew."""
    last, copy = _last(run_dir)
    found = _loading(run_dir)
    if found == copy:
        log.warning("%s is torn (killed while saving): resuming from the published copy", last)
        copy_atomic(copy, last)  # the published copy is never written in place
    elif found is None and run_state(run_dir) != "completed" and (last.is_file() or copy.is_file()):
        log.warning("no checkpoint of %s loads: training starts from the beginning", run_dir)
    return last if found else None


def has_checkpoint(run_dir: Path) -> bool:
    """This volume holds a checkpoint of the run that loads: it goes on from there, not from
    MODEL. The same test as ``checkpoint``'s, so that a torn one leaves the start weights to
    be fetched (through the gateway), not to LibreYOLO's own download when training starts.
    On a volume with a checkpoint it costs the job torch's import (2.8 s on the 2-core test
    machine, 2026-12-02), the price of one test for both."""
    return _loading(run_dir) is not None


def epoch_of(path: Path) -> int:
    """The epochs a checkpoint has completed (libreyolo stores the last one, 0-based); 0 when
    it does not load."""
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1
    except Exception:
        return 0


def local_epoch(run_dir: Path) -> int:
    """The epochs of the newest checkpoint on this volume that loads (0: none)."""
    return max(epoch_of(path) for path in _last(run_dir))


def _on_hub(output_repo: str, run_name: str, name: str) -> hub.Target:
    return hub.Target("OUTPUT_REPO", output_repo, f"{run_name}/{name}", repo_type="model")


def hub_epoch(output_repo: str, run_name: str, *, wait: float) -> tuple[int, str | None]:
    """(the epoch of the run's last snapshot on the Hub, the commit it was read at); (0, None)
    when the Hub holds none. Raises when the Hub cannot be asked. A run uploaded without
    ``index.json`` (trainbox before 0.2) is dated by its status.json's completed epochs."""
    found = hub.read(_on_hub(output_repo, run_name, INDEX), wait=wait)
    if found is None:
        found = hub.read(_on_hub(output_repo, run_name, "status.json"), wait=wait)
        return (
            (int(json.loads(found[0]).get("completed_epochs") or 0), found[1])
            if found
            else (0, None)
        )
    data, commit = found
    return int(json.loads(data).get("epoch", 0)), commit


def fetch(cfg: Config) -> dict[str, Any] | None:
    """With OUTPUT_REPO, before training: compare the run on the Hub with this volume's, and
    take the Hub's last.pt when it is later (on several machines, always: every rank then
    starts from the same one). Returns the run's manifest on the Hub (with the NOTIFY record
    its card's commit left beside it), None for a new run.

    Only a definite answer (the repo or the run is not there) means a new run; a Hub that
    cannot be asked for HUB_WAIT seconds ends the run with exit 5, before anything is trained
    or committed. A run the Hub says completed gets its status.json, and is not trained again.
    """
    if not cfg.output_repo:
        return None
    found = hub.read(_on_hub(cfg.output_repo, cfg.run_name, "status.json"), wait=cfg.hub_wait)
    if found is None:
        return None  # no epoch on the Hub: a new run (its manifest may be there, from its start)
    manifest = hub.read(_on_hub(cfg.output_repo, cfg.run_name, MANIFEST), wait=cfg.hub_wait)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    if json.loads(found[0]).get("state") == "completed":
        store.write_libreyolo_status(cfg.run_dir, found[0])
        log.info("run %s is completed on %s", cfg.run_name, cfg.output_repo)
        return None
    if manifest:  # before any checkpoint is fetched, and before staging
        check_options(cfg.run_name, cfg.allow_options_change, json.loads(manifest[0]),
                      options.effective(cfg))  # fmt: skip
    held, commit = hub_epoch(cfg.output_repo, cfg.run_name, wait=cfg.hub_wait)
    here = local_epoch(cfg.run_dir)
    if held and (held > here or cfg.nnodes > 1):
        _take(cfg, commit, held, here)
    elif here:
        log.info("resuming run %s from this volume (epoch %d; the Hub holds %d)", cfg.run_name,
                 here, held)  # fmt: skip
    kept = json.loads(manifest[0]) if manifest else None
    if kept is not None and (told := hub.read(_on_hub(cfg.output_repo, cfg.run_name, NOTIFIED),
                                              wait=cfg.hub_wait)):  # fmt: skip
        kept["notified"] = {**kept.get("notified", {}), **json.loads(told[0])}  # the end's too
    return kept


def _take(cfg: Config, commit: str | None, held: int, here: int) -> None:
    """Bring the Hub's last.pt (of ``commit``) into weights/, checked; the older snapshot
    published on this volume goes, so that it is never uploaded over the Hub's."""
    with tempfile.TemporaryDirectory(dir=cfg.workspace) as scratch:
        target = replace(
            _on_hub(cfg.output_repo, cfg.run_name, "last.pt"), revision=commit or "main"
        )
        downloaded = Path(scratch) / "last.pt"
        if hub.download(target, downloaded, wait=cfg.hub_wait) is None:
            return  # the snapshot lists no last.pt: nothing to take
        if epoch_of(downloaded) < held:
            raise TrainboxError(
                f"the last.pt of run {cfg.run_name} on OUTPUT_REPO={cfg.output_repo} does not "
                f"load as epoch {held}: set a new RUN_NAME, or delete the run there",
                ExitCode.UPLOAD,
            )
        (cfg.run_dir / "weights").mkdir(parents=True, exist_ok=True)
        shutil.move(downloaded, cfg.run_dir / "weights" / "last.pt")  # replaces a local one
    shutil.rmtree(published(cfg.run_dir), ignore_errors=True)
    log.info("resuming run %s from the last.pt on %s (epoch %d; this volume had %d)",
             cfg.run_name, cfg.output_repo, held, here)  # fmt: skip


def check_dataset(run_name: str, allowed: bool, previous: dict[str, Any],
                  current: dict[str, Any]) -> None:  # fmt: skip
    """Refuse to resume a run on other data than its manifest's, unless allowed."""
    before, now = previous.get("dataset"), current.get("dataset")
    if before == now or allowed:
        return
    raise TrainboxError(
        f"run {run_name!r} on OUTPUT_REPO was trained on {_describe(before)}, this "
        f"container has {_describe(now)}: set ALLOW_DATASET_CHANGE=true to resume on it, or "
        "a new RUN_NAME",
        ExitCode.CONFIG,
    )


def check_options(run_name: str, allowed: bool, previous: dict[str, Any],
                  now: dict[str, Any]) -> None:  # fmt: skip
    """Refuse to resume a run with other training options than its manifest's, unless allowed.
    A manifest from before options were recorded has nothing to compare."""
    before = previous.get("train_options")
    if before is None or before == now or allowed:
        return
    changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
    shown = ", ".join(f"{k} {before.get(k, '(default)')} -> {now.get(k, '(default)')}"
                      for k in changed)  # fmt: skip
    raise TrainboxError(
        f"run {run_name!r} on OUTPUT_REPO was trained with other options ({shown}): set "
        "ALLOW_OPTIONS_CHANGE=true to resume with these, or a new RUN_NAME",
        ExitCode.CONFIG,
    )


def _describe(dataset: dict[str, Any] | None) -> str:
    if not dataset:
        return "an unknown dataset"
    if "repo" in dataset:
        return f"{dataset['repo']}@{str(dataset.get('commit', '?'))[:12]}"
    return str(dataset.get("data", "the built-in demo"))
