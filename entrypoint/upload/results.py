"""What a run ends as on the Hub, beside its weights: the evaluation's files, then the model
card, each in a commit of its own, always after the weights.

The real Hub refuses a commit whose README metadata it finds invalid (400 "Invalid metadata in
README.md"): in a commit of its own, a refused card never holds back a checkpoint, and its
refusal is one warning line with the Hub's words; the run's exit code stays as it was.
"""

import json
import logging
from pathlib import Path
from typing import Any

from entrypoint.errors import TrainboxError
from entrypoint.gateways import hub
from entrypoint.settings.launchers import Volume
from entrypoint.state import snapshot
from entrypoint.training import evaluation
from entrypoint.upload import card

log = logging.getLogger("trainbox")

README = "README.md"


def _target(output_repo: str, name: str = "") -> hub.Target:
    return hub.Target("OUTPUT_REPO", output_repo, name=name, repo_type="model")


def push_evaluation(output_repo: str, run_dir: Path, *, wait: float) -> bool:
    """Commit ``runs/RUN/evaluation/`` as ``RUN/evaluation/``; False (said) when it failed."""
    folder = run_dir / evaluation.FOLDER
    files: dict[str, Path | bytes] = {
        f"{run_dir.name}/{evaluation.FOLDER}/{path.relative_to(folder).as_posix()}": path
        for path in sorted(folder.rglob("*")) if path.is_file()
    }  # fmt: skip
    if not files:
        return False
    try:
        hub.put(_target(output_repo), files, f"{run_dir.name}: evaluation of best.pt", wait=wait)
    except TrainboxError as err:
        log.warning("the evaluation was not uploaded: %s; it stays in %s", err, folder)
        return False
    log.info("uploaded the evaluation: %s/%s/%s", output_repo, run_dir.name, evaluation.FOLDER)
    return True


def push_run_card(
    output_repo: str,
    run_dir: Path,
    volume: Volume,
    *,
    wait: float,
    ended: str = "",
    notified: dict[str, str] | None = None,
) -> str | None:
    """``push_card`` with this run's record (``card.record``); ``notified``: the
    NOTIFY events the run has had, as ``RUN/notified.json`` in the same commit (the end's own
    event comes after the final upload; outside the published index, which the ledger and
    ``ON_EXIT``'s check of the Hub keep to the uploader's commits)."""
    mine = card.record(run_dir, volume, ended)
    told = json.dumps(notified, indent=2).encode() if notified else None
    also: dict[str, Path | bytes] = {f"{run_dir.name}/{snapshot.NOTIFIED}": told} if told else {}
    return push_card(output_repo, [mine], wait=wait, also=also)


def push_card(output_repo: str, runs: list[dict[str, Any]], *, wait: float,
              also: dict[str, Path | bytes] | None = None) -> str | None:  # fmt: skip
    """Write the repo's card with ``runs`` (their records) in it, keeping what a person wrote,
    and ``also`` (more files) in the same commit; the page's URL, or None (said) when the Hub
    refused it or could not be asked. An unchanged card alone is not committed again."""
    try:
        held = hub.read(_target(output_repo, README), wait=wait)
        existing = held[0].decode(errors="replace") if held else None
        text = card.render(runs, output_repo, existing)
        files = {**({README: text.encode()} if text != existing else {}), **(also or {})}
        if files:
            hub.put(_target(output_repo), files, f"{runs[-1]['name']}: model card", wait=wait)
    except TrainboxError as err:
        log.warning("the model card was not written: %s; the weights are not affected", err)
        return None
    except Exception as err:  # any: a card never harms the run or its uploads
        log.warning("the model card was not written: %s: %s", type(err).__name__, err)
        return None
    return hub.page(output_repo)
