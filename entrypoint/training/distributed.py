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

import datetime
import logging
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode
from entrypoint.preflight import check as preflight
from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume
from entrypoint.state import cost, store

log = logging.getLogger("trainbox")

HEARTBEAT_SECONDS = 2


@dataclass(frozen=True)
class Meeting:
    """How this machine's processes meet the job's others: the settings torchrun reads."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    rdzv_timeout: int
    device: str

    @classmethod
    def of(cls, cfg: Config) -> "Meeting":
        return cls(cfg.nnodes, cfg.node_rank, cfg.nproc_per_node, cfg.master_addr,
                   cfg.master_port, cfg.rdzv_timeout, cfg.device)  # fmt: skip


def uses_torchrun(nnodes: int, nproc_per_node: int) -> bool:
    return nnodes > 1 or nproc_per_node > 1


def command(meeting: Meeting, gpus: int) -> str:
    """The ``train`` program's command line: the trainer, or ``launch`` (torchrun's wrapper)."""
    procs = preflight.processes(meeting.nproc_per_node, meeting.device, gpus)
    program = (
        ["launch", str(procs)]
        if uses_torchrun(meeting.nnodes, meeting.nproc_per_node)
        else ["train"]
    )
    return shlex.join([sys.executable, "-m", "entrypoint", *program])


def torchrun(meeting: Meeting, procs: int) -> list[str]:
    """torchrun's command line, through ``trainbox elastic``: torchrun itself, which also keeps
    which ranks failed and how (``elastic``)."""
    return [
        sys.executable, "-m", "entrypoint", "elastic",
        f"--nnodes={meeting.nnodes}", f"--node-rank={meeting.node_rank}",
        f"--nproc-per-node={procs}",
        f"--master-addr={meeting.master_addr}", f"--master-port={meeting.master_port}",
        f"--rdzv-conf=timeout={meeting.rdzv_timeout}", "--max-restarts=0",
        "-m", "entrypoint", "train",
    ]  # fmt: skip


def environment(device: str, parent: dict[str, str] | None = None) -> dict[str, str]:
    """torchrun's environment: DEVICE's GPUs alone visible, in DEVICE's order.

    libreyolo puts rank N on ``cuda:LOCAL_RANK`` whatever ``device`` says (its
    ``Trainer._setup_device``), so ``DEVICE=2,3`` would train on GPUs 0 and 1, which the
    preflight did not check. Indices count among the GPUs already visible, as torch counts them.
    """
    env = dict(os.environ if parent is None else parent)
    if device in ("auto", "cpu"):
        return env
    wanted = [int(i) for i in device.split(",")]
    visible = [v for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[i] if visible else str(i) for i in wanted)
    return env


def verdict(
    meeting: Meeting, code: int, chosen: int | None, failures: dict[int, int], started: bool
) -> int:
    """The job's exit code once torchrun ended with ``code``: the ranks' own choice
    (``chose``: ``chosen``) over torchrun's 1, a job that never met its nodes as NODE_LOST."""
    if code and chosen == ExitCode.OK:
        log.warning(
            "training completed and its last epoch is published, but at their exit %s (torchrun "
            "stops the other ranks when one fails): the run counts as completed",
            _failed(failures),
        )
        return ExitCode.OK
    if chosen is not None:
        return chosen
    if code and not started:
        log.error(
            "NNODES=%d: the job never started: not every node joined %s:%d within "
            "RDZV_TIMEOUT=%d s; start every node with the same NNODES, MASTER_ADDR and "
            "MASTER_PORT, each with its own NODE_RANK, and check node 0 is reachable",
            meeting.nnodes,
            meeting.master_addr,
            meeting.master_port,
            meeting.rdzv_timeout,
        )
        return ExitCode.NODE_LOST
    return code


def _failed(failures: dict[int, int]) -> str:
    """``{rank: exit code}`` (torchrun's: negative for a signal) in words."""
    if not failures:
        return "a rank failed"

    def how(code: int) -> str:
        return f"died of {signal.Signals(-code).name}" if code < 0 else f"exited {code}"

    return ", ".join(f"rank {rank} {how(code)}" for rank, code in sorted(failures.items()))


def started(runtime: Path | None) -> None:
    """A rank is past the rendezvous (for ``launch``)."""
    if runtime:
        store.mark_started(runtime)


def chose(runtime: Path | None, code: int, reason: str = "") -> None:
    """A rank's choice of the job's exit code, and why (for ``launch``, whose torchrun says 1,
    and for the job's last line)."""
    if runtime:
        store.write_code(runtime, "rank", code, reason)


PRICE = "trainbox/price/"  # + a node's rank: that machine's USD per hour
FINISHED = "trainbox/finished"  # set by rank 0 once the last epoch is published
FINISH_WAIT = datetime.timedelta(hours=1)  # the longest an export after training may take


