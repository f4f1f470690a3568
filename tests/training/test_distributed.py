"""torchrun's environment: the ranks train on the GPUs DEVICE selects, the ones preflight checked.

libreyolo puts rank N on cuda:LOCAL_RANK whatever ``device`` says (libreyolo 1.6.0,
``training/trainer.py``, ``Trainer._setup_device``), so the selection has to be made by
``CUDA_VISIBLE_DEVICES`` before torchrun starts the ranks.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from entrypoint.runtime import processes
from entrypoint.settings import config
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from entrypoint.state.run import Run
from entrypoint.training import distributed
from tests.conftest import REPO, free_port


def env_for(tmp_path: Path, device: str, **parent: str) -> dict[str, str]:
    cfg = config.load({"WORKSPACE": str(tmp_path), "DEVICE": device, "NPROC_PER_NODE": "2"})
    return distributed.environment(cfg.device, {"PATH": "/usr/bin", **parent})


def test_device_indices_become_the_only_visible_gpus_in_their_order(tmp_path: Path) -> None:
    assert env_for(tmp_path, "2,3")["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env_for(tmp_path, "3,1")["CUDA_VISIBLE_DEVICES"] == "3,1"


def test_indices_count_among_the_gpus_already_visible(tmp_path: Path) -> None:
    """As torch counts them: with CUDA_VISIBLE_DEVICES=4,5,6,7, DEVICE=1 is the host's GPU 5."""
    restricted = env_for(tmp_path, "1,3", CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert restricted["CUDA_VISIBLE_DEVICES"] == "5,7"
    uuids = env_for(tmp_path, "0", CUDA_VISIBLE_DEVICES="GPU-aa, GPU-bb")
    assert uuids["CUDA_VISIBLE_DEVICES"] == "GPU-aa"


def test_auto_and_cpu_leave_the_environment_as_it_is(tmp_path: Path) -> None:
    for device in ("auto", "cpu"):
        assert env_for(tmp_path, device, CUDA_VISIBLE_DEVICES="4,5") == {
            "PATH": "/usr/bin",
            "CUDA_VISIBLE_DEVICES": "4,5",
        }
    assert "CUDA_VISIBLE_DEVICES" not in env_for(tmp_path, "auto")


# A rank as the train program runs one, its heartbeat beating without pause (the race of #41
# made frequent: before Heartbeat.stop, 9 of 10 such runs here ended in SIGABRT).
RANK = """
import sys, time
from entrypoint.training import distributed
distributed.HEARTBEAT_SECONDS = 0
pulse = distributed.Heartbeat.start()
time.sleep(0.3)
pulse.stop()
"""


def test_a_stopped_heartbeat_lets_every_rank_exit_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    for _ in range(2):
        ran = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
             f"--master-port={free_port()}", str(script)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "terminate called" not in ran.stderr


def test_the_ranks_meet_at_the_end_and_record_the_job_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 waits for rank 0's last publish before it returns; both record the job finished
    for their node's launch."""
    import torch.distributed as dist

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("RANK", "1")
    one = distributed.Heartbeat(dist.TCPStore("127.0.0.1", port, is_master=False), 2, None,
                                tmp_path)  # fmt: skip
    heard: list[bool] = []
    waiting = threading.Thread(target=lambda: heard.append(one.finish()))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive() and store.code(tmp_path, "rank") is None
    monkeypatch.setenv("RANK", "0")
    zero = distributed.Heartbeat(dist.TCPStore("127.0.0.1", port, is_master=False), 2, None,
                                 tmp_path)  # fmt: skip
    assert zero.finish()
    waiting.join(30)
    assert heard == [True] and store.code(tmp_path, "rank") == ExitCode.OK
    del server


@pytest.mark.parametrize(
    ("torchrun", "rank", "failures", "expected", "said"),
    [
        (1, ExitCode.OK, {1: -6}, ExitCode.OK, "but at their exit rank 1 died of SIGABRT ("),
        (1, ExitCode.OK, {0: -15, 1: 3}, ExitCode.OK, "rank 0 died of SIGTERM, rank 1 exited 3"),
        (1, None, {1: -6}, 1, None),  # died before the job finished: failed, as before
        (0, ExitCode.OK, {}, ExitCode.OK, None),
        (1, ExitCode.NODE_LOST, {}, ExitCode.NODE_LOST, None),
    ],
)
def test_launch_judges_a_death_after_the_job_finished_completed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    torchrun: int,
    rank: int | None,
    failures: dict[int, int],
    expected: int,
    said: str | None,
) -> None:
    """torchrun stands in as a process that exits with its code; the ranks' records are the
    store's files that ``elastic`` and the ranks write."""
    cfg = config.load({"WORKSPACE": str(tmp_path), "DEVICE": "cpu", "NPROC_PER_NODE": "2"})
    store.mark_started(tmp_path)
    if rank is not None:
        store.write_code(tmp_path, "rank", rank)
    store.write_failures(tmp_path, failures)
    exits = [sys.executable, "-c", f"raise SystemExit({torchrun})"]
    monkeypatch.setattr(distributed, "torchrun", lambda _cfg, _procs: exits)
    with caplog.at_level("WARNING", logger="trainbox"):
        assert processes.launch(Run(cfg, tmp_path), 2) == expected
    assert (said in caplog.text) if said else ("counts as completed" not in caplog.text)


def test_node_0_keeps_the_jobs_price_this_machines_and_every_other_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 1 says its machine's price in torchrun's store; the job's rank 0 keeps it on node
    0's volume; node 0's watchdog prices the job as the sum."""
    import torch.distributed as dist

    from entrypoint.runtime import pricing
    from entrypoint.state import cost
    from tests.conftest import settings

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    node0, node1 = Volume(tmp_path / "node0", 0), Volume(tmp_path / "node1", 1)
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    for volume in (node1, node0):
        store.mark(volume, fresh=True, started=time.time() - 60)
    monkeypatch.setenv("NODE_RANK", "1")
    cost.note_price(node1, 0.50, "vast.ai", time.time())
    for key, value in {"RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    distributed.Heartbeat(dist.TCPStore("127.0.0.1", port, is_master=False), 2, node1).prices()

    for key, value in {"NODE_RANK": "0", "RANK": "0", "GROUP_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    cfg = settings(node0.root, PRICE_PER_HOUR="1.00", NNODES="2", NODE_RANK="0",
                   MASTER_ADDR="127.0.0.1", OUTPUT_REPO="org/weights")  # fmt: skip
    reader = pricing.Pricing(cfg)
    reader.read(time.time())  # before training: this machine's price alone
    reader.reading.join()
    assert cost.price_now(node0) == 1.00
    distributed.Heartbeat(dist.TCPStore("127.0.0.1", port, is_master=False), 2, node0).prices()
    assert store.node_prices(node0) == {"1": 0.50}
    reader.read(time.time())
    assert cost.price_now(node0) == 1.50
    assert store.prices(node0)["source"] == "PRICE_PER_HOUR + 1 other node(s)"
    store.mark(node0, fresh=True, started=time.time())  # a new container: none heard yet
    assert store.node_prices(node0) == {}
    del server
