"""Weights leave the machine while training goes on: the ``uploader`` program and its checks.

Every UPLOAD_INTERVAL seconds the uploader commits what changed in the run's published
snapshot (``publish``) to ``OUTPUT_REPO`` under ``RUN_NAME/``: one commit per cycle,
unchanged files skipped by sha256, at most MAX_COMMITS_PER_HOUR (the final flush is never
held back by that cap, which sits below the Hub's own limit of about 128 per hour).

Weights on the Hub never go backwards: every commit carries ``RUN_NAME/index.json`` (the
snapshot's epoch and hashes), is made only on top of the commit in which the uploader last
read the Hub's ``index.json`` (``parent_commit``: the Hub answers 412 when the branch moved,
and the uploader looks again), and is refused when the Hub already holds a later epoch.

A ledger on the volume, per repo and run, records what the Hub holds (path, sha256, commit)
across restarts. On SIGTERM (training ended, or ``docker stop``) the uploader pushes what is
pending in what is left of STOP_GRACE, counted from the stop signal, and exits 0 only if the
Hub then holds the last snapshot.
"""

import hashlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume
from entrypoint.state import budget, status, store
from entrypoint.state.snapshot import INDEX, MANIFEST, keep, read_index, write_manifest
from entrypoint.state.snapshot import folder as published
from entrypoint.training import resume
from entrypoint.training.publish import final_cost
from entrypoint.upload import results

log = logging.getLogger("trainbox")