class Heartbeat:
    """Each rank's pulse in torchrun's own rendezvous store (on node 0), so that when a
    collective fails, the ranks still alive can name the ones that went silent; and the
    ranks' last meeting (``finish``). ``stop`` before the rank returns."""

    def __init__(self, store: Any, world: int, volume: Volume | None = None,
                 runtime: Path | None = None) -> None:  # fmt: skip
        self.store, self.world, self.rank = store, world, rank()
        self.volume = volume  # where this node's price is kept (``prices``)
        self.runtime = runtime  # where this node's launch hears the job finished
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    @classmethod
    def start(cls, volume: Volume | None = None,
              runtime: Path | None = None) -> "Heartbeat | None":  # fmt: skip
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world < 2:
            return None
        import torch.distributed as dist

        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              is_master=False, timeout=datetime.timedelta(seconds=10))  # fmt: skip
        pulse = cls(store, world, volume, runtime)
        store.set(f"trainbox/node/{pulse.rank}", os.environ.get("GROUP_RANK", "?"))
        pulse._thread.start()
        return pulse

    def _beat(self) -> None:
        count = 0
        while not self._stopped.is_set():
            count += 1
            try:
                self.store.set(f"trainbox/beat/{self.rank}", str(count))
                self.prices()
            except Exception:  # the store is gone with node 0: silent() says so
                return
            self._stopped.wait(HEARTBEAT_SECONDS)

    def prices(self) -> None:
        """The machines' prices, for the run's sum on node 0 (``runtime.pricing``): each other
        node's first rank says its node's price; the job's rank 0 keeps theirs on its volume."""
        if self.volume is None:
            return
        node = int(os.environ.get("GROUP_RANK", "0"))
        if self.rank == 0:
            nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
            keys = [f"{PRICE}{n}" for n in range(1, nodes)]
            said = {k.removeprefix(PRICE): float(self.store.get(k)) for k in keys
                    if self.store.check([k])}  # fmt: skip
            if said and said != store.node_prices(self.volume):
                store.write_node_prices(self.volume, said)
        elif (
            node
            and os.environ.get("LOCAL_RANK") == "0"
            and (per_hour := cost.price_now(self.volume))
        ):
            self.store.set(f"{PRICE}{node}", str(per_hour))

    def stop(self) -> None:
        """Stop beating, wait for the thread, let go of the store: before the rank returns.

        A thread still inside ``TCPStore.set`` (a C++ call that lets go of the GIL) when the
        interpreter finalizes is ended by ``pthread_exit`` as it takes the GIL back; that
        unwinds through pybind11's ``noexcept`` GIL guard, and the C++ runtime calls
        ``std::terminate``: "terminate called without an active exception", SIGABRT, and
        torchrun failed a run that had completed (#41; reproduced with the beat's interval at
        0: tests/bench/rank_exit.py)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()  # at most the store's 10 s timeout
        self.store = None

    def finish(self) -> bool:
        """Training completed on this rank: rank 0, whose last epoch is published by now, says
        so; every other rank waits for it (up to FINISH_WAIT), so that no rank's exit can make
        torchrun tear rank 0 down while it publishes or exports. True once the job is known
        finished, recorded for this node's ``launch``."""
        try:
            if self.rank == 0:
                # before the others hear it: one of them may die at its exit
                chose(self.runtime, ExitCode.OK)
                self.store.set(FINISHED, "1")
            else:
                self.store.wait([FINISHED], FINISH_WAIT)
                chose(self.runtime, ExitCode.OK)  # this node's launch: the job finished
        except Exception as err:  # node 0 gone, or an export longer than FINISH_WAIT
            log.warning("rank %d: node 0 did not say the job finished (%s)", self.rank, err)
            return False
        return True

    def _pulses(self) -> dict[int, bytes]:
        keys = {r: f"trainbox/beat/{r}" for r in range(self.world) if r != self.rank}
        return {r: self.store.get(k) for r, k in keys.items() if self.store.check([k])}

    def silent(self) -> str | None:
        """After a failed collective: which ranks stopped beating, in words; None if none."""
        try:
            before = self._pulses()
            time.sleep(3 * HEARTBEAT_SECONDS)
            after = self._pulses()
            gone = [
                r for r in range(self.world) if r != self.rank and after.get(r) == before.get(r)
            ]
            nodes = {r: self.store.get(f"trainbox/node/{r}").decode() for r in gone}
        except Exception:
            return (
                f"node 0 ({os.environ.get('MASTER_ADDR')}), which holds the rendezvous, "
                "stopped answering"
            )
        if not gone:
            return None
        named = ", ".join(f"rank {r} (node {nodes[r]})" for r in gone)
        return f"{named} stopped answering: that node failed or was stopped"


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
