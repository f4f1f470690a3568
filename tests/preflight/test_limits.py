"""The cgroup readers, on file trees laid out as the kernel lays out each version (the files'
contents are what Docker 20.10 and Linux 6.x write for ``--memory 1200m --cpus 1.5``)."""

from pathlib import Path

import pytest

from entrypoint.preflight import limits

GIB = 1 << 30

V2 = {
    "cgroup.controllers": "cpuset cpu io memory pids",
    "memory.max": "1258291200",
    "memory.peak": "1190000640",
    "memory.current": "734003200",
    "memory.events": "low 0\nhigh 0\nmax 41\noom 2\noom_kill 2\noom_group_kill 0",
    "cpu.max": "150000 100000",
    "cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000",
}
V1 = {
    "memory/memory.limit_in_bytes": "1258291200",
    "memory/memory.max_usage_in_bytes": "1190000640",
    "memory/memory.usage_in_bytes": "734003200",
    "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3",
    "cpu/cpu.cfs_quota_us": "150000",
    "cpu/cpu.cfs_period_us": "100000",
    "cpuacct/cpuacct.usage": "2500000000",
}
UNLIMITED_V1 = "9223372036854771712"  # what v1 says for "no limit"


def tree(root: Path, files: dict[str, str], proc: str = "") -> limits.Cgroup:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    (root / "self-cgroup").write_text(proc or "0::/\n")
    return limits.Cgroup(root, root / "self-cgroup")


@pytest.mark.parametrize("files", [V2, V1], ids=["v2", "v1"])
def test_a_limited_container(tmp_path: Path, files: dict[str, str]) -> None:
    group = tree(tmp_path, files)
    assert limits.memory_limit(group) == 1258291200
    assert limits.memory_peak(group) == 1190000640
    assert limits.memory_used(group) == 734003200
    assert limits.oom_kills(group) == (2 if files is V2 else 3)
    assert limits.cpu_quota(group) == 1.5
    assert limits.cpu_seconds(group) == 2.5
    quota = "cpu.max" if files is V2 else "cpu.cfs_quota_us"
    assert limits.cpus(group, affinity=16) == (1, f"CPU quota, {quota}: 1.5")
    assert limits.cpus(group, affinity=1) == (1, "affinity mask")  # the smaller wins


@pytest.mark.parametrize(
    ("files", "unlimited"),
    [(V2, {"memory.max": "max", "cpu.max": "max 100000"}),
     (V1, {"memory/memory.limit_in_bytes": UNLIMITED_V1, "cpu/cpu.cfs_quota_us": "-1"})],
    ids=["v2", "v1"],
)  # fmt: skip
def test_no_limit_is_none_and_the_mask_counts(tmp_path: Path, files: dict, unlimited: dict) -> None:
    group = tree(tmp_path, {**files, **unlimited})
    assert limits.memory_limit(group) is None
    assert limits.cpu_quota(group) is None
    assert limits.cpus(group, affinity=8) == (8, "affinity mask")


def test_a_quota_under_one_cpu_is_one(tmp_path: Path) -> None:
    group = tree(tmp_path, {**V2, "cpu.max": "50000 100000"})
    assert limits.cpus(group, affinity=4) == (1, "CPU quota, cpu.max: 0.5")


def test_a_limit_above_the_container_counts_v2(tmp_path: Path) -> None:
    """Kubernetes' pod limit on the parent, none on the container (a host cgroup namespace:
    the process's cgroup is found under the mount from /proc/self/cgroup)."""
    files = {"cgroup.controllers": "cpu memory", "kubepods/pod1/memory.max": str(2 * GIB),
             "kubepods/pod1/ctr/memory.max": "max", "kubepods/pod1/ctr/memory.peak": "100",
             "kubepods/pod1/cpu.max": "200000 100000", "kubepods/pod1/ctr/cpu.max": "max 100000",
             "memory.max": "max"}  # fmt: skip
    group = tree(tmp_path, files, "0::/kubepods/pod1/ctr\n")
    assert group.folders("memory")[0] == tmp_path / "kubepods/pod1/ctr"
    assert limits.memory_limit(group) == 2 * GIB
    assert limits.memory_peak(group) == 100  # the container's own
    assert limits.cpu_quota(group) == 2.0


def test_v1_path_from_proc_self_cgroup(tmp_path: Path) -> None:
    proc = "12:memory:/docker/abc\n5:cpu,cpuacct:/docker/abc\n0::/\n"
    files = {"memory/docker/abc/memory.limit_in_bytes": str(GIB),
             "memory/docker/memory.limit_in_bytes": UNLIMITED_V1,
             "memory/memory.limit_in_bytes": UNLIMITED_V1,
             "cpu/docker/abc/cpu.cfs_quota_us": "200000",
             "cpu/docker/abc/cpu.cfs_period_us": "100000"}  # fmt: skip
    group = tree(tmp_path, files, proc)
    assert limits.memory_limit(group) == GIB
    assert limits.cpu_quota(group) == 2.0


def test_nothing_readable_is_none(tmp_path: Path) -> None:
    group = limits.Cgroup(tmp_path / "absent", tmp_path / "absent-proc")
    assert (limits.memory_limit(group), limits.memory_peak(group), limits.oom_kills(group),
            limits.cpu_quota(group), limits.cpu_seconds(group)) == (None,) * 5  # fmt: skip
    assert limits.cpus(group, affinity=3) == (3, "affinity mask")


def test_an_old_v1_kernel_keeps_no_kill_count(tmp_path: Path) -> None:
    group = tree(tmp_path, {**V1, "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0"})
    assert limits.oom_kills(group) is None


def test_host_available_memory(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683788 kB\nMemFree:        23137036 kB\n"
                       "MemAvailable:   24289928 kB\n")  # fmt: skip
    assert limits.available(meminfo) == 24289928 * 1024
    assert limits.available(tmp_path / "none") is None


def test_expendable_raises_the_score(tmp_path: Path) -> None:
    adj = tmp_path / "oom_score_adj"
    adj.write_text("0\n")
    limits.expendable(adj=adj)
    assert adj.read_text() == "1000"
    limits.expendable(limits.RESTARTS, adj)
    assert adj.read_text() == "900"
    limits.expendable(adj=tmp_path / "no" / "such")  # a kernel without it: nothing raised


def test_this_process_can_raise_its_own_score_and_children_inherit_it() -> None:
    """No privilege needed, the way the train program does it (in a child: this test process
    keeps its own)."""
    import subprocess
    import sys

    code = ("from entrypoint.preflight import limits; limits.expendable(); import subprocess; "
            "print(subprocess.run(['cat', '/proc/self/oom_score_adj'], capture_output=True, "
            "text=True).stdout.strip())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1000"


@pytest.mark.parametrize(("command", "score"), [("train", "1000"), ("evaluate", "1000"),
                                                ("upload", "900"), ("monitor", "900"),
                                                ("run", None), ("watchdog", None)])  # fmt: skip
def test_each_program_takes_its_tier_before_its_command_runs(
    command: str, score: str | None
) -> None:
    """The growers first, then what supervisord restarts; the job, supervisord and the watchdog
    keep the score they were started with (None: this test's own). The command itself is
    swapped for a probe that reads the score."""
    import subprocess
    import sys

    code = ("import runpy, sys; import entrypoint.cli as cli; cli.main = lambda: print(open("
            "'/proc/self/oom_score_adj').read().strip()); sys.argv = ['entrypoint', "
            f"{command!r}]; runpy.run_module('entrypoint', run_name='__main__')")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (score or Path("/proc/self/oom_score_adj").read_text().strip())
