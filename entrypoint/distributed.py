"""Beyond one process: PyTorch's own launcher, torchrun, starts the ranks; trainbox does not
build a cluster of its own.

One process per machine (the default) runs the ``train`` program directly; ``DEVICE=0,1,2,3``
on one machine then trains on those GPUs the way libreyolo does it (one spawned worker per
GPU). With ``NNODES`` > 1 or ``NPROC_PER_NODE`` > 1 the ``train`` program is torchrun, with
static rendezvous on ``MASTER_ADDR:MASTER_PORT`` and each machine's ``NODE_RANK``; libreyolo
reads RANK/LOCAL_RANK/WORLD_SIZE and wraps the model in DDP, with ``BATCH`` the global batch.
Node 0 alone publishes, uploads, serves the dashboard and writes the container's status;
every node stages the dataset on its own volume.
"""

import os
import shlex
import sys

from .config import Config


def processes(cfg: Config, gpus: int) -> int:
    """Training processes on this machine: NPROC_PER_NODE, else one per visible GPU."""
    return cfg.nproc_per_node or max(1, gpus if cfg.device != "cpu" else 1)


def uses_torchrun(cfg: Config) -> bool:
    return cfg.nnodes > 1 or cfg.nproc_per_node > 1


def command(cfg: Config, gpus: int) -> str:
    """The ``train`` program's command line."""
    train = [sys.executable, "-m", "entrypoint", "train"]
    if not uses_torchrun(cfg):
        return shlex.join(train)
    torchrun = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={cfg.nnodes}", f"--node-rank={cfg.node_rank}",
        f"--nproc-per-node={processes(cfg, gpus)}",
        f"--master-addr={cfg.master_addr}", f"--master-port={cfg.master_port}",
        f"--rdzv-conf=timeout={cfg.rdzv_timeout}", "--max-restarts=0",
    ]  # fmt: skip
    return shlex.join([*torchrun, *train[1:]])


def rank() -> int:
    """This process's global rank (0 when not launched by torchrun)."""
    return int(os.environ.get("RANK", "0"))


def describe() -> str | None:
    """A line naming this rank in the job, under torchrun."""
    if "WORLD_SIZE" not in os.environ:
        return None
    return (
        f"rank {os.environ.get('RANK')} of world size {os.environ['WORLD_SIZE']} "
        f"(node {os.environ.get('GROUP_RANK', '?')}, local rank {os.environ.get('LOCAL_RANK')})"
    )
