"""The run-state store: one module owns every file that one process writes and another reads.

Two checks that nothing else opens them: the code (no other module names one), and a real
run (an audit hook in every Python process of ``trainbox run`` records who opened what).
"""

import ast
import os
import time
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from tests.conftest import REPO, trainbox
from tests.standins.hub import GOOD_TOKEN, Hub

PACKAGE = REPO / "entrypoint"
STORE = PACKAGE / "state" / "store.py"
# Names that only run-state files have (libreyolo's status.json in a run folder is its own).
NAMES = ("preflight.json", "starts.json", "settings.json", "prepared.json", "export.json",
         "stop.json", "-code.json", "rank-failures", "train-started", "clock", "ledger-",
         "lock-node", ".trainbox-")  # fmt: skip


def _named(tree: ast.AST) -> list[tuple[int, str]]:
    """The run-state names in a module's code (docstrings aside): a run-state file's name,
    or the volume's ``trainbox`` folder joined into a path (``workspace / "trainbox"``)."""
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    joined = {id(side) for node in ast.walk(tree)
              if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
              for side in (node.left, node.right)}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value
        folder = (text == store.FOLDER and id(node) in joined) or f"/{store.FOLDER}/" in text
        if id(node) not in docstrings and (folder or any(name in text for name in NAMES)):
            found.append((node.lineno, text))
    return found


def test_no_module_but_the_store_names_a_run_state_file() -> None:
    found = [f"{module.relative_to(REPO)}:{line}: {text!r}"
             for module in sorted(PACKAGE.rglob("*.py")) if module != STORE
             for line, text in _named(ast.parse(module.read_text()))]  # fmt: skip
    assert not found, "run-state paths built outside entrypoint/state/store.py:\n" + "\n".join(
        found
    )


def test_the_check_itself_catches_a_module_that_names_one() -> None:
    rogue = ast.parse(
        'log = getLogger("trainbox")\n'
        'path = workspace / "trainbox" / "preflight.json"\n'
        'ledger = f"{workspace}/trainbox/x"\n'
    )
    assert sorted(text for _, text in _named(rogue)) == [
        "/trainbox/x",
        "preflight.json",
        "trainbox",
    ]


def test_one_time_encoding_round_trips_in_whole_seconds() -> None:
    assert store.stamp(1767225600.9) == "2026-01-01T00:00:00Z"
    assert store.moment("2026-01-01T00:00:00Z") == 1767225600.0
    assert store.moment("yesterday") is None and store.moment(None) is None
    assert store.age("2026-01-01T00:00:00Z", now=1767225660.0) == 60.0


def test_torn_or_missing_files_read_as_empty(tmp_path: Path) -> None:
    assert store.status(Volume(tmp_path)) == {} and store.verdict(tmp_path) == {}
    (tmp_path / "trainbox").mkdir()
    (tmp_path / "trainbox" / "status.json").write_text('{"phase": "train')
    (tmp_path / "trainbox" / "starts.json").write_text('[{"at": 1}, "x"]')
    assert store.status(Volume(tmp_path)) == {}
    assert store.starts(tmp_path) == [{"at": 1}]
    assert store.index(tmp_path / "nothing") == {"epoch": 0, "files": {}}


def test_exit_codes_and_the_stop_in_the_runtime_folder(tmp_path: Path) -> None:
    assert store.code(tmp_path, "upload") is None and store.stop(tmp_path) is None
    store.write_code(tmp_path, "watchdog", ExitCode.STALLED, reason="no progress for 60 s")
    assert store.code(tmp_path, "watchdog") == ExitCode.STALLED
    assert store.reason(tmp_path, "watchdog") == "no progress for 60 s"
    store.write_stop(tmp_path, 1767225600.5)
    assert store.stop(tmp_path) == 1767225600.0  # earlier, never later: the flush's budget
    with pytest.raises(AssertionError):
        store.write_code(tmp_path, "someone", 1)


def test_each_node_keeps_its_own_status_and_clock(tmp_path: Path) -> None:
    node1, node0 = Volume(tmp_path, 1), Volume(tmp_path, 0)
    store.update_status(node1, lambda _: {"phase": "staging"})
    store.mark(node1, fresh=True, started=0.0)
    assert store.status_path(node1).name == "status-node1.json"
    assert store.status(node0) == {} and store.clock(node0) == {}
    assert store.status(node1) == {"phase": "staging"} and "started" in store.clock(node1)


def test_writers_of_the_status_never_lose_each_others_fields(tmp_path: Path) -> None:
    """Two processes changing one field each, 200 times: every change lands (the store's
    lock makes each read-modify-write whole)."""
    script = (
        "import sys; from pathlib import Path; from entrypoint.state import store\n"
        "from entrypoint.settings.launchers import Volume\n"
        "ws, key = Volume(Path(sys.argv[1])), sys.argv[2]\n"
        "for n in range(200):\n"
        "    store.update_status(ws, lambda s: {**s, key: s.get(key, 0) + 1})\n"
    )
    import subprocess
    import sys

    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), key], cwd=REPO)
               for key in ("a", "b")]  # fmt: skip
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    assert store.status(Volume(tmp_path)) == {"a": 200, "b": 200}


