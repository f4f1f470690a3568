"""`trainbox plan`: the disk to rent, and whether to stop or destroy between runs."""

import math
import os
from pathlib import Path

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from entrypoint.training import outputs, weights
from tests.conftest import settings, trainbox
from tests.standins.hub import Hub


def test_plan_stop_reproduces_the_published_figures() -> None:
    """250 GB at $0.20 per GB-month stopped: $0.0694/h, 98% less than $3.4828/h running;
    with a $1.00 rebuild, stopping wins for gaps under about 14 hours."""
    result = trainbox(
        "plan", "stop", "--disk-gb", "250", "--storage-price", "0.20",
        "--running-price", "3.4828", "--rebuild-cost", "1.00", "--gap", "8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "stopped      250 GB x $0.20 per GB-month / 720 h = $0.0694 per hour (the disk only)"
    )
    assert lines[1] == (
        "running      $3.4828 per hour: stopped costs $3.4134 per hour less (98% less)"
    )
    assert lines[2].startswith("break-even   a $1.00 rebuild = 14.4 h stopped")
    assert lines[3] == "for 8 h     stop: $0.56 stopped against a $1.00 rebuild"
    assert "stopping releases the GPUs" in lines[4]
    longer = trainbox(
        "plan", "stop", "--disk-gb", "250", "--storage-price", "0.20",
        "--running-price", "3.4828", "--rebuild-cost", "1.00", "--gap", "20",
    )  # fmt: skip
    assert "for 20 h     destroy, then rebuild: $1.39 stopped" in longer.stdout


