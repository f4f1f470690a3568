"""The benchmark scripts run (tiny sizes here; the numbers come from running them by hand)."""

import subprocess
import sys

import pytest

from tests.conftest import REPO


def bench(script: str, *args: str, timeout: float) -> str:
    """Run ``tests/bench/SCRIPT`` with ``args``; return what it printed."""
    result = subprocess.run(
        [sys.executable, f"tests/bench/{script}", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_stage_bench_compares_every_method_on_both_rates() -> None:
    printed = bench("stage.py", "--gb", "0.02", "--rate", "50", "--rounds", "2", timeout=300)
    assert "as one tar and as 8 shards" in printed
    for section in ("throttled to 50 MB/s per connection", "unthrottled"):
        block = printed.split(section, 1)[1]
        for method in ("curl | tar -x", "curl | tar -x, shards x4", "download, then extract",
                       "trainbox stage", "trainbox, checkpoint 1 s", "trainbox stage, shards x4",
                       "trainbox restart (staged)"):  # fmt: skip
            assert method in block
    assert "speed vs the single tar" in printed.split("goals, sharded staging:", 1)[1]


def test_upload_bench_measures_the_steps_wait_and_the_bytes_of_both_paths() -> None:
    printed = bench("upload.py", "--part", "step", "--mb", "5", "--rounds", "1", timeout=300)
    assert "step wait, copy in the step" in printed and "step wait, copy in a thread" in printed
    assert "% of a 60 s epoch (goal: at most 1%" in printed
    printed = bench("upload.py", "--part", "bytes", "--epochs", "1", timeout=600)
    xet, lfs = (line for line in printed.splitlines() if line.startswith(("Xet ", "LFS ")))
    assert "MB/epoch" in xet and "MB/epoch" in lfs and "1.00x the file" in lfs


def test_status_bench_times_every_form_while_training() -> None:
    printed = bench("status.py", "--runs", "2", "--epochs", "5", timeout=600)
    assert "while training (training)" in printed
    for form in ("trainbox status ", "trainbox status --json", "trainbox status --health"):
        assert form in printed


def test_the_cold_start_baseline_is_the_dockerfile_with_torch_in_one_pip_layer() -> None:
    from tests.bench import cold_start

    real = (REPO / "Dockerfile").read_text()
    one = cold_start.baseline(real)
    image = one.rsplit("\nFROM system\n", 1)[1]  # the image's own stage
    assert "COPY --from=torch" not in image and "torch-removed.txt" not in image
    assert image.count('"torch==${TORCH_VERSION}"') == 1  # one pip step installs it
    before, after = (
        real.split("COPY --from=torch /layers/1/ /\n")[0],
        real.split("torch-removed.txt\n")[-1],
    )
    assert one.startswith(before) and one.endswith(after)  # nothing else differs


def test_the_cold_start_pull_goal_names_the_floor_the_unthrottled_pull_sets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A throttled pull cannot end before the unthrottled one: that is the lowest ratio."""
    from tests.bench import cold_start

    pulls = {"unthrottled: pull": {"layers": 55.4, "baseline": 56.4},
             "100 MB/s each: pull": {"layers": 58.7, "baseline": 75.7}}  # fmt: skip
    cold_start.pull_goals(pulls, {"largest layer (GB)": {"layers": 1.2}}, "100 MB/s each")
    printed = capsys.readouterr().out
    assert "pull at 100 MB/s each: 0.78x the one-layer baseline" in printed
    assert "floor 0.73x" in printed and "largest layer 1.20 GB" in printed


def test_the_cold_start_proxy_caps_each_connection() -> None:
    """What one CDN stream gives: two connections at once each held to the rate (that they
    are not held to half of it is a speed claim: the bench prints it)."""
    from tests.bench import cold_start

    size, rate = 8 << 20, 16e6  # 0.52 s per connection at the cap
    _, seconds = cold_start.streams(rate, size)
    assert len(seconds) == 2 and min(seconds) >= 0.9 * size / rate


def test_published_bench_times_parquet_against_the_tar_and_their_memory() -> None:
    printed = bench("published.py", "--images", "40", "--rounds", "1", "--rate", "50",
                    timeout=300)  # fmt: skip
    assert "40 JPEG images" in printed and "as 1 parquet file(s)" in printed
    for name in ("parquet", "tar"):
        assert any(line.startswith(name) and "peak RSS" in line for line in printed.splitlines())
    assert "the tar's time (goal: at most 1.3x)" in printed


def test_evaluation_bench_sets_the_evaluation_against_an_epoch_of_the_same_run() -> None:
    printed = bench("evaluation.py", "--epochs", "1", timeout=600)
    assert "epoch (mean of 1):" in printed
    for what in ("test split alone", "val split alone", "the whole process"):
        line = next(line for line in printed.splitlines() if what in line)
        assert line.endswith("x an epoch)"), line
