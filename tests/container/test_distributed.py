"""Several processes and machines through torchrun, in real containers on this machine:
host networking, rendezvous on 127.0.0.1, the CPU (gloo)."""

import json
import socket
import time
import uuid

import pytest

from tests.container.conftest import docker, in_volume, run_container
from tests.hub import GOOD_TOKEN, Hub

pytestmark = pytest.mark.container


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_containers_train_as_two_nodes_and_only_node_0_uploads(image: str, hub: Hub) -> None:
    port, tag = free_port(), uuid.uuid4().hex[:8]
    common = {"DEVICE": "cpu", "NNODES": "2", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(port), "EPOCHS": "2", "MONITOR": "false",
              "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_TOKEN": GOOD_TOKEN,
              "OUTPUT_REPO": "org/weights", "UPLOAD_INTERVAL": "1"}  # fmt: skip
    names = [f"trainbox-node{rank}-{tag}" for rank in (0, 1)]
    volumes = [f"trainbox-test-node{rank}-{tag}" for rank in (0, 1)]
    try:
        for rank, (name, volume) in enumerate(zip(names, volumes, strict=True)):
            flags = [f for k, v in {**common, "NODE_RANK": str(rank)}.items()
                     for f in ("-e", f"{k}={v}")]  # fmt: skip
            started = docker("run", "-d", "--name", name, "--network", "host",
                             "-v", f"{volume}:/workspace", *flags, image)  # fmt: skip
            assert started.returncode == 0, started.stderr
        codes = [int(docker("wait", name, timeout=900).stdout) for name in names]
        logs = [docker("logs", name) for name in names]
        logs = [log.stdout + log.stderr for log in logs]
        assert codes == [0, 0], "\n=====\n".join(log[-3000:] for log in logs)
        assert "distributed: rank 0 of world size 2 (node 0" in logs[0]
        assert "distributed: rank 1 of world size 2 (node 1" in logs[1]
        assert "uploaded epoch 2" in logs[0] and "upload" not in logs[1].lower()
        assert "epoch 2/2 done" in logs[0] and "epoch 2/2 done" not in logs[1]
        final = json.loads(in_volume(image, volumes[0], "trainbox", "status", "--json"))
        assert (final["phase"], final["exit_code"]) == ("completed", 0)
        # Node 1 writes no container status and publishes nothing: node 0 speaks for the job.
        listing = in_volume(image, volumes[1], "sh", "-c", "ls -A /workspace/trainbox; "
                            "ls -A /workspace/runs/run/published 2>/dev/null; true")  # fmt: skip
        assert "status.json" not in listing and "last.pt" not in listing
        assert set(hub.repos["models/org/weights"].files) >= {"run/last.pt", "run/best.pt"}
    finally:
        for name in names:
            docker("rm", "-f", name)
        for volume in volumes:
            docker("volume", "rm", "--force", volume)


def test_two_processes_in_one_container(image: str, volume: str) -> None:
    env = {"DEVICE": "cpu", "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port()),
           "EPOCHS": "2", "MONITOR": "false"}  # fmt: skip
    started = time.monotonic()
    result = run_container(image, volume, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "rank 0 of world size 2 (node 0, local rank 0)" in log
    assert "rank 1 of world size 2 (node 0, local rank 1)" in log
    assert "global batch 8 / world_size 2" in log  # BATCH stays the global batch
    status = json.loads(in_volume(image, volume, "cat", "/workspace/runs/run/status.json"))
    assert status["state"] == "completed", time.monotonic() - started
