"""torchrun's environment: the ranks train on the GPUs DEVICE selects, the ones preflight checked.

libreyolo puts rank N on cuda:LOCAL_RANK whatever ``device`` says (libreyolo 1.6.0,
``training/trainer.py``, ``Trainer._setup_device``), so the selection has to be made by
``CUDA_VISIBLE_DEVICES`` before torchrun starts the ranks.
"""

from pathlib import Path

from entrypoint.settings import config
from entrypoint.training import distributed


def env_for(tmp_path: Path, device: str, **parent: str) -> dict[str, str]:
    cfg = config.load({"WORKSPACE": str(tmp_path), "DEVICE": device, "NPROC_PER_NODE": "2"})
    return distributed.environment(cfg, {"PATH": "/usr/bin", **parent})


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
