"""The benchmark scripts run (tiny sizes here; the numbers come from running them by hand)."""

import subprocess
import sys

from tests.conftest import REPO


def test_stage_bench_compares_every_method_on_both_rates() -> None:
    result = subprocess.run(
        [sys.executable, "tests/bench/stage.py", "--gb", "0.01", "--rate", "50"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for section in ("throttled to 50 MB/s", "unthrottled"):
        block = result.stdout.split(section, 1)[1]
        for method in ("curl | tar -x", "download, then extract", "trainbox stage",
                       "trainbox, checkpoint 1 s", "trainbox restart (staged)"):  # fmt: skip
            assert method in block


def test_status_bench_times_every_form_while_training() -> None:
    result = subprocess.run(
        [sys.executable, "tests/bench/status.py", "--runs", "2", "--epochs", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "while training (training)" in result.stdout
    for form in ("trainbox status ", "trainbox status --json", "trainbox status --health"):
        assert form in result.stdout
