"""The run-state store: every file that one process writes and another reads.

This module alone builds their paths and opens them (``tests/state/test_store.py`` fails if
another module names one). One encoding for all of them: a JSON object, written atomically
(temp file, fsync, rename), times as ISO 8601 UTC strings (``stamp``), exit codes as
integers. ``docs/architecture.md`` lists each file with its writer and its readers.

Two places hold them. The volume's ``trainbox/`` folder keeps what outlives a container
(the status, the clock, the uploader's ledger, the preflight verdict, the starts' history,
the export report, the volume lock, the SSH host key). A runtime folder, made by
``trainbox run`` for one start and never on the volume, keeps what its programs tell each
other (the prepared run, when the stop came, each program's exit code).

Standard library only: ``trainbox status`` reads the status through it with a bare python3.
"""

import fcntl
import json
import os
import socket
import time
from calendar import timegm
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import write_atomic
from entrypoint.settings.launchers import Volume

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # the one time encoding: whole seconds, UTC
FOLDER = "trainbox"  # on the volume
RUNTIME = "TRAINBOX_RUNTIME"  # the variable that names a start's runtime folder


def stamp(seconds: float | None = None) -> str:
    """A time (seconds since the epoch; now by default) as the store writes it."""
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


def moment(text: str | None) -> float | None:
    """The seconds since the epoch of a ``stamp``, or None."""
    if not text:
        return None
    try:
        return float(timegm(time.strptime(text, TIME_FORMAT)))
    except (TypeError, ValueError):
        return None


def age(text: str | None, now: float | None = None) -> float | None:
    """Seconds since a ``stamp``, or None."""
    then = moment(text)
    return None if then is None else (now or time.time()) - then


def read_json(file: Path) -> dict[str, Any]:
    """A JSON object, or {} when the file is missing, torn or not an object."""
    try:
        loaded = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _write(file: Path, data: dict[str, Any] | list[Any]) -> None:
    write_atomic(file, json.dumps(data, indent=2) + "\n")


# -- On the volume ---------------------------------------------------------------------------


def _mine(volume: Volume, name: str) -> Path:
    """This node's copy of a per-node file: node 0's is the run's (``status.json``), every
    other node keeps its own (``status-node1.json``), so nodes sharing a volume never write
    each other's."""
    own = f"{name}.json" if volume.node == 0 else f"{name}-node{volume.node}.json"
    return volume.root / FOLDER / own


def status_path(volume: Volume) -> Path:
    return _mine(volume, "status")


def status(volume: Volume) -> dict[str, Any]:
    return read_json(status_path(volume))


