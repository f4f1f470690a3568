"""Shared test helpers."""

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from entrypoint import __version__
from entrypoint.settings import config

if TYPE_CHECKING:
    from tests.standins.hub import Hub

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

# The provider templates, and what every one of them may hold.
PROVIDERS = REPO / "configs" / "providers"
IMAGE = re.compile(rf"^ghcr\.io/[A-Za-z0-9_.-]+/trainbox:{re.escape(__version__)}-cu1[0-9]{{2}}$")
KNOWN = {key.upper() for key in config.KEYS} | {"HF_TOKEN", "HF_TOKEN_FILE", "NOTIFY"}


def pytest_configure(config: pytest.Config) -> None:
    """torch in the host tests (this process and the programs it starts) uses one thread: the
    container tests train beside them on the same two cores (``-n 2``, below), and two torch
    processes each spinning two OpenMP threads on two cores both train 8x slower (measured here,
    2026-12-03: a 6-epoch demo in a container took 242 s beside a host run, 29 s alone, 51 s
    with the host run at one thread). The containers keep torch's own default, as production.

    Under xdist the controller serves the wheelhouse to the image builds of both workers (the
    training worker's and the one that runs the containers that train nothing, below)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        from tests.container.conftest import serve_wheelhouse

        serve_wheelhouse()


# Container tests that train nothing (refusals at start, builds, the registry push): the host
# tests' worker takes them once its own are done, beside the training worker. Two containers
# that train side by side would both train 8x slower (above), so each of these must stop
# before a training step (tests/container/conftest.py checks it); prefixes of node ids.
ASIDE = "containers beside training"  # their unit of work
BESIDE_TRAINING = tuple(
    f"tests/container/{name}"
    for name in (
        "test_release.py",
        "test_skypilot.py",
        "test_restarts.py::test_a_start_that_cannot_stop_its_pod_stays_up_idle",
        "test_compose.py::test_compose_asks_for_every_gpu",
        "test_compose.py::test_cpu_override_drops_the_gpu_request",
        "test_compose.py::test_env_example_means_the_same",
        "test_dataset.py::test_doctor_errors_stop_the_run",
        "test_dataset.py::test_not_enough_disk_stops_before_downloading",
        "test_dataset.py::test_a_dataset_repo_that_does_not_exist",
        "test_faults.py::test_a_hub_down_while_a_new_volume_resumes_trains_nothing",
        "test_faults.py::test_a_refused_xet_token_stops_at_start",
        "test_faults.py::test_a_stop_during_staging",
        "test_image.py::test_a_bad_setting_stops_before_training",
        "test_image.py::test_torch_is_exactly_the_pinned_build",
        "test_image.py::test_the_build_fails_when_a_dependency_would_replace_torch",
        "test_image.py::test_image_size_bench_accounts_for_every_byte",
        "test_image.py::test_any_command_runs_under_tini",
        "test_preflight.py::test_auto_without_a_gpu_stops",
        "test_preflight.py::test_check_on_the_cpu_reports_and_passes",
        "test_preflight.py::test_small_shm_with_workers_stops_when_told_to",
        "test_upload.py::test_a_bad_token_stops_before_training",
    )
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler for ``-n 2`` (pyproject.toml): the container tests that train
    are one unit of work, run in order by one worker (they share one engine, the image it
    builds once, and the host's ports); every host test is a unit of its own, run by the other
    worker meanwhile, and the container tests that train nothing are one unit that the first
    worker free takes last (the host tests end ~10 min before the training chain does).
    (Not ``--dist loadgroup``: it renames nodes, which pytest 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ContainersTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(BESIDE_TRAINING):
                return ASIDE
            return "containers" if nodeid.startswith("tests/container/") else nodeid

        def _assign_work_unit(self, node: object) -> None:
            if ASIDE in self.workqueue:  # the containers that train nothing go last
                self.workqueue.move_to_end(ASIDE)
            super()._assign_work_unit(node)

    return ContainersTogether(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What a test shows on purpose (a ``user_properties`` entry named ``shown``: a list of
    lines), printed after the run: under xdist a worker's own output never reaches the screen."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, lines in report.user_properties:
                if name == "shown":
                    terminalreporter.write_line(f"\n{report.nodeid}:")
                    for line in lines:
                        terminalreporter.write_line(f"  {line}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (host networking shares ports)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def trainbox(
    *args: str, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """Run the real ``trainbox`` command (``python -m entrypoint``) in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "entrypoint", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        cwd=REPO,
        **kwargs,
    )


def settings(workspace: Path, **environ: str) -> config.Config:
    """The config of a run on ``workspace``, built as ``trainbox run`` builds it."""
    return config.load({"WORKSPACE": str(workspace), **environ})


def client_at(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point the real huggingface_hub client, in this process, at ``url``: what HF_ENDPOINT
    does at import (the resolve URL template is built from it then)."""
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", url)
    monkeypatch.setattr(
        "huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
        url + "/{repo_id}/resolve/{revision}/{filename}",
    )


@pytest.fixture
def hub(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator["Hub"]:
    """A fresh test Hub on 127.0.0.1, and a fresh xet cache: hf_xet's cache, per endpoint,
    remembers chunks it uploaded and does not send them again, but a new Hub on a port used
    before holds none of them (its shard is refused: seen in CI)."""
    from huggingface_hub.utils import _xet

    from tests.standins.hub import Hub

    monkeypatch.setenv("HF_XET_CACHE", str(tmp_path_factory.mktemp("xet")))
    _xet._GLOBAL_XET_HOLDER.sigint_abort()  # this process's session reads it anew
    with Hub() as server:
        yield server


@pytest.fixture
def cfg(hub: "Hub", tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> config.Config:
    """A run on ``tmp_path`` that uploads to ``org/w`` on the test Hub: a token that may
    write, and this process's Hub client pointed at the test Hub."""
    from tests.standins.hub import GOOD_TOKEN

    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    client_at(monkeypatch, hub.url)
    return settings(tmp_path, OUTPUT_REPO="org/w")


def tar_on_hub(hub: "Hub", repo: str, folder: Path, size: int) -> bytes:
    """A one-file dataset (data.yaml and ``size`` bytes) packed as ``NAME.tar`` in ``repo``
    on the test Hub, NAME the folder's; returns the tar's bytes."""
    from entrypoint.dataset.packed import archive

    folder.mkdir()
    (folder / "data.yaml").write_text("names: {0: a}\n")
    (folder / "a.bin").write_bytes(b"x" * size)
    tar = folder.with_suffix(".tar")
    archive.pack(folder, tar)
    hub.add(repo, {tar.name: tar.read_bytes()})
    return tar.read_bytes()


def finishes(work: Callable[[], T], guard: float) -> T:
    """``work()``'s result, run in a thread; the test fails if it is still running after
    ``guard`` seconds. A guard against a hang (set far past the deadline under test), never a
    measurement: the assertions are on what ``work`` returns and what the stand-ins saw."""
    import threading

    done: list = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as err:  # handed to the test's own thread
            failed.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(guard)
    if worker.is_alive():
        pytest.fail(f"still running after {guard} s: unbounded")
    if failed:
        raise failed[0]
    return done[0]
