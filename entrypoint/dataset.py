"""Stage the training data on the volume, once: from the Hub, a mounted data.yaml, or the demo.

A Hub dataset is one tar in a dataset repo. It is streamed from the Hub straight into a
hidden folder beside its final place (the tar is never stored, its sha256 is checked on the
way), checked by ``libreyolo doctor``, then renamed into place with a marker naming the
commit it came from. A restart with the same commit finds the marker and fetches nothing.
"""

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from . import archive, hub, status
from .atomic import write_atomic
from .config import Config
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")

MARKER = ".trainbox-dataset.json"
RESUME = ".trainbox-resume.json"  # in the hidden partial folder: where a cut staging resumes
SPACE_MARGIN = 1.15  # extracted data ~ the tar's size, plus 15%; the tar itself is never stored


def folder(cfg: Config) -> Path:
    """Where the dataset lives on the volume."""
    name = cfg.dataset_repo.rpartition("/")[2] if cfg.dataset_repo else "demo"
    return cfg.workspace / "data" / name


def read_marker(path: Path) -> dict:
    """The completion marker of a staged Hub dataset, or {} when there is none."""
    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def data_yaml(cfg: Config) -> Path:
    """The data.yaml that training reads (for a Hub dataset, once staged)."""
    if cfg.data:
        return Path(cfg.data)
    if cfg.dataset_repo:
        return folder(cfg) / read_marker(folder(cfg)).get("data_yaml", "data.yaml")
    return folder(cfg) / "data.yaml"


def identity(cfg: Config) -> dict:
    """What the run trains on, for its manifest: the Hub commit and sha256, or the path."""
    if cfg.dataset_repo:
        marker = read_marker(folder(cfg))
        return {key: marker.get(key) for key in ("repo", "file", "revision", "commit", "sha256")}
    return {"data": cfg.data or "the built-in demo"}


def stage(cfg: Config) -> Path:
    """Make the dataset ready on the volume, once; return its data.yaml."""
    if cfg.dataset_repo:
        return _stage_from_hub(cfg)
    path = data_yaml(cfg)
    if cfg.is_demo:
        from . import demo  # numpy and PIL load only when the demo is used

        _, written = demo.ensure(path.parent)
        log.info("demo dataset %s %s", "written to" if written else "reused from", path.parent)
        return path
    if not path.is_file():
        raise TrainboxError(
            f"DATA={cfg.data}: no such file in the container; mount the dataset "
            "under /workspace and point DATA at its data.yaml, or unset DATA for the demo",
            ExitCode.DATASET,
        )
    if cfg.doctor:
        doctor(path)
    return path


def _stage_from_hub(cfg: Config) -> Path:
    target = folder(cfg)
    marker = read_marker(target)
    wanted = {"repo": cfg.dataset_repo, "file": cfg.dataset_tar, "revision": cfg.dataset_revision}
    staged = bool(marker) and all(marker.get(key) == value for key, value in wanted.items())
    try:
        # With a staged copy, don't wait on retries: it can be trained on as it is.
        remote = hub.remote_file(
            hub.Target("DATASET_REPO", cfg.dataset_repo, cfg.dataset_tar, cfg.dataset_revision),
            wait=0 if staged else cfg.hub_wait,
        )
    except hub.Unreachable as err:
        if not staged:
            raise
        log.warning("%s; training on the copy staged from commit %s", err, marker["commit"])
        return target / marker["data_yaml"]
    if staged and marker.get("commit") == remote.commit:
        log.info("dataset %s@%s already staged in %s", remote.repo, remote.commit[:12], target)
        return target / marker["data_yaml"]
    _check_space(cfg.workspace, remote.size)
    return _download(remote, target, cfg)


