"""Writing to the Hub: a repo made, a commit of files (its bytes first, within a deadline, then
the commit itself), what the Hub holds at some paths."""

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrypoint import __version__
from entrypoint.gateways.hub.deadlines import FLOOR_RATE, SLACK, Transfers
from entrypoint.gateways.hub.errors import WAIT, call, status_of
from entrypoint.gateways.hub.session import Target, _hf, api, token

if TYPE_CHECKING:
    from huggingface_hub import CommitInfo, CommitOperationAdd, CommitOperationDelete

__all__ = ("BranchMoved", "commit", "ensure_repo", "operations", "paths_info", "put")


log = logging.getLogger("trainbox")


def ensure_repo(target: Target, *, private: bool, wait: float = WAIT) -> None:
    """Create the repo unless it exists (private if asked)."""
    client = api()
    call(
        lambda: client.create_repo(
            target.repo, repo_type=target.repo_type, private=private, exist_ok=True
        ),
        f"create {target.repo}",
        target,
        wait=wait,
    )


class BranchMoved(Exception):
    """A commit on top of a given parent found the branch elsewhere: look again, retry."""


# huggingface_hub documents only that such a commit fails (hf_api.create_commit,
# ``parent_commit``); the Hub answers 412 (and 409 has been reported): both mean "moved".
MOVED_STATUS = (409, 412)


def _xet_route(target: Target, transfers: Transfers) -> None:
    """Ask the Hub for the Xet write token huggingface_hub will use (once per token lifetime):
    a refusal (401/403) is the token's line, a Hub-compatible mirror without Xet (a 404 that
    names no repo or revision) makes the uploads use LFS from now on, said once. hf_xet asks
    the same route itself, but reports a refusal as a bare ConnectionError. The token's expiry
    is kept in ``transfers``."""
    hf = _hf()
    key, until = (hf.constants.ENDPOINT, target.repo, target.revision), transfers.xet_until
    if not hf.utils._runtime.is_xet_available() or until.get(key, 0) > time.time():
        return
    where = (f"{hf.constants.ENDPOINT}/api/{target.repo_type}s/{target.repo}/xet-write-token/"
             f"{target.revision}")  # fmt: skip
    headers = hf.utils.build_hf_headers(token=token(), library_name="trainbox",
                                        library_version=__version__)  # fmt: skip
    response = hf.utils.get_session().get(where, headers=headers)
    if response.status_code == 404 and "X-Error-Code" not in response.headers:
        log.warning("the Hub at HF_ENDPOINT=%s has no Xet storage (xet-write-token: 404): "
                    "uploads go through LFS", hf.constants.ENDPOINT)  # fmt: skip
        hf.constants.HF_HUB_DISABLE_XET = True
        return
    hf.utils.hf_raise_for_status(response)
    expires = response.json().get("exp") if response.content else None
    until[key] = (expires if isinstance(expires, int | float) else time.time() + 600) - 60


def commit(
    target: Target,
    operations: "list[CommitOperationAdd | CommitOperationDelete]",
    message: str,
    *,
    parent: str | None = None,
    wait: float = WAIT,
    transfers: Transfers | None = None,
) -> "CommitInfo":
    """One commit of ``operations``. With ``parent``, only on top of that commit: when the
    branch moved, ``BranchMoved`` is raised (the caller looks again); without, a 412 is retried.
    ``transfers``: the caller's, which it can give up (``Transfers.abandon``); a fresh one's
    when not given."""
    client = api()
    owner = transfers or Transfers()

    additions = [op for op in operations if isinstance(op, _hf().CommitOperationAdd)]
    budget = SLACK + sum(op.upload_info.size for op in additions) / FLOOR_RATE  # per attempt

    def transfer() -> None:
        """The bytes first, apart from the commit: hf_xet's errors are told from its."""
        _xet_route(target, owner)
        client.preupload_lfs_files(target.repo, additions, repo_type=target.repo_type,
                                   revision=target.revision)  # fmt: skip

    def attempt() -> "CommitInfo":
        owner.bounded(transfer, time.monotonic() + budget, target)
        try:
            return client.create_commit(
                target.repo,
                operations,
                commit_message=message,
                repo_type=target.repo_type,
                parent_commit=parent,
            )
        except _hf().errors.HfHubHTTPError as err:
            if parent and status_of(err) in MOVED_STATUS:
                raise BranchMoved(f"{target.repo} moved past {parent[:12]}") from None
            raise

    return call(attempt, message, target, wait=wait,
                retry_status=frozenset() if parent else frozenset({412}))  # fmt: skip


def paths_info(target: Target, paths: list[str], *, wait: float = WAIT) -> dict[str, Any]:
    """What the Hub holds at ``paths``: {path: RepoFile}."""
    client = api()
    found = call(lambda: client.get_paths_info(target.repo, paths, repo_type=target.repo_type),
                 "paths-info", target, wait=wait)  # fmt: skip
    return {item.path: item for item in found}


def operations(
    files: dict[str, Path | bytes], delete: tuple[str, ...] = ()
) -> "list[CommitOperationAdd | CommitOperationDelete]":
    """A commit's operations: add ``files`` (a local path or bytes each, by their path in the
    repo), delete the paths in ``delete``."""
    hf = _hf()
    added = [hf.CommitOperationAdd(name, str(data) if isinstance(data, Path) else data)
             for name, data in files.items()]  # fmt: skip
    return [*added, *(hf.CommitOperationDelete(name) for name in delete)]


def put(
    target: Target,
    files: dict[str, Path | bytes],
    message: str,
    *,
    delete: tuple[str, ...] = (),
    wait: float = WAIT,
    transfers: Transfers | None = None,
) -> str:
    """One commit that adds ``files`` and deletes the paths in ``delete`` (only paths it holds:
    what the Hub answers for a missing one is not documented); return the commit.
    ``transfers``: as for ``commit``."""
    return commit(target, operations(files, delete), message, wait=wait,
                  transfers=transfers).oid  # fmt: skip
