"""The container's status file: phases recorded atomically, a new start begins afresh."""

import json
from pathlib import Path

from entrypoint import status


def test_phases_keep_what_was_recorded_and_a_fresh_start_resets(tmp_path: Path) -> None:
    status.record(tmp_path, "preflight", fresh=True, run="run")
    status.record(tmp_path, "failed", reason="no GPU visible")
    status.record(tmp_path, status.ended(6), exit_code=6)
    written = json.loads((tmp_path / "trainbox" / "status.json").read_text())
    assert written["phase"] == "failed" and written["reason"] == "no GPU visible"
    assert written["run"] == "run" and written["exit_code"] == 6
    assert written["started_at"] <= written["updated_at"]
    status.record(tmp_path, "preflight", fresh=True, run="run")
    assert "reason" not in status.read(tmp_path)
    assert [status.ended(code) for code in (0, 1, 7, 130)] == [
        "completed",
        "failed",
        "failed",
        "interrupted",
    ]
    assert [p.name for p in (tmp_path / "trainbox").iterdir()] == ["status.json"]


def test_libreyolo_state_of_a_run(tmp_path: Path) -> None:
    assert status.run_state(tmp_path) is None
    (tmp_path / "status.json").write_text('{"state": "running"}')
    assert status.run_state(tmp_path) == "running"
    (tmp_path / "status.json").write_text("{torn")
    assert status.run_state(tmp_path) is None
