"""The benchmark scripts run (tiny sizes here; the numbers come from running them by hand)."""

import subprocess
import sys

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
    printed = bench("stage.py", "--gb", "0.01", "--rate", "50", timeout=300)
    for section in ("throttled to 50 MB/s", "unthrottled"):
        block = printed.split(section, 1)[1]
        for method in ("curl | tar -x", "download, then extract", "trainbox stage",
                       "trainbox, checkpoint 1 s", "trainbox restart (staged)"):  # fmt: skip
            assert method in block


def test_status_bench_times_every_form_while_training() -> None:
    printed = bench("status.py", "--runs", "2", "--epochs", "5", timeout=600)
    assert "while training (training)" in printed
    for form in ("trainbox status ", "trainbox status --json", "trainbox status --health"):
        assert form in printed
