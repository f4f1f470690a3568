"""Stage the training data on the volume, once: from the Hub, a mounted data.yaml, or the demo.

This is the stage's one door. One listing of a Hub dataset repo decides its route: a trainbox
pack (``packed``: one tar, or shards listed by an index) or a dataset as published
(``published``: parquet, YOLO, COCO, ImageFolder or a zip). The route's source stages itself
(``Source.stage``) into a hidden folder beside the final place, checked by ``libreyolo doctor``
and swapped in whole with a marker naming the commit it came from (``landing``). A restart with
the same commit finds the marker and fetches nothing.
"""

import logging
from dataclasses import replace
from pathlib import Path

from entrypoint.dataset import forms, landing
from entrypoint.dataset.landing import Doctor
from entrypoint.dataset.packed import shards
from entrypoint.dataset.published import route as published
from entrypoint.dataset.wanted import Wanted  # the stage's settings, for its callers too
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.state import store

log = logging.getLogger("trainbox")


def read_marker(path: Path) -> dict:
    """The completion marker of a staged Hub dataset, or {} when there is none."""
    return store.dataset_marker(path)


def data_yaml(wanted: Wanted) -> Path:
    """The data.yaml that training reads (for a Hub dataset, once staged)."""
    if wanted.data:
        return Path(wanted.data)
    if wanted.repo:
        return wanted.folder / read_marker(wanted.folder).get("data_yaml", "data.yaml")
    return wanted.folder / "data.yaml"


def identity(wanted: Wanted) -> dict:
    """What the run trains on, for its manifest: the Hub commit and sha256, or the path."""
    if wanted.repo:
        marker = read_marker(wanted.folder)
        return {key: marker.get(key) for key in ("repo", "file", "revision", "commit", "sha256")}
    return {"data": wanted.data or "the built-in demo"}


Source = shards.Source | published.Source


def pending(wanted: Wanted) -> Source | None:
    """The Hub dataset still to download (one listing of the repo, nothing downloaded); None
    when there is nothing to fetch: not a Hub dataset, or the staged copy serves (the same
    commit, or any staged commit while the Hub cannot be asked)."""
    if not wanted.repo:
        return None
    marker = read_marker(wanted.folder)
    same = (marker.get("repo"), marker.get("revision")) == (wanted.repo, wanted.revision)
    staged = bool(marker) and same and wanted.file in ("", marker.get("file"))
    try:
        # With a staged copy, don't wait on retries: it can be trained on as it is.
        source = resolve(wanted, wait=0 if staged else wanted.hub_wait)
    except hub.Unreachable as err:
        if not staged:
            raise
        log.warning("%s; training on the copy staged from commit %s", err, marker["commit"])
        return None
    if staged and (marker.get("commit"), marker.get("file")) == (source.commit, source.file):
        log.info("dataset %s@%s already staged in %s", source.repo, source.commit[:12],
                 wanted.folder)  # fmt: skip
        return None
    return source


def resolve(wanted: Wanted, *, wait: float) -> Source:
    """DATASET_FILE's tar or index; else the form one listing of the repo shows (a pack's
    own files, pinned to the listing's commit, or a dataset as published)."""
    repo, revision = wanted.repo, wanted.revision
    if wanted.file:
        return shards.resolve(repo, wanted.file, revision, wait=wait)
    listing = hub.listing(hub.Target("DATASET_REPO", repo, "", revision), wait=wait)
    form, shown = forms.decide(repo, revision, [f.name for f in listing.files], wanted.form)
    if form != "trainbox":
        return published.source(listing, form, shown, wanted.config)
    name = next(n for n in shards.defaults(repo) if n in shown)
    found = shards.resolve(repo, name, listing.commit, wait=wait)
    return replace(found, revision=revision)


def needs(wanted: Wanted, source: Source | None) -> int:
    """The bytes staging ``source`` will still write: what a cut staging's checkpoint does not
    cover, times the route's margin (the extracted files are about the fetched size)."""
    if source is None:
        return 0
    covered = source.covered(landing.partial_of(wanted.folder))
    return int((source.size - covered) * source.margin)


def stage(wanted: Wanted, source: Source | None, doctor: Doctor | None = None) -> Path:
    """Make the dataset ready on the volume, once; return its data.yaml. ``source``: the Hub
    dataset ``pending`` found still to download, which stages itself by its route;
    ``doctor``: what checks a data.yaml before it is put in place
    (``runtime.processes.doctor``; None: DOCTOR=false)."""
    return source.stage(wanted, doctor) if source is not None else here(wanted, doctor)


def here(wanted: Wanted, doctor: Doctor | None = None) -> Path:
    """The dataset nothing is fetched for, checked at once: a Hub dataset's staged copy as it
    is, DATA's data.yaml doctored, or the demo written; its data.yaml."""
    path = data_yaml(wanted)
    if wanted.repo:
        return path
    if wanted.is_demo:
        from entrypoint.dataset import demo  # numpy and PIL load only when the demo is used

        _, written = demo.ensure(path.parent)
        log.info("demo dataset %s %s", "written to" if written else "reused from", path.parent)
        return path
    if not path.is_file():
        raise TrainboxError(
            f"DATA={wanted.data}: no such file in the container; mount the dataset "
            "under /workspace and point DATA at its data.yaml, or unset DATA for the demo",
            ExitCode.DATASET,
        )
    if doctor:
        doctor(path)
    return path


def judge(report: dict, returncode: int, stderr: str) -> None:
    """What ``libreyolo doctor``'s report says (``runtime.processes.doctor`` runs it): errors
    stop the run with its findings; warnings are logged."""
    findings = report.get("findings", [])
    for finding in findings:
        log.warning("doctor %s: %s", finding.get("severity"), finding.get("message"))
    errors = [f for f in findings if f.get("severity") == "error"]
    if errors or returncode != 0:
        first = errors[0].get("message") if errors else stderr.strip()[-200:]
        raise TrainboxError(
            f"libreyolo doctor found {len(errors) or 'an'} error(s) in the dataset, first: "
            f"{first} Fix the dataset, or set DOCTOR=false to train anyway",
            ExitCode.DATASET,
        )
    log.info("doctor: the dataset is healthy (%d warning(s))", len(findings))