def update_status(volume: Volume, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Replace the status with ``change(status)``, one writer at a time: the job, the
    watchdog program and the uploader's final flush may overlap, and a read-modify-write
    without the lock lost the other's update."""
    file = status_path(volume)
    with _locked(file):
        state = read_json(file)
        _write(file, change(state))


@contextmanager
def _locked(file: Path) -> Iterator[None]:
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file.with_name(f".{file.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def clock(volume: Volume) -> dict[str, str]:
    """The container's clock: ``started``, ``first_step``, ``last_step`` (stamps)."""
    return read_json(_mine(volume, "clock"))


def mark(volume: Volume, *, fresh: bool = False, **moments: float) -> None:
    """Record moments (seconds since the epoch); ``fresh`` starts this container's clock.
    Written by the job (``started``) and the train program (its steps), one at a time."""
    file = _mine(volume, "clock")
    with _locked(file):
        kept = {} if fresh else read_json(file)
        _write(file, {**kept, **{name: stamp(at) for name, at in moments.items()}})


def prices(volume: Volume) -> dict[str, Any]:
    """The machine's price as this container read it (``state.cost``): ``container_started``,
    ``source``, ``history`` ([stamp, USD per hour] at each change), or ``unknown`` (why)."""
    return read_json(_mine(volume, "price"))


def write_prices(volume: Volume, held: dict[str, Any]) -> None:
    """Written by the watchdog alone."""
    _write(_mine(volume, "price"), held)


def node_prices(volume: Volume) -> dict[str, float]:
    """The other nodes' prices (node rank -> USD per hour), as the job's rank 0 heard them in
    this container (an earlier container's are not this one's)."""
    held = read_json(volume.root / FOLDER / "node-prices.json")
    return held.get("prices", {}) if held.get("container_started") == clock(volume).get(
        "started") else {}  # fmt: skip


def write_node_prices(volume: Volume, prices: dict[str, float]) -> None:
    """Written by the job's rank 0 alone (``training.distributed``), on node 0's volume."""
    _write(volume.root / FOLDER / "node-prices.json",
           {"container_started": clock(volume).get("started"), "prices": prices})  # fmt: skip


def ledger(workspace: Path, repo: str, run: str) -> dict[str, Any]:
    """The uploader's record of what ``repo`` holds of ``run``: ``files``
    ({path: {sha256, commit}}) and ``state``. One per repo and run, so that a new
    OUTPUT_REPO gets every file, changed or not."""
    return {"repo": repo, "files": {}, **read_json(_ledger_path(workspace, repo, run))}


def write_ledger(workspace: Path, repo: str, run: str, held: dict[str, Any]) -> None:
    _write(_ledger_path(workspace, repo, run), held)


def notified(workspace: Path, run: str) -> dict[str, str]:
    """The NOTIFY events a run has had: {event: stamp} (``runtime.notices``)."""
    return {k: v for k, v in read_json(_notified_path(workspace, run)).items()
            if isinstance(v, str)}  # fmt: skip


def write_notified(workspace: Path, run: str, told: dict[str, str]) -> None:
    _write(_notified_path(workspace, run), told)


def _notified_path(workspace: Path, run: str) -> Path:
    return workspace / FOLDER / f"notified-{run}.json"


def _ledger_path(workspace: Path, repo: str, run: str) -> Path:
    return workspace / FOLDER / f"ledger-{repo.replace('/', '--')}--{run}.json"


def verdict(workspace: Path) -> dict[str, Any]:
    """The preflight's verdict (``trainbox check``), or {} before one was written."""
    return read_json(workspace / FOLDER / "preflight.json")


def write_verdict(workspace: Path, result: dict[str, Any]) -> None:
    _write(workspace / FOLDER / "preflight.json", result)


def export_report(workspace: Path) -> dict[str, Any]:
    """What the export after training wrote, per format (written by the train program)."""
    return read_json(workspace / FOLDER / "export.json")


def write_export_report(workspace: Path, results: dict[str, Any]) -> None:
    _write(workspace / FOLDER / "export.json", results)


def starts(workspace: Path) -> list[dict[str, Any]]:
    """How this volume's last starts ended: [{at, code}], oldest first (``ending``)."""
    try:
        found = json.loads((workspace / FOLDER / "starts.json").read_text())
    except (OSError, ValueError):
        return []
    return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []


def write_starts(workspace: Path, entries: list[dict[str, Any]]) -> None:
    _write(workspace / FOLDER / "starts.json", entries)


@contextmanager
def volume(workspace: Path, node_rank: int) -> Iterator[None]:
    """Hold the volume for this container, or raise the one line that says who holds it.

    One container per volume (per node): ``flock`` on ``trainbox/lock-nodeN``, held by
    ``trainbox run`` for its whole life, its holder written in it for the one refused. The
    kernel drops it when the process ends, however it ends, so a crash or a kill never leaves
    it stuck. It covers containers of one host (a local or bind-mounted volume); on a network
    file system, flock is only as good as that file system's locking."""
    path = workspace / FOLDER / f"lock-node{node_rank}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # the preflight's words: this is the first write to the volume
        raise TrainboxError(
            f"{workspace} is not writable ({err.strerror}): mount a writable volume there",
            ExitCode.PREFLIGHT,
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise TrainboxError(
                f"{workspace} is in use by another trainbox container ({holder}): stop it, or "
                "give this container a volume of its own",
                ExitCode.VOLUME_IN_USE,
            ) from None
        os.ftruncate(fd, 0)
        holder = f"host {socket.gethostname()}, pid {os.getpid()}, since {stamp()}\n"
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.close(fd)


def host_key(workspace: Path, make: Callable[[Path], None]) -> Path:
    """The SSH host key, kept on the volume so a new container keeps the fingerprint: made
    once, by ``make(scratch)`` (ssh-keygen, run by ``runtime.ssh``), which writes ``scratch``
    and ``scratch.pub``; the public half takes its place first, the key last, so a half-made
    key is never taken for a whole one. Its path."""
    key = workspace / FOLDER / "ssh" / "ssh_host_ed25519_key"
    if key.is_file():
        return key
    key.parent.mkdir(parents=True, exist_ok=True)
    key.parent.chmod(0o700)
    scratch = key.with_name(f".{key.name}.new")
    for stale in (scratch, scratch.with_suffix(".new.pub")):
        stale.unlink(missing_ok=True)
    make(scratch)
    os.replace(scratch.with_suffix(".new.pub"), key.with_suffix(".pub"))
    os.replace(scratch, key)
    return key


# -- LibreYOLO's own files in a run folder: read only, never written here ----------------------


def libreyolo_status(run_dir: Path) -> dict[str, Any]:
    """LibreYOLO's ``status.json``: its ``state``, epochs, ETA, metrics ({} before it starts)."""
    return read_json(run_dir / "status.json")


def write_libreyolo_status(run_dir: Path, text: bytes) -> None:
    """A completed run's ``status.json`` as the Hub holds it (the resume of a finished run)."""
    write_atomic(run_dir / "status.json", text)


def libreyolo_profile(run_dir: Path) -> dict[str, Any]:
    """LibreYOLO's ``PROFILE_STEPS`` verdict, ``profile/profile_summary.json`` ({} if none)."""
    return read_json(run_dir / "profile" / "profile_summary.json")


def libreyolo_train_config(run_dir: Path) -> dict[str, Any]:
    """LibreYOLO's ``train_config.yaml``: the options the run trained with ({} if none)."""
    import yaml  # here: `trainbox status` imports this module with the standard library only

    try:
        loaded = yaml.safe_load((run_dir / "train_config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def libreyolo_metrics(run_dir: Path) -> str:
    """LibreYOLO's ``metrics.jsonl``: a JSON object per finished epoch ("" before the first)."""
    try:
        return (run_dir / "metrics.jsonl").read_text(errors="replace")
    except OSError:
        return ""


# -- The evaluation of a run's best.pt, beside its files (training/evaluation.py) -----------


def evaluation(folder: Path, split: str) -> dict[str, Any]:
    """``evaluation/SPLIT.json``: one split's score of the run's best.pt ({} if none)."""
    return read_json(folder / f"{split}.json")


def evaluations(folder: Path) -> dict[str, dict[str, Any]]:
    """The scores an ``evaluation/`` folder holds, by split: the test split's first."""
    return {split: found for split in ("test", "val") if (found := evaluation(folder, split))}


def write_evaluation(folder: Path, split: str, result: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / f"{split}.json", result)


# -- In a start's runtime folder ---------------------------------------------------------------

CODES = ("train", "rank", "upload", "watchdog")  # who writes an exit code there


def write_code(folder: Path, who: str, code: int, reason: str = "") -> None:
    """Record the exit code ``who`` chose, and why: ``train`` (the job: how the train
    program ended by itself), ``rank`` (a rank's own verdict for the job), ``upload`` (the final
    flush), ``watchdog`` (a limit it enforced)."""
    assert who in CODES, who
    _write(folder / f"{who}-code.json", {"code": int(code), "reason": reason})


def clear_codes(folder: Path, *who: str) -> None:
    """Forget the codes ``who`` wrote: training starts again in the same start."""
    for each in who:
        (folder / f"{each}-code.json").unlink(missing_ok=True)


def code(folder: Path, who: str) -> int | None:
    found = read_json(folder / f"{who}-code.json").get("code")
    return found if isinstance(found, int) else None


def reason(folder: Path, who: str) -> str:
    return str(read_json(folder / f"{who}-code.json").get("reason", ""))


def write_failures(folder: Path, failures: dict[int, int]) -> None:
    """The ranks torchrun saw fail, each with its exit code (negative: the signal that ended it)."""
    _write(folder / "rank-failures.json", {str(rank): code for rank, code in failures.items()})


def failures(folder: Path) -> dict[int, int]:
    return {int(rank): int(code) for rank, code in read_json(folder / "rank-failures.json").items()}


def mark_started(folder: Path) -> None:
    """A rank got past the rendezvous (``training.distributed``)."""
    _write(folder / "train-started.json", {"at": stamp()})


def started(folder: Path) -> bool:
    return bool(read_json(folder / "train-started.json"))


def write_stop(folder: Path, at: float) -> None:
    """When the stop signal came: the final upload's budget counts from it."""
    _write(folder / "stop.json", {"at": stamp(at)})


def stop(folder: Path) -> float | None:
    return moment(read_json(folder / "stop.json").get("at"))


def write_job(folder: Path) -> None:
    """This process is the job: the one the watchdog stops (``runtime.supervise``)."""
    _write(folder / "job.json", {"pid": os.getpid()})


def job(folder: Path) -> int | None:
    found = read_json(folder / "job.json").get("pid")
    return found if isinstance(found, int) else None


def write_settings(folder: Path, settings: dict[str, Any]) -> None:
    """The job's resolved settings, for every program it starts (``state.run``)."""
    _write(folder / "settings.json", settings)


def settings(folder: Path) -> dict[str, Any]:
    return read_json(folder / "settings.json")


def write_prepared(folder: Path, prepared: dict[str, Any]) -> None:
    """What the job prepared, once, for the programs (``state.run``)."""
    _write(folder / "prepared.json", prepared)


def prepared(folder: Path) -> dict[str, Any]:
    return read_json(folder / "prepared.json")


# -- The published snapshot (the train program writes it, the uploader and a resume read it) ---

INDEX = "index.json"
MANIFEST = "manifest.json"


def published_folder(workspace: Path, run: str) -> Path:
    """Where the train program publishes the epochs the uploader pushes: outside the runs
    folder, where ``libreyolo monitor`` took its copies for a second, phantom run."""
    return workspace / FOLDER / "published" / run


def index(folder: Path) -> dict[str, Any]:
    """A published folder's last snapshot: {"epoch": N, "files": {name: sha256}}, or an
    empty one."""
    return {"epoch": 0, "files": {}, **read_json(folder / INDEX)}


def write_index(folder: Path, snapshot: dict[str, Any]) -> None:
    _write(folder / INDEX, snapshot)


def manifest(folder: Path) -> dict[str, Any]:
    """The run's provenance in a published folder, or {} before the job wrote it."""
    return read_json(folder / MANIFEST)


def write_manifest(folder: Path, provenance: dict[str, Any]) -> None:
    _write(folder / MANIFEST, provenance)


# -- Beside a staged dataset (one start stages it, the next ones find it) --------------------

DATASET_MARKER = ".trainbox-dataset.json"
STAGING_CHECKPOINT = ".trainbox-resume.json"  # in the hidden partial folder


def dataset_marker(folder: Path) -> dict[str, Any]:
    """A staged Hub dataset's completion marker (source, commit, members, data.yaml), or {}."""
    return read_json(folder / DATASET_MARKER)


def write_dataset_marker(folder: Path, marker: dict[str, Any]) -> None:
    _write(folder / DATASET_MARKER, marker)


def staging_checkpoint(partial: Path) -> dict[str, Any]:
    """Where a cut staging stands, per tar ({} when none was saved)."""
    return read_json(partial / STAGING_CHECKPOINT)


def has_staging_checkpoint(partial: Path) -> bool:
    return (partial / STAGING_CHECKPOINT).is_file()


def write_staging_checkpoint(partial: Path, saved: dict[str, Any]) -> None:
    write_atomic(partial / STAGING_CHECKPOINT, json.dumps(saved) + "\n")  # written often: compact


def drop_staging_checkpoint(partial: Path) -> None:
    (partial / STAGING_CHECKPOINT).unlink(missing_ok=True)
