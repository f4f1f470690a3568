"""Pack a dataset folder for the Hub, on the laptop, before renting: one tar, or shards and
their index, uploaded to a dataset repo (``trainbox dataset pack``). Staging it on the rented
machine is ``packed.download``'s.
"""

import logging
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from entrypoint.dataset.landing import Doctor, gb, point
from entrypoint.dataset.packed import archive, shards
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import sha256
from entrypoint.gateways import hub

log = logging.getLogger("trainbox")


def pack(
    source: Path,
    repo: str,
    *,
    name: str = "",
    shard_size: int,
    private: bool,
    doctor: Doctor | None,
    wait: float = hub.WAIT,
) -> str:
    """Doctor ``source``, pack it deterministically as one tar, or as shards and their index
    when it is larger than ``shard_size``, and upload it to ``repo``; return the name to set as
    DATASET_FILE. Files of the other layout, or of an earlier pack, are deleted in the last
    commit, so the default name finds only this one."""
    if not (source / "data.yaml").is_file():
        raise TrainboxError(
            f"{source} has no data.yaml: pack the dataset's own folder", ExitCode.DATASET
        )
    parts = archive.split(source, shard_size)
    _fits_the_hub(parts)
    dataset = repo.rpartition("/")[2]
    if name and (len(parts) > 1) != name.endswith(shards.SUFFIX):
        raise TrainboxError(
            f"--file {name}: the pack is {len(parts)} tar(s), so name it "
            f"{'NAME' + shards.SUFFIX if len(parts) > 1 else 'NAME.tar'}, or leave it out",
            ExitCode.CONFIG,
        )
    name = name or (shards.index_name(dataset) if len(parts) > 1 else f"{dataset}.tar")
    with tempfile.TemporaryDirectory(prefix="trainbox-pack-") as scratch:
        if doctor:  # on a copy whose path: is this folder, wherever data.yaml says it was
            probe = Path(scratch) / "data.yaml"
            shutil.copyfile(source / "data.yaml", probe)
            point(probe, source.resolve())
            doctor(probe)
        target, transfers = hub.Target("--repo", repo, name), hub.Transfers()
        hub.ensure_repo(target, private=private, wait=wait)
        stale = _stale(target, wait)
        if len(parts) == 1:
            tar = Path(scratch) / name
            archive.pack(source, tar)
            log.info("packed %s into %s (%s); uploading to %s", source, name,
                     gb(tar.stat().st_size), repo)  # fmt: skip
            files: dict[str, Path | bytes] = {name: tar}
        else:
            stem = name.removesuffix(shards.SUFFIX)
            listed = _upload_shards(source, target, stem, parts, Path(scratch), wait, transfers)
            files = {name: shards.make_index(stem, shard_size, listed)}
            stale -= {entry["file"] for entry in listed}
        delete = tuple(sorted(stale - {name}))
        commit = hub.put(target, files, f"trainbox: {name}", delete=delete, wait=wait,
                         transfers=transfers)  # fmt: skip
    log.info("uploaded %s to %s at commit %s", name, repo, commit[:12])
    return name


def _fits_the_hub(parts: list[list[Path]]) -> None:
    """A file over the Hub's limit per file cannot be packed: said before any shard is written
    (a shard is measured again once written, with its tar headers)."""
    for path in (path for part in parts if len(part) == 1 for path in part):
        if (size := path.lstat().st_size) > shards.MAX_FILE:
            raise TrainboxError(
                f"{path}: {gb(size)}, over the Hub's 50 GB per file; split it", ExitCode.DATASET
            )


def _stale(target: hub.Target, wait: float) -> set[str]:
    """What the repo holds of an earlier pack: the default tar, the default index and the
    shards that index lists."""
    tar, index = shards.defaults(target.repo)
    found = hub.read(replace(target, name=index), wait=wait)
    listed = [shard["file"] for shard in shards.parse_index(index, found[0])] if found else []
    held = hub.paths_info(target, [tar, index, *listed], wait=wait)
    return set(held)


def _upload_shards(source: Path, target: hub.Target, stem: str, parts: list[list[Path]],
                   scratch: Path, wait: float, transfers: hub.Transfers) -> list[dict]:  # fmt: skip
    """Write, upload and delete the shards one at a time (so packing needs one shard of free
    disk, not the dataset's size), one commit each, so a pack cut midway goes on where it
    stopped: a shard the Hub already holds with the same sha256 is not uploaded again."""
    names = [shards.shard_name(stem, number) for number in range(len(parts))]
    held = hub.paths_info(target, names, wait=wait)
    listed = []
    for number, (shard, paths) in enumerate(zip(names, parts, strict=True)):
        tar = scratch / shard
        archive.pack(source, tar, paths)
        size, digest = tar.stat().st_size, sha256(tar)
        if size > shards.MAX_FILE:
            raise TrainboxError(
                f"{paths[-1]}: {gb(size)} with its tar headers, over the Hub's 50 GB per "
                "file; split it",
                ExitCode.DATASET,
            )
        listed.append({"file": shard, "size": size, "sha256": digest, "members": len(paths)})
        on_hub = getattr(held.get(shard), "lfs", None)
        if on_hub is not None and on_hub.sha256 == digest:
            log.info("shard %d/%d %s: already on the Hub", number + 1, len(parts), shard)
        else:
            log.info("shard %d/%d %s (%s): uploading", number + 1, len(parts), shard, gb(size))
            hub.put(replace(target, name=shard), {shard: tar}, f"trainbox: {shard}", wait=wait,
                    transfers=transfers)  # fmt: skip
        tar.unlink()
    return listed
