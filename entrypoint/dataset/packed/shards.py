"""What a Hub dataset is made of: one tar, or shards listed by an index file.

A dataset too large for one file (the Hub refuses files over 50 GB and recommends at most 20 GB,
hub-docs ``storage-limits.md``, read 2026-12-01) is packed as shards: self-contained tars of
whole files, ``NAME-00000.tar`` on, and ``NAME.shards.json``, which lists them in order with
their size and sha256. The index is committed last, so a half-uploaded pack is never found.
Staging reads the index at one commit and every shard at that same commit.
"""

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from entrypoint import __version__
from entrypoint.dataset import landing
from entrypoint.dataset.packed import download
from entrypoint.dataset.wanted import Wanted
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub

FORMAT = "trainbox-shards"
VERSION = 1
SUFFIX = ".shards.json"
MAX_FILE = 50 * 10**9  # the Hub's limit per file (storage-limits.md, read 2026-12-01)


UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}  # fmt: skip


def parse_size(text: str) -> int:
    """``10GB``, ``500MB``, ``1.5GiB`` or a number of bytes; between 1 MB and 50 GB."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", text, re.IGNORECASE)
    if not found:
        raise ValueError(f"{text!r} is not a size: write it like 10GB, 500MB or 1.5GiB")
    size = int(float(found.group(1)) * UNITS[(found.group(2) or "").upper()])
    if not 10**6 <= size <= MAX_FILE:
        raise ValueError(
            f"{text}: a shard is at least 1MB and at most 50GB, the Hub's limit per file"
        )
    return size


def index_name(dataset: str) -> str:
    return f"{dataset}{SUFFIX}"


def shard_name(dataset: str, number: int) -> str:
    return f"{dataset}-{number:05d}.tar"


@dataclass(frozen=True)
class Source:
    """A Hub dataset at one commit. ``file``: the tar or the index that DATASET_FILE names (or
    that was found by its default name); ``sha256``: the tar's, or the index's own bytes'."""

    repo: str
    file: str
    revision: str
    commit: str
    sha256: str | None
    shards: tuple[hub.RemoteFile, ...]

    @property
    def size(self) -> int:
        return sum(shard.size for shard in self.shards)

    @property
    def sharded(self) -> bool:
        return self.file.endswith(SUFFIX)

    def identity(self) -> dict[str, Any]:
        return {"repo": self.repo, "file": self.file, "commit": self.commit,
                "sha256": self.sha256, "size": self.size}  # fmt: skip

    @property
    def margin(self) -> float:
        """Disk per byte fetched."""
        return download.SPACE_MARGIN

    def covered(self, partial: Path) -> int:
        """The bytes a cut staging already holds in ``partial``."""
        return download.covered(partial, self)

    def stage(self, wanted: Wanted, doctor: landing.Doctor | None) -> Path:
        """Stream the tar(s) into place; the staged data.yaml."""
        return download.download(self, wanted, doctor)


def make_index(dataset: str, shard_size: int, shards: list[dict[str, Any]]) -> bytes:
    """The index of a sharded pack: each shard's ``file``, ``size``, ``sha256`` and ``members``."""
    index = {"format": FORMAT, "version": VERSION, "trainbox": __version__, "dataset": dataset,
             "shard_size": shard_size, "size": sum(s["size"] for s in shards),
             "shards": shards}  # fmt: skip
    return (json.dumps(index, indent=2) + "\n").encode()


def parse_index(name: str, data: bytes) -> list[dict[str, Any]]:
    """The shards an index lists, or the one line that says it is not an index of ours."""
    try:
        shards = _shards(json.loads(data))
    except (ValueError, KeyError, TypeError) as err:
        raise TrainboxError(
            f"DATASET_FILE={name}: not a shard index this image reads ({err}); pack the "
            "dataset again with `trainbox dataset pack`",
            ExitCode.DATASET,
        ) from None
    return shards


def _shards(index: dict[str, Any]) -> list[dict[str, Any]]:
    if index["format"] != FORMAT or index["version"] > VERSION:
        raise ValueError(f"format {index['format']!r} version {index['version']}")
    shards = index["shards"]
    if not shards:
        raise ValueError("it lists no shard")
    for shard in shards:
        if not re.fullmatch(r"[^/\\]+\.tar", shard["file"]):
            raise ValueError(f"bad shard name {shard['file']!r}")
        if not isinstance(shard["size"], int) or shard["size"] <= 0:
            raise ValueError(f"bad size for {shard['file']}")
        if not re.fullmatch(r"[0-9a-f]{64}", shard["sha256"]):
            raise ValueError(f"bad sha256 for {shard['file']}")
    return shards


def defaults(dataset_repo: str) -> tuple[str, str]:
    """The names looked for when DATASET_FILE is empty, in order: the tar, then the index."""
    name = dataset_repo.rpartition("/")[2]
    return f"{name}.tar", index_name(name)


def resolve(repo: str, file: str, revision: str, *, wait: float = hub.WAIT) -> Source:
    """The dataset ``file`` names in ``repo`` (empty: ``NAME.tar``, else ``NAME.shards.json``),
    resolved to one commit with one metadata request per file looked for; an index is read at
    that commit, and its shards are pinned to it (no request per shard)."""

    def target(name: str) -> hub.Target:
        return hub.Target("DATASET_REPO", repo, name, revision)

    if file:
        remote = hub.remote_file(target(file), wait=wait)
    else:
        tar, index = defaults(repo)
        remote = hub.find(target(tar), wait=wait) or hub.find(target(index), wait=wait)
        if remote is None:
            raise TrainboxError(
                f"DATASET_REPO={repo}: neither {tar} nor {index} at {revision}; set DATASET_FILE "
                "to the dataset's tar or shard index (`trainbox dataset pack` prints it)",
                ExitCode.DATASET,
            )

    def pinned(name: str, **fields: Any) -> hub.RemoteFile:  # at the commit, if main moves on
        return replace(remote, name=name, url=hub.url(repo, name, remote.commit), **fields)

    if not remote.name.endswith(SUFFIX):
        return Source(repo, remote.name, revision, remote.commit, remote.sha256,
                      (pinned(remote.name),))  # fmt: skip
    data = hub.content(remote, wait=wait)
    shards = [pinned(s["file"], size=s["size"], etag=s["sha256"])
              for s in parse_index(remote.name, data)]  # fmt: skip
    return Source(repo, remote.name, revision, remote.commit, hashlib.sha256(data).hexdigest(),
                  tuple(shards))  # fmt: skip
