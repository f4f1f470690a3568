"""The published snapshot's folder, index and manifest, one place for the training that writes
it, the uploader that pushes it and its final record, and the resume and the ending that read it."""

from pathlib import Path
from typing import Any

from entrypoint.files import sha256
from entrypoint.state import store

INDEX, MANIFEST = store.INDEX, store.MANIFEST  # their names on the Hub too
NOTIFIED = "notified.json"  # on the Hub only: the NOTIFY events the run had, its card's commit


def folder(run_dir: Path) -> Path:
    """Where ``WORKSPACE/runs/RUN_NAME`` is published: ``WORKSPACE/trainbox/published/RUN_NAME``."""
    return store.published_folder(run_dir.parent.parent, run_dir.name)


def read_index(run_dir: Path) -> dict[str, Any]:
    """The last published snapshot: {"epoch": N, "files": {name: sha256}}, or an empty one."""
    return store.index(folder(run_dir))


def write_index(run_dir: Path, index: dict[str, Any]) -> None:
    store.write_index(folder(run_dir), index)


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """The run's provenance, published beside its weights (never a secret in it)."""
    store.write_manifest(folder(run_dir), manifest)


def keep(
    run_dir: Path,
    *,
    billed: dict[str, Any] | None = None,
    costs: dict[str, Any] | None = None,
    notified: dict[str, str] | None = None,
) -> None:
    """Keep in the run's manifest, in one rewrite: this container's billed idle seconds
    (``budget.billed``) and its cost (``cost.container``), one entry per container the run has
    had (a resumed run carries the earlier ones, this container's is replaced), and the NOTIFY
    events the run has had (``runtime.notices``: a new machine that resumes it from the Hub
    does not send them again). Nothing before the manifest exists."""
    if not (manifest := store.manifest(folder(run_dir))):
        return
    kept = dict(manifest)
    for key, entry in (("billed", billed), ("costs", costs)):
        if entry:
            mine = entry["container_started"]
            earlier = [e for e in manifest.get(key, []) if e.get("container_started") != mine]
            kept[key] = [*earlier, entry]
    if notified:
        kept["notified"] = notified
    if kept != manifest:
        _rewrite(run_dir, kept)


def _rewrite(run_dir: Path, manifest: dict[str, Any]) -> None:
    """The manifest replaced; when published, indexed anew for the uploader to push."""
    file = folder(run_dir) / MANIFEST
    write_manifest(run_dir, manifest)
    index = read_index(run_dir)
    if MANIFEST in index["files"]:  # published: the uploader pushes the new one
        index["files"][MANIFEST] = sha256(file)
        write_index(run_dir, index)
