"""Weights leave the machine while training goes on: the ``uploader`` program and its checks.

Every UPLOAD_INTERVAL seconds the uploader commits what changed in the run's published
snapshot (``publish``) to ``OUTPUT_REPO`` under ``RUN_NAME/``: one commit per cycle,
unchanged files skipped by sha256, retries with backoff, at most MAX_COMMITS_PER_HOUR.
A ledger on the volume records what the Hub holds (path, sha256, commit) across restarts.
On SIGTERM (training ended, or ``docker stop``) it pushes what is pending within STOP_GRACE
and exits 0 only if the Hub then holds the last snapshot.
"""

import hashlib
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub import errors as hub_errors
from huggingface_hub.utils import disable_progress_bars

from . import __version__, hub, status
from .atomic import write_atomic
from .config import Config
from .errors import ExitCode, TrainboxError
from .publish import FOLDER, MANIFEST, read_index, write_manifest

log = logging.getLogger("trainbox")

COMMIT_RETRYABLE = frozenset({412})  # the branch moved under the commit: retry on the new head


def api() -> HfApi:
    disable_progress_bars()  # a bar per file per epoch would drown the container's log
    return HfApi(token=hub.token(), library_name="trainbox", library_version=__version__)


def ledger_path(cfg: Config) -> Path:
    return status.ledger_path(cfg.workspace, cfg.run_name)


def read_ledger(cfg: Config) -> dict[str, Any]:
    try:
        return json.loads(ledger_path(cfg).read_text())
    except (OSError, ValueError):
        return {"repo": cfg.output_repo, "files": {}}


def prepare(cfg: Config, manifest: dict[str, Any]) -> None:
    """At start, before training: prove HF_TOKEN can write OUTPUT_REPO by committing the run's
    manifest. A refusal stops the run; a Hub that is merely unreachable does not."""
    write_manifest(cfg.run_dir, manifest)
    client = api()
    path = f"{cfg.run_name}/{MANIFEST}"
    try:
        hub.retrying(
            lambda: client.create_repo(cfg.output_repo, private=True, exist_ok=True),
            f"create {cfg.output_repo}",
            retries=2,
        )
        hub.retrying(
            lambda: client.upload_file(
                path_or_fileobj=str(cfg.run_dir / FOLDER / MANIFEST),
                path_in_repo=path,
                repo_id=cfg.output_repo,
                commit_message=f"{cfg.run_name}: start",
            ),
            "write the manifest",
            retries=2,
        )
    except Exception as err:
        if hub.is_transient(err):
            log.warning(
                "the Hub is unreachable (%s): training goes on, the uploader keeps retrying",
                hub.status_of(err) or type(err).__name__,
            )
            return
        if not isinstance(err, hub_errors.HfHubHTTPError):
            raise
        raise TrainboxError(
            f"HF_TOKEN cannot write OUTPUT_REPO={cfg.output_repo} "
            f"({hub.status_of(err) or type(err).__name__}): use a token with write access to it, "
            "or unset OUTPUT_REPO to keep the run on the volume only",
            ExitCode.UPLOAD,
        ) from None
    log.info("uploads go to %s/%s (private if it was created now)", cfg.output_repo, cfg.run_name)


