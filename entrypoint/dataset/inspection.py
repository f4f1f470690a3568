"""``trainbox dataset inspect``: what staging a Hub dataset would find, before a GPU is rented.

One listing of the repo decides the form, as staging does. For parquet, each file's footer
and its objects column are read by ranges (no image is downloaded, except the first rows' of
the first file, whose sizes decide the box layout); for folders, the counts come from the
file list. Nothing is written.
"""

from collections import Counter
from pathlib import PurePosixPath
from typing import IO, Any

from entrypoint.dataset import forms
from entrypoint.dataset.packed import shards
from entrypoint.dataset.published import boxes, layout, parquet
from entrypoint.dataset.published import route as published
from entrypoint.dataset.stage import resolve
from entrypoint.dataset.wanted import Wanted
from entrypoint.errors import TrainboxError
from entrypoint.gateways import hub


def inspect(wanted: Wanted) -> dict[str, Any]:
    """The form, splits, counts, classes, box layout, bytes to fetch and disk to allow."""
    source = resolve(wanted, wait=wanted.hub_wait)
    report: dict[str, Any] = {
        "repo": source.repo, "revision": wanted.revision, "commit": source.commit,
        "files": len(source.shards), "bytes": source.size,
    }  # fmt: skip
    report["disk"] = int(source.size * source.margin)
    if isinstance(source, shards.Source):
        return report | {"form": "trainbox",
                         "note": "packed by `trainbox dataset pack`: staged as packed"}  # fmt: skip
    report["form"] = source.form
    if source.form == "parquet":
        return report | _parquet(source, wanted)
    return report | _listed(source)


def _parquet(source: published.Source, wanted: Wanted) -> dict[str, Any]:
    files = sorted(source.shards, key=lambda f: f.name)
    wait = wanted.hub_wait
    spec, sample = hub.read_remote(files[0], lambda f: _first(f, files[0].name), wait=wait)
    spec = published.named(spec, files[0].name, source.card, wait)
    found: dict[str, Any] = {"task": spec.task, "columns": spec.describe(),
                             "classes": list(spec.names)}  # fmt: skip
    if spec.task == "detect":
        try:
            decision = boxes.decide(sample, wanted.bbox_format)
            found |= {"box_format": decision.format, "box_evidence": decision.why}
        except TrainboxError as err:  # the inspection reports it, and goes on
            found |= {"box_format": None, "box_evidence": str(err)}
    images, objects = Counter(), Counter()
    for remote in files:
        split = published.split_of(remote.name) or "train"
        rows, count = hub.read_remote(remote, lambda f: parquet.counts(f, spec), wait=wait)
        images[split] += rows
        objects[split] += count
    splits = {s: {"images": images[s], **({"boxes": objects[s]} if spec.task == "detect" else {})}
              for s in sorted(images)}  # fmt: skip
    return found | {"splits": splits, "validation": _validation(images, wanted.val_fraction)}


def _first(handle: IO[bytes], name: str) -> tuple[parquet.Schema, list]:
    """What the first file's columns mean and, for detection, its sample of boxes: one open."""
    spec = parquet.schema(handle, name)
    return spec, published.sample(handle, spec) if spec.task == "detect" else []


def _listed(source: published.Source) -> dict[str, Any]:
    """Images per split, told by the paths (a split folder anywhere in the path)."""
    images: Counter = Counter()
    for remote in source.shards:
        if forms.is_image(remote.name):
            parts = PurePosixPath(remote.name).parts
            split = next((layout.split_of(p) for p in parts if layout.split_of(p)), "train")
            images[split] += 1
    if not images:
        return {"splits": {}, "note": f"the {source.form} form is counted once it is unpacked"}
    return {"splits": {s: {"images": n} for s, n in sorted(images.items())},
            "note": "boxes and classes are read at staging"}  # fmt: skip


def _validation(images: Counter, fraction: float) -> str:
    if images.get("val"):
        return "the dataset's own"
    return f"held out from train: VAL_FRACTION={fraction} (seeded)"


def lines(report: dict[str, Any]) -> list[str]:
    """The report for a person: one fact per line."""
    out = [f"dataset      {report['repo']}@{report['commit'][:12]} ({report['revision']})",
           f"form         {report['form']}: {report['files']} file(s), "
           f"{report['bytes'] / 1e9:.3f} GB to fetch",
           f"disk         {report['disk'] / 1e9:.3f} GB for the converted copy"]  # fmt: skip
    if "columns" in report:
        out.append(f"columns      {report['columns']}")
    if "classes" in report:
        out.append(f"classes      {len(report['classes'])}: {', '.join(report['classes'])}")
    if "box_evidence" in report:
        out.append(f"boxes        {report['box_format'] or 'undecided'}: {report['box_evidence']}")
    for split, counted in report.get("splits", {}).items():
        out.append(f"split        {split}: " + ", ".join(f"{v} {k}" for k, v in counted.items()))
    if "validation" in report:
        out.append(f"validation   {report['validation']}")
    if "note" in report:
        out.append(f"note         {report['note']}")
    return out
