"""What LibreYOLO's own files say of a run: its state, its progress, its profile verdict.

LibreYOLO writes them in the run folder (``status.json``, ``metrics.jsonl``, ``train.log``,
``profile/profile_summary.json``); trainbox only reads them.
"""

import json
from pathlib import Path
from typing import Any

from entrypoint.state import store

KEYS = ("state", "completed_epochs", "total_epochs", "epoch_seconds", "eta_seconds", "train_loss",
        "current_metric_name", "current_metric", "best_metric_name", "best_metric",
        "best_epoch", "error")  # fmt: skip


def run_state(run_dir: Path) -> str | None:
    """libreyolo's ``state`` (running, completed, failed) for a run, or None if it never started."""
    return store.libreyolo_status(run_dir).get("state")


def training(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The training fields, from libreyolo's status.json, and the time of the last sign of
    progress in the run folder (status.json, metrics.jsonl or train.log written)."""
    theirs = store.libreyolo_status(run_dir)
    fields = {key: theirs[key] for key in KEYS if theirs.get(key) is not None}
    if "epoch_seconds" not in fields and (seconds := _last_epoch_seconds(run_dir)):
        fields["epoch_seconds"] = seconds  # LibreYOLO's final status.json drops it
    files = (run_dir / name for name in ("status.json", "metrics.jsonl", "train.log"))
    times = [file.stat().st_mtime for file in files if file.exists()]
    return fields, store.stamp(max(times)) if times else None


def _last_epoch_seconds(run_dir: Path) -> float | None:
    """The last finished epoch's seconds, from the end of LibreYOLO's metrics.jsonl (its
    ``time``: the epoch's ``epoch_seconds``)."""
    try:
        with (run_dir / "metrics.jsonl").open("rb") as rows:
            rows.seek(max(0, rows.seek(0, 2) - 8192))
            last = rows.read().decode(errors="replace").strip().splitlines()[-1]
        seconds = json.loads(last).get("time")
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def profile(run_dir: Path) -> dict[str, Any] | None:
    """The PROFILE_STEPS verdict, from libreyolo's profile_summary.json, or None."""
    summary = store.libreyolo_profile(run_dir)
    if not summary:
        return None
    real, analysis = summary.get("real", {}), summary.get("analysis", {})
    return {"bound": summary.get("bound"), "why": summary.get("bound_why"),
            "step_ms": real.get("step_ms"), "img_per_s": real.get("img_per_s"),
            "dataload_frac": real.get("dataload_frac"), "gpu_util": analysis.get("gpu_util"),
            "device": summary.get("meta", {}).get("device")}  # fmt: skip