def _check_space(workspace: Path, size: int) -> None:
    (workspace / "data").mkdir(parents=True, exist_ok=True)
    need = int(size * SPACE_MARGIN)
    free = shutil.disk_usage(workspace).free
    if free < need:
        raise TrainboxError(
            f"not enough space on {workspace}: the dataset needs about {_gb(need)} "
            f"(a {_gb(size)} tar, extracted as it downloads, plus 15%) and {_gb(free)} is free; "
            "give the volume more space",
            ExitCode.DISK,
        )


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def _download(remote: hub.RemoteFile, target: Path, cfg: Config) -> Path:
    """Stream the tar into a hidden folder, verify, doctor, then swap it into place; return
    the staged data.yaml. Every STAGE_CHECKPOINT seconds a restart point is saved."""
    from tqdm import tqdm

    partial = target.with_name(f".{target.name}.partial")
    resume = _resume_point(partial, remote)
    if not resume:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    log.info(
        "staging %s/%s@%s (%s) into %s%s",
        remote.repo,
        remote.name,
        remote.commit[:12],
        _gb(remote.size),
        target,
        f", resuming at byte {resume['offset']} ({resume['members']} files already there)"
        if resume
        else "",
    )
    offset = resume.get("offset", 0)
    try:
        with tqdm(
            total=remote.size,
            initial=offset,
            unit="B",
            unit_scale=True,
            mininterval=2,
            desc=f"download+extract {remote.name}",
        ) as bar:
            state = bytes.fromhex(resume["state"]) if resume else None
            meter = status.Meter(cfg.workspace, remote.size, offset)

            def progress(count: int) -> None:
                bar.update(count)
                meter(count)

            reader = archive.Reader(
                hub.stream(remote, offset, wait=cfg.hub_wait), progress, offset, state
            )
            saver = _Checkpoints(partial, remote, reader, cfg.stage_checkpoint)
            members = archive.extract(reader, partial, resume.get("members", 0), saver)
        digest = reader.hexdigest()
        if reader.size != remote.size or remote.sha256 not in (None, digest):
            raise TrainboxError(
                f"{remote.name}: the download does not match the Hub's size and sha256; "
                "start again",
                ExitCode.DATASET,
            )
        (partial / RESUME).unlink(missing_ok=True)
        found = _find_yaml(partial, remote.name)
        if cfg.doctor:
            _point(found, found.parent)
            doctor(found)
        relative = found.relative_to(partial)
        _point(found, (target / relative).parent)
        marker = {
            "repo": remote.repo,
            "file": remote.name,
            "revision": remote.revision,
            "commit": remote.commit,
            "sha256": digest,
            "size": remote.size,
            "members": members,
            "data_yaml": str(relative),
        }
        write_atomic(partial / MARKER, json.dumps(marker, indent=2) + "\n")
        _swap(partial, target)
    except BaseException as err:
        # A cut download keeps what its last checkpoint covers; anything else leaves no trace.
        disk_full = isinstance(err, OSError) and err.errno == errno.ENOSPC
        bad_data = isinstance(err, TrainboxError) and err.code == ExitCode.DATASET
        if disk_full or bad_data or not (partial / RESUME).is_file():
            shutil.rmtree(partial, ignore_errors=True)
        if disk_full:
            raise TrainboxError(
                f"{target.parent} filled up while extracting: give the volume more space",
                ExitCode.DISK,
            ) from None
        raise
    log.info("dataset staged: %d files, sha256 %s", members, digest[:16])
    return target / relative


def _identity(remote: hub.RemoteFile) -> dict:
    return {"repo": remote.repo, "file": remote.name, "commit": remote.commit,
            "sha256": remote.sha256, "size": remote.size}  # fmt: skip


def _resume_point(partial: Path, remote: hub.RemoteFile) -> dict:
    """The checkpoint a cut staging of this very file left, or {}."""
    try:
        point = json.loads((partial / RESUME).read_text())
    except (OSError, ValueError):
        return {}
    same = remote.sha256 and point.get("file") == _identity(remote)
    return point if same and archive.Sha256.resumable() else {}