def test_a_second_holder_is_refused_naming_the_first_and_a_release_frees_it(
    tmp_path: Path,
) -> None:
    with store.volume(tmp_path, 0):
        with pytest.raises(TrainboxError) as caught, store.volume(tmp_path, 0):
            pass
        assert caught.value.code == ExitCode.VOLUME_IN_USE
        assert f"{tmp_path} is in use by another trainbox container (host " in str(caught.value)
        with store.volume(tmp_path, 1):  # another node's lock on a shared volume
            pass
    with store.volume(tmp_path, 0):  # released when its holder ended
        pass


def test_a_volume_that_cannot_be_written_is_the_preflights_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(TrainboxError) as caught, store.volume(tmp_path / "file", 0):
        pass
    assert caught.value.code == ExitCode.PREFLIGHT
    assert "is not writable" in str(caught.value)


# What a run's programs open under the run-state folders that is not run state: supervisord's
# own configuration and train's program (written for it), the published snapshot's copies of
# the run's files (the index lists them; the uploader sends them), and the uploader's scratch
# folder for a commit.
NOT_RUN_STATE = ("supervisord.conf", "train.conf", os.sep + "published" + os.sep,
                 os.sep + ".uploading-")  # fmt: skip


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real run (1 epoch on the CPU, uploads to the test Hub, an export), every Python
    process of it under the audit hook (tests/state/audit): what each opened, and where the
    config was built."""
    tmp_path = tmp_path_factory.mktemp("audited")
    workspace, scratch, log = tmp_path / "ws", tmp_path / "tmp", tmp_path / "audit.tsv"
    scratch.mkdir()
    roots = [str(workspace / store.FOLDER), str(scratch / "trainbox-")]
    with Hub() as hub:
        env = {"WORKSPACE": str(workspace), "DEVICE": "cpu", "EPOCHS": "1", "MONITOR": "false",
               "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN, "OUTPUT_REPO": "org/weights",
               "UPLOAD_INTERVAL": "1", "EXPORT": "torchscript", "DATA": "", "DATASET_REPO": "",
               "TRAINBOX_CONFIG": "", "TMPDIR": str(scratch), "HF_XET_CACHE": str(tmp_path / "xet"),
               "PYTHONPATH": str(REPO / "tests" / "state" / "audit"),
               "TRAINBOX_AUDIT": str(log),
               "TRAINBOX_AUDIT_ROOTS": os.pathsep.join(roots)}  # fmt: skip
        began = time.time()
        done = trainbox("run", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    opened = [(who, path) for kind, who, path in lines if kind == "open"]
    loads = [(pid, argv) for kind, pid, argv in lines if kind == "config.load"]
    return {"workspace": workspace, "began": began, "opened": opened, "loads": loads}


def test_in_a_real_run_only_the_store_opens_run_state_files(audited: dict) -> None:
    workspace = audited["workspace"]
    run_state = [(who, path) for who, path in audited["opened"]
                 if not any(n in path for n in NOT_RUN_STATE)]  # fmt: skip
    # The run wrote and read its run state: status, clock, verdict, settings, codes, ledger.
    names = {Path(path).name for _, path in run_state}
    assert {"status.json", "clock.json", "preflight.json", "settings.json", "prepared.json",
            "export.json", "train-code.json", "upload-code.json"} <= names, names  # fmt: skip
    assert any(name.startswith("ledger-") for name in names)
    strangers = sorted({f"{who}: {path}" for who, path in run_state
                        if who != "entrypoint/state/store.py"})  # fmt: skip
    assert not strangers, "\n".join(strangers)
    state = store.status(Volume(workspace))
    assert store.moment(state["started_at"]) >= int(audited["began"]) - 1
    # The train program reported its export in a file of its own; the job put it in the status.
    assert (
        state["export"]
        == store.export_report(workspace)
        == {"torchscript": "export/best.torchscript"}
    )


PROGRAMS = ("train", "upload", "watchdog", "monitor", "launch")


def test_in_a_real_run_the_config_is_built_once_and_never_by_a_program(audited: dict) -> None:
    """`trainbox run` builds it; every program the job starts (the preflight's `trainbox
    check` too) reads the job's settings instead."""
    per_process: dict[str, list[str]] = {}
    for pid, argv in audited["loads"]:
        per_process.setdefault(pid, []).append(argv)
    assert all(len(argvs) == 1 for argvs in per_process.values()), per_process
    commands = sorted(argvs[0].split()[-1] for argvs in per_process.values())
    assert commands == ["run"], commands
    assert not [a for argvs in per_process.values() for a in argvs
                if a.split()[-1] in PROGRAMS]  # fmt: skip