@dataclass(frozen=True)
class Uploads:
    """Where the run's weights go and how fast: the settings the uploader reads, taken from
    the run's config once (``Uploads.of``)."""

    output_repo: str  # OUTPUT_REPO
    run_name: str  # RUN_NAME: the run's folder there and on the volume
    run_dir: Path  # the run's folder on the volume
    workspace: Path  # the volume's root (its ledger is there)
    volume: Volume  # the volume as this node sees it (its status)
    hub_wait: float  # HUB_WAIT
    upload_interval: float  # UPLOAD_INTERVAL
    max_commits_per_hour: int  # MAX_COMMITS_PER_HOUR
    stop_grace: float  # STOP_GRACE

    @classmethod
    def of(cls, cfg: Config) -> "Uploads":
        """Each field from the setting (or the config's property) of its name."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


def target(output_repo: str) -> hub.Target:
    return hub.Target("OUTPUT_REPO", output_repo, repo_type="model")


def read_ledger(workspace: Path, output_repo: str, run_name: str) -> dict[str, Any]:
    return store.ledger(workspace, output_repo, run_name)


def prepare(dest: Uploads, manifest: dict[str, Any]) -> None:
    """At start, before training: prove HF_TOKEN can write OUTPUT_REPO by committing the run's
    manifest. A refusal stops the run (exit 7); a Hub that cannot be asked for HUB_WAIT
    seconds too (exit 5): training without knowing where its weights can go bills blind."""
    write_manifest(dest.run_dir, manifest)
    where = target(dest.output_repo)
    hub.ensure_repo(where, private=True, wait=dest.hub_wait)
    start = {f"{dest.run_name}/{MANIFEST}": published(dest.run_dir) / MANIFEST}
    hub.put(where, start, f"{dest.run_name}: start", wait=dest.hub_wait)
    log.info("uploads go to %s/%s (private if it was created now)", dest.output_repo, dest.run_name)


class Uploader:
    """One run's uploads: what is pending, and one commit that pushes it."""

    def __init__(self, dest: Uploads) -> None:
        self.dest = dest
        self.ledger = read_ledger(dest.workspace, dest.output_repo, dest.run_name)
        self.commits: deque[float] = deque()
        self.last_error = ""
        self.behind = False  # the Hub holds a later epoch than this volume: never upload
        self.seen: tuple[int, str | None] | None = None  # (epoch, commit) last read on the Hub
        self.lock = threading.Lock()  # one push at a time: the cycles' and the final flush's
        self.transfers = hub.Transfers()  # its commits' transfers, which a stop gives up
        self.card_due = False  # a first epoch or a new best.pt reached the Hub: a card follows

    def pending(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(the published index, {name: sha256} of its files the Hub does not hold yet)."""
        index = read_index(self.dest.run_dir)
        held = self.ledger["files"]
        return index, {
            name: digest for name, digest in index["files"].items()
            if held.get(f"{self.dest.run_name}/{name}", {}).get("sha256") != digest
        }  # fmt: skip

    def _room(self) -> float:
        """Seconds until a commit is allowed under MAX_COMMITS_PER_HOUR (0: now)."""
        now = time.monotonic()
        while self.commits and now - self.commits[0] > 3600:
            self.commits.popleft()
        if len(self.commits) < self.dest.max_commits_per_hour:
            return 0.0
        return 3600 - (now - self.commits[0])

    def push(self, *, wait: float | None = None, final: bool = False) -> bool:
        """Commit everything pending in one commit; True when nothing is pending afterwards.
        ``wait``: seconds to wait for an unreachable Hub (UPLOAD_INTERVAL: the next cycle
        tries again); ``final``: not held by the cap."""
        wait = self.dest.upload_interval if wait is None else wait
        with self.lock:
            index, pending = self.pending()
            if not pending:
                return True
            if not final and (room := self._room()) > 0:
                log.warning("upload: %d commits in the last hour; next in %.0fs",
                            len(self.commits), room)  # fmt: skip
                return False
            # Its own folder: a push abandoned at a deadline may still be reading its own.
            into = published(self.dest.run_dir)
            staging = Path(tempfile.mkdtemp(prefix=".uploading-", dir=into))
            try:
                return self._commit(index, pending, staging, wait)
            except Exception as err:  # any: the cycles and the flush must go on trying
                known = isinstance(err, TrainboxError | hub.BranchMoved)
                self.last_error = str(err) if known else f"{type(err).__name__}: {err}"
                log.warning("upload of epoch %d failed: %s", index["epoch"], self.last_error)
                self._save(pending=len(pending), retrying="")
                return False
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def card(self) -> None:
        """The model card, in a commit of its own after the weights, when a first epoch or a
        new best.pt reached the Hub, within MAX_COMMITS_PER_HOUR (else at a later cycle)."""
        if not self.card_due or self._room() > 0:
            return
        self.card_due = False
        if results.push_run_card(self.dest.output_repo, self.dest.run_dir, self.dest.volume,
                                 wait=self.dest.upload_interval):  # fmt: skip
            self.commits.append(time.monotonic())
            self.seen = None  # the card's commit moved the branch: look again before the next

    def retrying(self, message: str) -> None:
        """Told of each wait for the Hub during a push: ``trainbox status`` shows it."""
        self._save(retrying=message)

    def _commit(self, index: dict, pending: dict[str, str], staging: Path, wait: float) -> bool:
        # Hard links pin the published files: a newer snapshot renamed over them meanwhile
        # leaves these bytes, the ones hashed for the commit, as they are.
        for name in pending:
            os.link(published(self.dest.run_dir) / name, staging / name)
        (staging / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        run, epoch = self.dest.run_name, index["epoch"]
        operations = hub.operations({f"{run}/{name}": staging / name
                                     for name in [*sorted(pending), INDEX]})  # fmt: skip
        for _ in range(3):  # the branch moved (another run's commit): look again
            if self.seen is None:
                self.seen = resume.hub_epoch(self.dest.output_repo, self.dest.run_name, wait=wait)
            held, parent = self.seen
            if epoch < held:
                self.behind = True
                raise TrainboxError(
                    f"the Hub holds epoch {held} of run {run}, later than this volume's epoch "
                    f"{epoch}: not uploaded over it; restart to resume from the Hub's",
                    ExitCode.UPLOAD,
                )
            try:
                info = hub.commit(target(self.dest.output_repo), operations,
                                  f"{run}: epoch {epoch}", parent=parent, wait=wait,
                                  transfers=self.transfers)  # fmt: skip
                break
            except hub.BranchMoved:
                self.seen = None
        else:
            raise hub.BranchMoved(f"{self.dest.output_repo} kept moving under the commit")
        # Read while the staged files still exist: for a regular (non-LFS) file the client
        # hashes lazily, from the file.
        for op in operations[:-1]:
            self.ledger["files"][op.path_in_repo] = {"sha256": op.upload_info.sha256.hex(),
                                                      "commit": info.oid}  # fmt: skip
        self.seen = (epoch, info.oid)
        self.card_due |= "best.pt" in pending or len(self.commits) == 0
        self.commits.append(time.monotonic())
        self.last_error = ""
        left = len(self.pending()[1])
        self._save(pending=left, epoch=epoch, at=store.stamp(), retrying="")
        log.info("uploaded epoch %d: %s (commit %s)", epoch, ", ".join(sorted(pending)),
                 info.oid[:12])  # fmt: skip
        return not left

    def _save(self, **state: Any) -> None:
        """Write the ledger, with the upload state ``trainbox status`` shows."""
        self.ledger["state"] = {**self.ledger.get("state", {}), **state,
                                "last_error": self.last_error}  # fmt: skip
        store.write_ledger(
            self.dest.workspace, self.dest.output_repo, self.dest.run_name, self.ledger
        )


def main(dest: Uploads, runtime: Path | None = None) -> int:
    """The supervised uploader: a cycle every UPLOAD_INTERVAL until SIGTERM, then the final
    flush within what is left of STOP_GRACE since the stop signal (the store's ``stop`` in
    the runtime folder holds when ``trainbox run`` received it; absent: training ended on its
    own, now)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer's interrupt is not ours
    uploader = Uploader(dest)

    def cycles() -> None:
        while not stop.wait(dest.upload_interval):
            uploader.push()  # it fails as one line in the log and the status, never raises
            if not stop.is_set():
                uploader.card()  # outside the push's lock: the final flush never waits for it

    with hub.told(uploader.retrying):  # each wait for the Hub, in the ledger's upload state
        # In a thread: a push in flight when SIGTERM comes does not eat the flush's budget.
        threading.Thread(target=cycles, daemon=True).start()
        stop.wait()
        uploader.transfers.abandon()  # a cycle's transfer in flight: an older snapshot, or stuck
        stopped_at = store.stop(runtime) if runtime else None
        return flush(dest, uploader, stopped_at=stopped_at, runtime=runtime)


def flush(dest: Uploads, uploader: Uploader | None = None, stopped_at: float | None = None,
          runtime: Path | None = None) -> int:  # fmt: skip
    """Push what is pending until STOP_GRACE after ``stopped_at`` (default: now), less a
    margin; OK only if the Hub then holds it all. A push still in flight at the deadline is
    abandoned (its thread dies with the process). The code, and why, go to ``runtime``'s
    store for the job's last line."""
    uploader = uploader or Uploader(dest)
    now = time.time()  # the cost and the bill up to this upload; NOTIFY's record
    spent = final_cost(dest.volume, dest.run_dir, now)
    bill, told = budget.billed(dest.volume, now), store.notified(dest.workspace, dest.run_name)
    deadline = time.monotonic() + budget.flush_left(dest.stop_grace, stopped_at)
    log.info("final upload to %s ...", dest.output_repo)
    status.record(dest.volume, "uploading")
    keep(dest.run_dir, billed=bill, costs=spent, notified=told)
    outcome: list[bool] = []

    def attempts() -> None:
        while not uploader.behind and (left := deadline - time.monotonic()) > 0:
            if uploader.push(wait=left, final=True):
                outcome.append(True)
                return
            time.sleep(min(5, max(0.0, deadline - time.monotonic())))

    worker = threading.Thread(target=attempts, daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    status.record(dest.volume, "uploading", upload=uploader.ledger.get("state", {}))
    if outcome:
        log.info("final upload done: the Hub holds epoch %d", read_index(dest.run_dir)["epoch"])
        code, reason = ExitCode.OK, ""
    else:
        reason = (f"final upload failed ({uploader.last_error or 'out of time'}): "
                  f"{len(uploader.pending()[1])} file(s) are only on the volume")  # fmt: skip
        log.error("%s", reason)
        code = ExitCode.UPLOAD
    if runtime:
        store.write_code(runtime, "upload", code, reason)
    return code


def verify(dest: Uploads) -> bool:
    """True when the Hub holds every file the run last published, by hash: the LFS sha256, or
    for a regular file the git blob id of the local copy that the ledger says was uploaded."""
    index = read_index(dest.run_dir)
    held = read_ledger(dest.workspace, dest.output_repo, dest.run_name)["files"]
    paths = {f"{dest.run_name}/{name}": digest for name, digest in index["files"].items()}
    if not paths or any(held.get(path, {}).get("sha256") != d for path, d in paths.items()):
        return False
    try:
        remote = hub.paths_info(target(dest.output_repo), list(paths), wait=min(dest.hub_wait, 60))
    except TrainboxError as err:
        log.warning("could not verify the upload: %s", err)
        return False
    for path, digest in paths.items():
        found = remote.get(path)
        if found is None:
            return False
        if found.lfs:
            if found.lfs.sha256 != digest:
                return False
        elif found.blob_id != _git_blob(published(dest.run_dir) / path.split("/", 1)[1]):
            return False
    return True


def _git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