def test_plan_cost_ranks_cards_by_the_run_not_the_hour() -> None:
    """The guide's point, in numbers: the card cheapest per hour is not the cheapest run."""
    result = trainbox(
        "plan", "cost", "--epochs", "100", "--overhead-min", "10",
        "--card", "A10=0.30:900", "--card", "RTX 4090=0.69:310", "--card", "H100 SXM=2.99:95",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["RTX", "A10", "H100"]
    # (100 x 310 s + 600 s) at $0.69/h
    assert lines[0].endswith("$0.0594 per epoch; 100 epochs + 10 min: 8.78 h, $6.06")
    assert lines[3] == "cheapest     RTX 4090; fastest H100 SXM, +2.33 USD for 5.97 h sooner"
    bad = trainbox("plan", "cost", "--epochs", "3", "--card", "A10=0.30")
    assert bad.returncode == 2 and "expected NAME=USD_PER_HOUR:SECONDS_PER_EPOCH" in bad.stderr


def test_plan_disk_adds_data_checkpoints_and_a_margin(hub: Hub, tmp_path: Path) -> None:
    (tmp_path / "shapes").mkdir()
    (tmp_path / "shapes" / "data.yaml").write_text("names: {0: a}\n")
    (tmp_path / "shapes" / "blob").write_bytes(os.urandom(5_000_000))
    archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
    tar = (tmp_path / "shapes.tar").stat().st_size
    hub.add("org/shapes", {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()})
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "",
           "TRAINBOX_CONFIG": "", "DATA": "", "DATASET_REPO": ""}  # fmt: skip
    result = trainbox(
        "plan", "disk", "--dataset-repo", "org/shapes", "--epochs", "100",
        "--save-period", "10", "--checkpoint-mb", "35", "--start-mb", "40", "--teacher-mb", "90",
        "--exports", "2", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # By hand: best + last + 100/10 snapshots = 12 checkpoints of 35 MB, twice (weights/ and
    # its published copy) = 0.840 GB; the 5 MB tar, extracted, and once more while a new
    # commit stages beside it; 40 MB of start weights, a 90 MB teacher, two exports of the
    # weights (35 MB / 4.3) twice; plus the xet cache's caps (2 GB of shards, 50 MB of logs);
    # times 1.30; rounded up.
    checkpoints, xet, exported = 12 * 35e6 * 2, 2.05e9, 2 * 35e6 / 4.3 * 2
    subtotal = 2 * tar + checkpoints + 40e6 + 90e6 + exported + xet
    total = subtotal * 1.30
    assert f"= {checkpoints / 1e9:.3f} GB" in result.stdout
    assert f"new commit   {tar / 1e9:.3f} GB: a new commit" in result.stdout
    assert "start        0.040 GB" in result.stdout and "teacher      0.090 GB" in result.stdout
    assert "exports      2 format(s) x 0.008 GB" in result.stdout
    assert f"= {exported / 1e9:.3f} GB" in result.stdout
    assert "xet cache    at most 2.050 GB" in result.stdout
    assert f"subtotal     {subtotal / 1e9:.3f} GB" in result.stdout
    assert f"margin       x 1.30 = {total / 1e9:.3f} GB" in result.stdout
    assert result.stdout.splitlines()[-1] == f"allocate     {math.ceil(total / 1e9)} GB"
    assert math.ceil(total / 1e9) == 4
    assert not [m for m, p in hub.requests if m == "GET" and p.endswith("shapes.tar")]


def test_plan_disk_reads_the_start_weights_size_from_the_hub(hub: Hub, tmp_path: Path) -> None:
    """MODEL=hf://...: its size from the Hub's metadata, nothing downloaded."""
    demo.ensure(tmp_path / "shapes")
    archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
    hub.add("org/shapes", {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()})
    hub.add("org/start", {"w.pt": os.urandom(3_000_000)}, kind="models")
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "", "TRAINBOX_CONFIG": "", "DATA": "",
           "DATASET_REPO": "", "MODEL": "hf://org/start/w.pt", "EXPORT": "onnx"}  # fmt: skip
    result = trainbox("plan", "disk", "--dataset-repo", "org/shapes", "--checkpoint-mb", "35",
                      env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "start        0.003 GB (MODEL's weights" in result.stdout
    assert "exports      1 format(s)" in result.stdout
    assert not [p for m, p in hub.requests if m == "GET" and p.endswith("w.pt")]


def test_plan_disk_names_a_missing_repo(hub: Hub) -> None:
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": ""}
    result = trainbox("plan", "disk", "--dataset-repo", "org/nope", "--checkpoint-mb", "1", env=env)
    assert result.returncode == 3
    assert "DATASET_REPO=org/nope: not found" in result.stderr


def test_a_start_counts_what_training_will_still_write(tmp_path: Path) -> None:
    """The start's part of the sum: a checkpoint's size from what there is to know (a resumed
    run's last.pt, else MODEL's architecture, else the start weights' own size), less what
    the run holds already; nothing on a node other than 0."""
    cfg = settings(tmp_path, MODEL="hf://org/w/best.pt", EPOCHS="10", SAVE_PERIOD="5",
                   EXPORT="onnx")  # fmt: skip
    found = weights.source(cfg)
    # best, last and 10 / 5 snapshots = 4 checkpoints of the 3 MB start weights, twice; one
    # export of the weights (3 MB / 4.3), twice
    assert outputs.left(cfg, found, 3_000_000) == int(4 * 3e6 * 2 + 3e6 / 4.3 * 2)
    named = settings(tmp_path, MODEL="LibreYOLO9t.pt", EPOCHS="10", SAVE_PERIOD="5")
    assert outputs.left(named, weights.source(named), 0) == 4 * 35_310_808 * 2  # its weights x 4.3
    (cfg.run_dir / "weights").mkdir(parents=True)
    for name in ("last.pt", "best.pt"):  # a resumed run: its own checkpoints say the size
        (cfg.run_dir / "weights" / name).write_bytes(b"x" * 1_000_000)
    assert outputs.left(cfg, None, 0) == int(4 * 1e6 * 2 + 1e6 / 4.3 * 2) - 2_000_000
    other = settings(tmp_path, MODEL="LibreYOLO9t.pt", NNODES="2", NODE_RANK="1",
                     MASTER_ADDR="10.0.0.1", OUTPUT_REPO="org/w")  # fmt: skip
    assert outputs.left(other, weights.source(other), 0) == 0  # LibreYOLO saves on rank 0
