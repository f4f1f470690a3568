"""Run state, readable from outside: libreyolo's own status, and the container's phase.

``/workspace/trainbox/status.json`` (atomic, a few hundred bytes) says what the container
is doing: ``preflight``, ``staging``, ``training``, then ``completed``, ``failed`` or
``interrupted`` with the exit code and whether the final upload succeeded.
"""

import json
import time
from pathlib import Path
from typing import Any

from .atomic import write_atomic

ENDED = {0: "completed", 130: "interrupted"}


def run_state(run_dir: Path) -> str | None:
    """libreyolo's ``state`` (running, completed, failed) for a run, or None if it never started."""
    try:
        return json.loads((run_dir / "status.json").read_text()).get("state")
    except (OSError, ValueError, AttributeError):
        return None


def path(workspace: Path) -> Path:
    return workspace / "trainbox" / "status.json"


def read(workspace: Path) -> dict[str, Any]:
    try:
        return json.loads(path(workspace).read_text())
    except (OSError, ValueError):
        return {}


def record(workspace: Path, phase: str, *, fresh: bool = False, **fields: Any) -> None:
    """Set the container's phase and fields; ``fresh`` starts a new status (a new start)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kept = {} if fresh else read(workspace)
    status = {"started_at": now, **kept, **fields, "phase": phase, "updated_at": now}
    write_atomic(path(workspace), json.dumps(status, indent=2) + "\n")


def ended(code: int) -> str:
    """The final phase for an exit code."""
    return ENDED.get(code, "failed")
