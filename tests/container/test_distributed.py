"""Several processes and machines through torchrun, in real containers on this machine:
host networking, rendezvous on 127.0.0.1, the CPU (gloo)."""

import hashlib
import json
import re
import time
import uuid

import pytest

from entrypoint.errors import ExitCode
from tests.conftest import REPO, free_port
from tests.container.conftest import (
    TRAIN,
    docker,
    env_for,
    hub_epochs,
    in_volume,
    run_container,
)
from tests.standins.hub import GOOD_TOKEN, Hub

pytestmark = pytest.mark.container


def test_two_containers_train_as_two_nodes_and_only_node_0_uploads(image: str, hub: Hub) -> None:
    nodes = Nodes(image, hub, EPOCHS="2")
    nodes.own = {0: {"PRICE_PER_HOUR": "1.00"}, 1: {"PRICE_PER_HOUR": "0.50"}}
    try:
        nodes.start(0, 1)
        codes = [nodes.wait(0), nodes.wait(1)]
        logs = [nodes.log(0), nodes.log(1)]
        assert codes == [0, 0], "\n=====\n".join(log[-3000:] for log in logs)
        assert "distributed: rank 0 of world size 2 (node 0" in logs[0]
        assert "distributed: rank 1 of world size 2 (node 1" in logs[1]
        assert "uploaded epoch 2" in logs[0] and "upload" not in logs[1].lower()
        assert "epoch 2/2 done" in logs[0] and "epoch 2/2 done" not in logs[1]
        final = json.loads(in_volume(image, nodes.volumes[0], "trainbox", "status", "--json"))
        assert (final["phase"], final["exit_code"]) == ("completed", 0)
        # Node 0 prices the job: its machine and node 1's, as node 1 said it.
        assert final["cost"]["per_hour"] == 1.50, final["cost"]
        assert final["cost"]["source"] == "PRICE_PER_HOUR + 1 other node(s)"
        # Node 1 keeps its own status and publishes nothing: node 0 speaks for the job.
        listing = in_volume(
            image,
            nodes.volumes[1],
            "sh",
            "-c",
            "ls -A /workspace/trainbox; ls -A /workspace/trainbox/published/run 2>/dev/null; true",
        )
        assert "status.json" not in listing.split() and "last.pt" not in listing
        own = json.loads(
            in_volume(image, nodes.volumes[1], "cat", "/workspace/trainbox/status-node1.json")
        )
        assert (own["phase"], own["exit_code"]) == ("completed", 0)
        assert set(hub.repos["models/org/weights"].files) >= {"run/last.pt", "run/best.pt"}
    finally:
        nodes.remove()


class Nodes:
    """Containers that are the nodes of one job, each with its own volume."""

    def __init__(self, image: str, hub: Hub, **extra: str) -> None:
        self.image, self.tag = image, uuid.uuid4().hex[:8]
        self.env = {"DEVICE": "cpu", "NNODES": "2", "MASTER_ADDR": "127.0.0.1",
                    "MONITOR": "false", "OMP_NUM_THREADS": "1", "HF_ENDPOINT": hub.url,
                    "HF_TOKEN": GOOD_TOKEN,
                    "OUTPUT_REPO": "org/weights", "UPLOAD_INTERVAL": "1", **extra}  # fmt: skip
        self.own: dict[int, dict[str, str]] = {}  # a node's own settings (its price)
        self.names = [f"trainbox-node{rank}-{self.tag}" for rank in (0, 1)]
        self.volumes = [f"trainbox-test-node{rank}-{self.tag}" for rank in (0, 1)]

    def start(self, *ranks: int) -> None:
        port = str(free_port())  # a fresh rendezvous for every start
        for rank in ranks:
            docker("rm", "-f", self.names[rank])
            env = {**self.env, **self.own.get(rank, {}), "NODE_RANK": str(rank),
                   "MASTER_PORT": port}  # fmt: skip
            flags = [f for k, v in env.items() for f in ("-e", f"{k}={v}")]
            mount = f"{self.volumes[rank]}:/workspace"
            started = docker("run", "-d", "--name", self.names[rank], "--network", "host",
                             "-v", mount, *flags, self.image)  # fmt: skip
            assert started.returncode == 0, started.stderr

    def wait(self, rank: int) -> int:
        return int(docker("wait", self.names[rank], timeout=900).stdout)

    def log(self, rank: int) -> str:
        result = docker("logs", self.names[rank])
        return result.stdout + result.stderr

    def remove(self) -> None:
        for name in self.names:
            docker("rm", "-f", name)
        for volume in self.volumes:
            docker("volume", "rm", "--force", volume)