class Uploader:
    """One run's uploads: what is pending, and one commit that pushes it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.api = api()
        self.ledger = read_ledger(cfg)
        self.commits: deque[float] = deque()
        self.last_error = ""

    def pending(self) -> tuple[int, dict[str, str]]:
        """(epoch, {name: sha256}) of published files the Hub does not hold yet."""
        index = read_index(self.cfg.run_dir)
        held = self.ledger["files"]
        return index["epoch"], {
            name: digest for name, digest in index["files"].items()
            if held.get(f"{self.cfg.run_name}/{name}", {}).get("sha256") != digest
        }  # fmt: skip

    def _room(self) -> float:
        """Seconds until a commit is allowed under MAX_COMMITS_PER_HOUR (0: now)."""
        now = time.monotonic()
        while self.commits and now - self.commits[0] > 3600:
            self.commits.popleft()
        if len(self.commits) < self.cfg.max_commits_per_hour:
            return 0.0
        return 3600 - (now - self.commits[0])

    def push(self, retries: int = hub.RETRIES) -> bool:
        """Commit everything pending in one commit; True when nothing is pending afterwards."""
        epoch, pending = self.pending()
        if not pending:
            return True
        if (wait := self._room()) > 0:
            log.warning(
                "upload: %d commits in the last hour; next in %.0fs", len(self.commits), wait
            )
            return False
        staging = self.cfg.run_dir / FOLDER / ".uploading"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        # Hard links pin the published files: a newer snapshot renamed over them meanwhile
        # leaves these bytes, the ones hashed for the commit, as they are.
        for name in pending:
            os.link(self.cfg.run_dir / FOLDER / name, staging / name)
        operations = [
            CommitOperationAdd(f"{self.cfg.run_name}/{name}", str(staging / name))
            for name in sorted(pending)
        ]
        try:
            info = hub.retrying(
                lambda: self.api.create_commit(
                    self.cfg.output_repo,
                    operations,
                    commit_message=f"{self.cfg.run_name}: epoch {epoch}",
                ),
                f"upload of epoch {epoch}",
                retries=retries,
                extra_status=COMMIT_RETRYABLE,
            )
        except Exception as err:
            if not hub.is_hub_failure(err):
                raise
            self.last_error = f"{hub.status_of(err) or type(err).__name__}"
            log.warning("upload of epoch %d failed (%s); will retry", epoch, self.last_error)
            self._save(pending=len(pending))
            return False
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.commits.append(time.monotonic())
        for op in operations:
            self.ledger["files"][op.path_in_repo] = {
                "sha256": op.upload_info.sha256.hex(),
                "commit": info.oid,
            }
        self.last_error = ""
        left = len(self.pending()[1])
        self._save(pending=left, epoch=epoch, at=status.iso())
        log.info(
            "uploaded epoch %d: %s (commit %s)", epoch, ", ".join(sorted(pending)), info.oid[:12]
        )
        return not left

    def _save(self, **state: Any) -> None:
        """Write the ledger, with the upload state ``trainbox status`` shows."""
        self.ledger["state"] = {**self.ledger.get("state", {}), **state,
                                "last_error": self.last_error}  # fmt: skip
        write_atomic(ledger_path(self.cfg), json.dumps(self.ledger, indent=2) + "\n")


def main(cfg: Config) -> int:
    """The supervised uploader: cycles until SIGTERM, then a final flush within STOP_GRACE."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer's interrupt is not ours
    uploader = Uploader(cfg)
    while not stop.wait(cfg.upload_interval):
        uploader.push(retries=2)
    return flush(cfg, uploader)


def verify(cfg: Config) -> bool:
    """True when the Hub holds every file the run last published, by hash: the LFS sha256, or
    for a regular file the git blob id of the local copy that the ledger says was uploaded."""
    index, held = read_index(cfg.run_dir), read_ledger(cfg)["files"]
    paths = {f"{cfg.run_name}/{name}": digest for name, digest in index["files"].items()}
    if not paths or any(held.get(path, {}).get("sha256") != d for path, d in paths.items()):
        return False
    try:
        remote = {f.path: f for f in api().get_paths_info(cfg.output_repo, list(paths))}
    except Exception as err:
        if not hub.is_hub_failure(err):
            raise
        log.warning("could not verify the upload: %s", hub.status_of(err) or err)
        return False
    for path, digest in paths.items():
        found = remote.get(path)
        if found is None:
            return False
        if found.lfs:
            if found.lfs.sha256 != digest:
                return False
        elif found.blob_id != _git_blob(cfg.run_dir / FOLDER / path.split("/", 1)[1]):
            return False
    return True


def _git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def flush(cfg: Config, uploader: Uploader | None = None) -> int:
    """Push what is pending within STOP_GRACE; OK only if the Hub then holds it all."""
    uploader = uploader or Uploader(cfg)
    deadline = time.monotonic() + cfg.stop_grace - 5
    log.info("final upload to %s ...", cfg.output_repo)
    status.record(cfg.workspace, "uploading")
    while time.monotonic() < deadline:
        if uploader.push(retries=1):
            log.info("final upload done: the Hub holds epoch %d", read_index(cfg.run_dir)["epoch"])
            status.record(cfg.workspace, "uploading", upload=uploader.ledger.get("state", {}))
            return ExitCode.OK
        time.sleep(min(5, max(0.0, deadline - time.monotonic())))
    status.record(cfg.workspace, "uploading", upload=uploader.ledger.get("state", {}))
    log.error(
        "final upload failed (%s): %d file(s) are only on the volume",
        uploader.last_error or "out of time",
        len(uploader.pending()[1]),
    )
    return ExitCode.UPLOAD
