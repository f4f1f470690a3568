"""The published snapshot's names, one place for the training that writes it and the uploader,
the resume and the ending that read it: its folder, its index and its manifest."""

from pathlib import Path
from typing import Any

from entrypoint.state import store

INDEX, MANIFEST = store.INDEX, store.MANIFEST  # their names on the Hub too
NOTIFIED = "notified.json"  # on the Hub only: the NOTIFY events the run had, its card's commit


def folder(run_dir: Path) -> Path:
    """Where ``WORKSPACE/runs/RUN_NAME`` is published: ``WORKSPACE/trainbox/published/RUN_NAME``."""
    return store.published_folder(run_dir.parent.parent, run_dir.name)


def read_index(run_dir: Path) -> dict[str, Any]:
    """The last published snapshot: {"epoch": N, "files": {name: sha256}}, or an empty one."""
    return store.index(folder(run_dir))
