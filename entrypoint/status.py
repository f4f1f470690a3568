"""Reading a run's state from the files libreyolo writes in its run folder."""

import json
from pathlib import Path


def run_state(run_dir: Path) -> str | None:
    """libreyolo's ``state`` (running, completed, failed) for a run, or None if it never started."""
    try:
        return json.loads((run_dir / "status.json").read_text()).get("state")
    except (OSError, ValueError, AttributeError):
        return None
