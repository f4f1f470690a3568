"""Out-of-memory kills named: the count that rose, the line with the limit, the peak and the fix."""

import signal
from pathlib import Path

from entrypoint.errors import ExitCode
from entrypoint.runtime import memory
from tests.preflight.test_limits import V1, V2, tree

# PyTorch's own words for a worker the kernel killed (torch/utils/data/dataloader.py and its
# C++ SIGCHLD handler), as the trainer's failure line carries them.
KILLED = ("training failed: RuntimeError: DataLoader worker (pid 4242) is killed by signal: "
          "Killed. (traceback in /workspace/runs/run/train.log)")  # fmt: skip
EXITED = "training failed: RuntimeError: DataLoader worker (pid(s) 77, 78) exited unexpectedly"


def test_a_rising_count_is_a_kill(tmp_path: Path) -> None:
    group = tree(tmp_path, V2)
    seen = memory.watch(group)
    assert not seen.killed()
    events = tmp_path / "memory.events"
    events.write_text(events.read_text().replace("oom_kill 2", "oom_kill 3"))
    assert seen.killed()
    assert memory.watch(group).killed() is False  # counted from now


def test_without_a_count_a_sigkill_counts(tmp_path: Path) -> None:
    group = tree(tmp_path, {**V1, "memory/memory.oom_control": "oom_kill_disable 0"})
    seen = memory.watch(group)
    assert seen.killed(-signal.SIGKILL) and not seen.killed(1) and not seen.killed(-6)


def test_the_line_names_memory_the_limit_the_peak_and_the_fix(tmp_path: Path) -> None:
    error = memory.error("the trainer", 4, tree(tmp_path, V1))
    assert error.code == ExitCode.OUT_OF_MEMORY == 13
    assert str(error) == (
        "out of memory: the kernel killed the trainer at the container's memory limit of 1.26 GB,"
        " peak 1.19 GB: set fewer WORKERS (now 4), a smaller BATCH or IMGSZ, or use a machine "
        "with more memory; a restart resumes"
    )
    unlimited = tree(tmp_path / "host", {"memory/memory.limit_in_bytes": "9223372036854771712"})
    assert str(memory.error("the trainer", 0, unlimited)).startswith(
        "out of memory: the kernel killed the trainer at the machine's memory: set a smaller BATCH"
    )


def test_a_lost_worker_is_told_apart() -> None:
    assert memory.worker_died(KILLED) and memory.worker_died(EXITED)
    assert not memory.worker_died("training failed: RuntimeError: CUDA out of memory")


def test_the_status_figures_leave_out_what_is_unknown(tmp_path: Path) -> None:
    assert memory.figures(tree(tmp_path, V2)) == {
        "limit_bytes": 1258291200, "peak_bytes": 1190000640, "oom_kills": 2}  # fmt: skip
    assert memory.figures(tree(tmp_path / "bare", {"cgroup.controllers": "cpu"})) == {}
