"""The GPU acceptance script (tests/gpu/acceptance.py) cannot rot while no card is at hand:
CI runs its dry mode, and checks that it needs nothing but a python3 with torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "tests" / "gpu" / "acceptance.py"
NOT_ON_A_BARE_MACHINE = ("pydantic", "click", "typer", "yaml", "huggingface_hub", "libreyolo")


def accept(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict]:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # from anywhere, not only the checkout's root
        env=env,
    )
    return done.returncode, done.stdout, json.loads(out.read_text())


def test_the_dry_run_passes_every_step_a_machine_without_a_card_can_run(tmp_path: Path) -> None:
    code, stdout, report = accept(tmp_path, "--dry-run")
    assert code == 0, stdout
    assert report["passed"] and report["dry_run"]
    check = report["preflight"]
    assert check["torch"].startswith("2.") and check["verdict"] == "fail"
    assert check["fix"].startswith("no GPU visible: run with --gpus all")
    assert check["exit_code"] == 6
    loop = report["loop"]
    assert loop["steps"] == 10 and loop["steps_per_second"] > 0
    assert loop["loss_last"] < loop["loss_first"]
    assert report["libreyolo"]["weights"] == ["best.pt", "last.pt"]
    assert report["libreyolo"]["epoch_seconds"] > 0
    lines = stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "preflight",
        "loop",
        "libreyolo",
        "acceptance",
    ]
    assert lines[-1].startswith("acceptance: passed")


def test_it_needs_nothing_but_torch(tmp_path: Path) -> None:
    """trainbox's own dependencies and libreyolo made unimportable: it runs, the LibreYOLO
    step says it is skipped."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in NOT_ON_A_BARE_MACHINE:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(blocked)}
    code, stdout, report = accept(tmp_path, "--dry-run", env=env)
    assert code == 0, stdout
    assert report["libreyolo"] == {
        "skipped": "libreyolo is not importable here (libreyolo is not installed); step skipped"
    }
    assert report["loop"]["passed"] and report["preflight"]["passed"]


def test_without_a_card_the_real_run_fails_with_the_fix(tmp_path: Path) -> None:
    code, stdout, report = accept(tmp_path, "--no-libreyolo")
    assert code == 1
    assert not report["passed"] and not report["preflight"]["passed"]
    assert "verdict fail: no GPU visible" in stdout.splitlines()[0]
    assert report["loop"]["passed"] is False and "RuntimeError" in report["loop"]["error"]
    assert stdout.splitlines()[-1].startswith("acceptance: FAILED")
