#!/usr/bin/env python3
"""Split what the torch step installed into layers of similar size, for pulling.

    python torch_layers.py snapshot ROOT STATE        before the install
    python torch_layers.py split ROOT STATE INTO COUNT EXTRA...   after it

``split`` moves every file under ROOT (the venv) that the install added or changed out of it,
into INTO/1 ... INTO/COUNT, each a tree rooted at /, so that the Dockerfile copies them back
with one ``COPY --from`` per folder. A whole distribution stays in one layer (its RECORD says
which files are its own); the distributions are spread largest first onto the lightest layer,
so the layers come out of similar size for any CUDA flavour without naming a package. The
EXTRA files (the constraints) and ``torch-removed.txt``, the paths the install deleted (an
upgraded setuptools' old files: a COPY cannot delete them), go into the last layer.

Why: the torch stack installed by one pip step is one 5.8 GB layer, and Docker pulls a layer
as one stream and unpacks it only once it is whole. Several layers download in parallel
(three at a time by default) and unpack while the rest downloads (tests/bench/cold_start.py).
"""

import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

REMOVED = "torch-removed.txt"


def tree(root: Path) -> dict[str, list[int]]:
    """Every file and link under ``root``: {path: [size, mtime_ns]}."""
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            stat = os.lstat(path)
            found[path] = [stat.st_size, stat.st_mtime_ns]
    return found


def folders(root: Path) -> set[str]:
    return {folder for folder, _dirs, _names in os.walk(root)}


def owners(paths: set[str]) -> dict[str, set[str]]:
    """The new files grouped by the distribution whose RECORD lists them; others alone."""
    groups: dict[str, set[str]] = {}
    for dist in md.distributions():
        mine = {os.path.normpath(dist.locate_file(entry)) for entry in dist.files or []}
        if own := mine & paths:
            groups.setdefault(dist.metadata["Name"], set()).update(own)
            paths = paths - own
    for path in paths:  # no RECORD lists it (e.g. a .pth file): a group of its own
        groups[path] = {path}
    return groups


def spread(sizes: dict[str, int], count: int) -> list[list[str]]:
    """Largest first onto the lightest of ``count`` layers (longest-processing-time first)."""
    layers: list[list[str]] = [[] for _ in range(count)]
    totals = [0] * count
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        lightest = totals.index(min(totals))
        layers[lightest].append(name)
        totals[lightest] += sizes[name]
    return layers


def _move(path: str, root: Path) -> None:
    target = root / Path(path).relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, target)


def split(root: Path, state: Path, into: Path, count: int, extra: list[str]) -> None:
    before = json.loads(state.read_text())
    now = tree(root)
    added = {path for path, stat in now.items() if before["files"].get(path) != stat}
    groups = owners(added)
    sizes = {name: sum(now[path][0] for path in paths) for name, paths in groups.items()}
    for number, names in enumerate(spread(sizes, count), start=1):
        layer = into / str(number)
        layer.mkdir(parents=True, exist_ok=True)
        for name in names:
            for path in groups[name]:
                _move(path, layer)
        shown = ", ".join(n for n in names if not n.startswith("/")) or "(empty)"
        print(f"layer {number}: {sum(sizes[n] for n in names) / 1e9:.2f} GB, {shown}")
    gone = sorted(set(before["files"]) - set(now))
    gone += sorted(set(before["folders"]) - folders(root), reverse=True)  # deepest first
    listing = Path(extra[0]).parent / REMOVED
    listing.write_text("".join(f"{path}\n" for path in gone))
    for path in [*extra, str(listing)]:
        _move(path, into / str(count))


if __name__ == "__main__":
    command, root, state = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if command == "snapshot":
        state.write_text(json.dumps({"files": tree(root), "folders": sorted(folders(root))}))
    else:
        split(root, state, Path(sys.argv[4]), int(sys.argv[5]), sys.argv[6:])