def test_a_lost_node_ends_the_job_naming_its_rank_and_both_resume(image: str, hub: Hub) -> None:
    nodes = Nodes(image, hub, EPOCHS="3")
    try:
        nodes.start(0, 1)
        deadline = time.monotonic() + 600
        while "uploaded epoch 1" not in nodes.log(0):
            assert time.monotonic() < deadline, nodes.log(0)[-3000:]
            time.sleep(1)
        docker("kill", nodes.names[1])
        code = nodes.wait(0)
        log = nodes.log(0)
        assert code == ExitCode.NODE_LOST, log[-4000:]
        # The heartbeats' line (rank 1's beat stopped), not a collective's timeout.
        assert "training stopped on rank 0: rank 1 (node 1) stopped answering" in log
        uploaded = json.loads(
            in_volume(
                image, nodes.volumes[0], "cat", "/workspace/trainbox/published/run/index.json"
            )
        )
        held = hub.repos["models/org/weights"].files["run/last.pt"]
        assert hashlib.sha256(held).hexdigest() == uploaded["files"]["last.pt"]

        nodes.start(0, 1)  # both again: every rank resumes from the Hub's last.pt
        codes = [nodes.wait(0), nodes.wait(1)]
        logs = [nodes.log(0), nodes.log(1)]
        assert codes == [0, 0], "\n=====\n".join(log[-3000:] for log in logs)
        for rank, log in enumerate(logs):
            assert f"rank {rank} of world size 2" in log
            assert "resuming run run from the last.pt on org/weights" in log
        assert f"epoch {uploaded['epoch']}/3 done" not in logs[0] and "epoch 3/3 done" in logs[0]
    finally:
        nodes.remove()


def test_a_node_that_never_joins_times_out_with_one_line(image: str, hub: Hub) -> None:
    nodes = Nodes(image, hub, RDZV_TIMEOUT="15")
    try:
        nodes.start(0)  # node 1 never comes
        code = nodes.wait(0)
        log = nodes.log(0)
        assert code == ExitCode.NODE_LOST, log[-3000:]
        assert "NNODES=2: the job never started: not every node joined 127.0.0.1:" in log
    finally:
        nodes.remove()


FAULTS = REPO / "tests" / "container" / "faults"
# rank_abort.py makes a rank die of SIGABRT; the .pth runs it in every Python process.
ABORT = ("-v", f"{FAULTS}:/faults:ro", "-v",
         f"{FAULTS / 'rank_abort.pth'}:/opt/trainbox/venv/lib/python3.11/site-packages/"
         "rank_abort.pth:ro")  # fmt: skip


def test_two_processes_in_one_container_and_a_rank_dying_at_its_exit(
    image: str, volume: str, hub: Hub
) -> None:
    """#41: a rank that dies at its exit, once the job finished, fails torchrun, not the run."""
    env = {**env_for(hub), "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port()),
           "EPOCHS": "2", "TRAINBOX_TEST_ABORT": "exit",
           "TRAINBOX_TEST_ABORT_RANK": "1"}  # fmt: skip
    result = run_container(image, volume, env=env, options=ABORT)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "rank 0 of world size 2 (node 0, local rank 0)" in log
    assert "rank 1 of world size 2 (node 0, local rank 1)" in log
    assert "global batch 8 / world_size 2" in log  # BATCH stays the global batch
    # torchrun may also have stopped rank 0 as it exited: named too, when it did.
    said = re.search(r"training completed and its last epoch is published, but at their exit "
                     r"(.*) \(torchrun stops the other ranks when one fails\): the run counts "
                     r"as completed", log)  # fmt: skip
    assert said and "rank 1 died of SIGABRT" in said[1], log[-4000:]
    status = json.loads(in_volume(image, volume, "cat", "/workspace/runs/run/status.json"))
    assert status["state"] == "completed", status
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (final["phase"], final["exit_code"]) == ("completed", 0)
    assert hub_epochs(hub)[-1] == 2  # the last epoch reached the Hub


def test_a_rank_dying_during_training_fails_the_run(image: str, volume: str) -> None:
    env = {**TRAIN, "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port()), "EPOCHS": "3",
           "MONITOR": "false", "TRAINBOX_TEST_ABORT": "training",
           "TRAINBOX_TEST_ABORT_RANK": "1"}  # fmt: skip
    result = run_container(image, volume, env=env, options=ABORT)
    log = result.stdout + result.stderr
    assert result.returncode == ExitCode.TRAINING_FAILED, log[-4000:]
    assert "Signal 6 (SIGABRT) received by PID" in log  # torchrun's report names it
    assert "counts as completed" not in log and "epoch 3/3 done" not in log
    final = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert final["exit_code"] == ExitCode.TRAINING_FAILED, final
    assert final["reason"] == "training failed"  # no rank lived to say more: the meaning
    assert result.stderr.strip().splitlines()[-1] == (  # the last line: what to do
        "[trainbox] exit 1: training failed; read the last lines of `docker logs` and "
        "`runs/RUN_NAME/train.log`"
    )
