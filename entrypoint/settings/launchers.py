"""The job shape that launchers set, read when trainbox's own names are not, and the volume
as one node of the job sees it.

Standard library only: ``trainbox status`` resolves this machine's node rank with it too.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# What SkyPilot, Kubernetes training operators and providers set, read when trainbox's own
# names are not.
# PyTorchJob v1 gives a pod its node rank as RANK; `trainbox run` exports the resolved names
# before it starts any rank, whose RANK torchrun sets to the global one.
ALIASES = {
    "NNODES": ("PET_NNODES", "SKYPILOT_NUM_NODES"),
    "NODE_RANK": ("PET_NODE_RANK", "SKYPILOT_NODE_RANK", "JOB_COMPLETION_INDEX", "RANK"),
    "NPROC_PER_NODE": ("PET_NPROC_PER_NODE", "SKYPILOT_NUM_GPUS_PER_NODE"),
    "MASTER_ADDR": ("PET_MASTER_ADDR",),
    "MASTER_PORT": ("PET_MASTER_PORT",),
    # RunPod passes the account's SSH keys as PUBLIC_KEY (its own images' start script,
    # runpod/containers container-template/start.sh); a pod-level key goes in SSH_PUBLIC_KEY
    # (docs.runpod.io, "Override public key"), trainbox's own name. Read 2026-11-30.
    "SSH_PUBLIC_KEY": ("PUBLIC_KEY",),
}


def aliased(environ: Mapping[str, str]) -> dict[str, str]:
    found = {}
    for name, aliases in ALIASES.items():
        given = (environ[a] for a in aliases if environ.get(a, "").strip() not in ("", "auto"))
        if value := next(given, ""):
            # PET_NNODES may be an elastic range such as 1:2; trainbox runs the largest.
            found[name] = value.rpartition(":")[2] if name == "NNODES" else value
    if ips := environ.get("SKYPILOT_NODE_IPS", "").split():
        found["MASTER_ADDR"] = ips[0]  # SkyPilot's head node
    return found


def node_rank(environ: Mapping[str, str]) -> int:
    """This machine's node rank: NODE_RANK, else a launcher's name for it; 0 if none."""
    value = environ.get("NODE_RANK", "").strip() or aliased(environ).get("NODE_RANK", "0")
    return int(value) if value.isdigit() else 0


@dataclass(frozen=True)
class Volume:
    """The persistent volume as one node sees it: its ``root``, and the node's rank, which
    picks the node's own copy of a per-node state file (``state.store``)."""

    root: Path
    node: int = 0