class _Checkpoints:
    """Called by the extractor after each member: at most every ``every`` seconds, flush the
    extracted files to disk, then record the stream position and its hash state."""

    def __init__(
        self, partial: Path, remote: hub.RemoteFile, reader: archive.Reader, every: int
    ) -> None:
        self.partial, self.remote, self.reader, self.every = partial, remote, reader, every
        self.last = time.monotonic()

    def __call__(self, offset: int, members: int) -> None:
        if not self.every or time.monotonic() - self.last < self.every:
            return
        state = self.reader.state_at(offset)
        if state is None:
            return
        os.sync()  # what the checkpoint says is extracted must be on disk before it says so
        point = {"file": _identity(self.remote), "offset": offset, "members": members,
                 "state": state.hex()}  # fmt: skip
        write_atomic(self.partial / RESUME, json.dumps(point) + "\n")
        self.last = time.monotonic()


def _find_yaml(root: Path, name: str) -> Path:
    """The shallowest data.yaml in the extracted tar (at most two folders deep)."""
    for pattern in ("data.yaml", "*/data.yaml", "*/*/data.yaml"):
        if found := sorted(root.glob(pattern)):
            return found[0]
    raise TrainboxError(
        f"{name} holds no data.yaml: pack the dataset folder that contains it", ExitCode.DATASET
    )


def _point(data: Path, where: Path) -> None:
    """Make the data.yaml's ``path:`` point at the folder that holds the data."""
    spec = yaml.safe_load(data.read_text()) or {}
    if not isinstance(spec, dict):
        raise TrainboxError(f"{data.name} in the tar is not a YOLO data.yaml", ExitCode.DATASET)
    spec["path"] = str(where)
    write_atomic(data, yaml.safe_dump(spec, sort_keys=False))


def _swap(partial: Path, target: Path) -> None:
    """Put the new copy in place; the old one goes only once the new one is complete."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def doctor(data: Path) -> None:
    """``libreyolo doctor``: errors stop the run with its findings; warnings are logged."""
    command = [str(Path(sys.executable).with_name("libreyolo")), "doctor", str(data), "--json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        report = json.loads(result.stdout)
    except (OSError, ValueError) as err:
        raise TrainboxError(
            f"libreyolo doctor could not check {data} ({err}); set DOCTOR=false to skip it",
            ExitCode.DATASET,
        ) from None
    findings = report.get("findings", [])
    for finding in findings:
        log.warning("doctor %s: %s", finding.get("severity"), finding.get("message"))
    errors = [f for f in findings if f.get("severity") == "error"]
    if errors or result.returncode != 0:
        first = errors[0].get("message") if errors else result.stderr.strip()[-200:]
        raise TrainboxError(
            f"libreyolo doctor found {len(errors) or 'an'} error(s) in the dataset, first: "
            f"{first} Fix the dataset, or set DOCTOR=false to train anyway",
            ExitCode.DATASET,
        )
    log.info("doctor: the dataset is healthy (%d warning(s))", len(findings))


def pack(source: Path, repo: str, *, name: str = "", private: bool, check: bool) -> str:
    """Doctor ``source``, tar it deterministically, upload it to ``repo``; return the tar's name."""
    if not (source / "data.yaml").is_file():
        raise TrainboxError(
            f"{source} has no data.yaml: pack the dataset's own folder", ExitCode.DATASET
        )
    name = name or f"{repo.rpartition('/')[2]}.tar"
    with tempfile.TemporaryDirectory(prefix="trainbox-pack-") as scratch:
        if check:  # on a copy whose path: is this folder, wherever data.yaml says it was
            probe = Path(scratch) / "data.yaml"
            shutil.copyfile(source / "data.yaml", probe)
            _point(probe, source.resolve())
            doctor(probe)
        tar = Path(scratch) / name
        archive.pack(source, tar)
        log.info(
            "packed %s into %s (%s); uploading to %s", source, name, _gb(tar.stat().st_size), repo
        )
        commit = hub.upload(hub.Target("--repo", repo, name), tar, private=private)
    log.info("uploaded %s to %s at commit %s", name, repo, commit[:12])
    return name
