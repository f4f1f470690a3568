"""Container tests: a real Docker engine builds the real Dockerfile, and its containers train.

The engine and client come from the machine (``.ci/run`` installs and starts them;
``DOCKER`` names the client). With ``TRAINBOX_WHEELHOUSE`` set, pip inside the build
installs from that folder, served on loopback, instead of PyPI. Without an engine the
tests skip, except under CI, where they fail.
"""

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from tests.conftest import BESIDE_TRAINING, REPO
from tests.standins.hub import GOOD_TOKEN, Hub

DOCKER = os.environ.get("DOCKER", "docker")
IMAGE = os.environ.get("TRAINBOX_TEST_IMAGE", "trainbox:test")
# A fixed port keeps the build args, and so Docker's layer cache, the same between runs.
WHEELHOUSE_PORT = int(os.environ.get("TRAINBOX_WHEELHOUSE_PORT", "8765"))
LOGS = REPO / ".cache" / "test-logs"


PRINTED: list[str] = []  # what docker commands printed during the test now running


def docker(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the docker client; output captured as text (and kept in PRINTED), never raising
    on failure."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1", **kwargs.pop("env", {})}
    result = subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, env=env, **kwargs
    )
    PRINTED.append(result.stdout + result.stderr)
    return result


@pytest.fixture(autouse=True)
def trains_nothing_when_beside_training(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test in BESIDE_TRAINING runs beside the training worker (tests/conftest.py says why):
    none of its containers may start the train program (supervisord's "spawned: 'train'").
    It reads what ``docker()`` printed: a foreground run's output, a detached Container's log
    (read at its removal); a container another program starts (SkyPilot's) is not seen."""
    PRINTED.clear()
    yield
    if request.node.nodeid.startswith(BESIDE_TRAINING):
        assert not any("spawned: 'train'" in out for out in PRINTED), (
            f"{request.node.nodeid} trains: take it out of BESIDE_TRAINING"
        )


def dockerfile_arg(name: str) -> str:
    """A build arg's default, read from the Dockerfile itself."""
    match = re.search(rf"^ARG {name}=(.*)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert match, f"no ARG {name} in the Dockerfile"
    return match.group(1).strip('"')


def compose_command() -> list[str]:
    """Docker Compose v2: the test venv's standalone binary, else the docker CLI plugin."""
    standalone = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    return [standalone] if standalone else [DOCKER, "compose"]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def serve(folder: Path, port: int = 0) -> ThreadingHTTPServer:
    """Serve ``folder`` on 127.0.0.1 from a background thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="session")
def engine() -> None:
    try:
        reachable = docker("info", timeout=60).returncode == 0
    except FileNotFoundError:
        reachable = False
    if not reachable:
        message = f"no Docker engine reachable through {DOCKER!r}; .ci/run shows how to start one"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


# The tests build the cu130 flavour, PyPI's own torch build: the one a wheelhouse or a PyPI
# mirror holds (the default, cu126, comes from PyTorch's index, which CI cannot reach).
TESTED_CUDA = "13.0"
FLAVOUR_ARGS = ["--build-arg", "TORCH_INDEX_URL=", "--build-arg", f"TORCH_CUDA={TESTED_CUDA}"]


SERVED = "TRAINBOX_WHEELHOUSE_SERVED"  # set where the xdist controller serves it for all


def serve_wheelhouse() -> ThreadingHTTPServer | None:
    """Serve TRAINBOX_WHEELHOUSE on WHEELHOUSE_PORT, unless nobody gave one or it is served."""
    wheelhouse = os.environ.get("TRAINBOX_WHEELHOUSE")
    if not wheelhouse or os.environ.get(SERVED):
        return None
    server = serve(Path(wheelhouse), WHEELHOUSE_PORT)
    os.environ[SERVED] = "1"  # seen by the workers the controller starts next
    return server


@pytest.fixture(scope="session")
def build_args(engine: None) -> Iterator[list[str]]:
    """The tested flavour, with pip's source: the wheelhouse on loopback when one is given."""
    if not os.environ.get("TRAINBOX_WHEELHOUSE"):
        yield FLAVOUR_ARGS
        return
    server = serve_wheelhouse()  # none under xdist: the controller serves it
    url = f"http://127.0.0.1:{WHEELHOUSE_PORT}/"
    yield [*FLAVOUR_ARGS, "--build-arg", f"PIP_FIND_LINKS={url}", "--build-arg", "PIP_NO_INDEX=1"]
    if server:
        server.shutdown()
        os.environ.pop(SERVED)


def build(tag: str, build_args: list[str], *extra: str) -> subprocess.CompletedProcess:
    """Build the real Dockerfile; the whole log is kept under .cache/test-logs."""
    result = docker(
        "build",
        "--network",
        "host",
        "--progress",
        "plain",
        "-t",
        tag,
        *build_args,
        *extra,
        str(REPO),
        timeout=2400,
    )
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"build-{tag.replace(':', '-')}.log").write_text(result.stdout + result.stderr)
    return result


@pytest.fixture(scope="session")
def image(build_args: list[str]) -> str:
    """The image, built once per session; dangling layers of earlier builds are pruned."""
    result = build(IMAGE, build_args)
    assert result.returncode == 0, result.stderr[-4000:]
    docker("image", "prune", "--force")
    return IMAGE


@pytest.fixture
def volume(engine: None) -> Iterator[str]:
    name = f"trainbox-test-{uuid.uuid4().hex[:8]}"
    yield name
    docker("volume", "rm", "--force", name)


def run_container(
    image: str, volume: str, *args: str, env: dict[str, str] | None = None, options: tuple = ()
) -> subprocess.CompletedProcess:
    """``docker run`` the image on host networking with the volume on /workspace.

    ``options`` are more ``docker run`` flags (mounts, ``--entrypoint``); ``args`` follow the image.
    """
    flags = [item for key, value in (env or {}).items() for item in ("-e", f"{key}={value}")]
    return docker(
        "run", "--rm", "--network", "host", "-v", f"{volume}:/workspace", *options, *flags,
        image, *args, timeout=900,
    )  # fmt: skip


def in_volume(image: str, volume: str, *command: str) -> str:
    """Run a command against the volume in a throwaway container; return its stdout."""
    result = run_container(image, volume, *command[1:], options=("--entrypoint", command[0]))
    assert result.returncode == 0, result.stderr
    return result.stdout


# What the container tests share: a tiny CPU run, the test Hub's settings, a dataset on it.
# EVALUATE=none as MONITOR=false elsewhere: the result (best.pt's evaluation, the card's scores)
# is checked where a test asks for it with EVALUATE=auto (test_upload, test_status,
# test_restarts, test_dataset); in every other run it added 10 to 30 s (CI, 2026-12-06).
TRAIN = {"DEVICE": "cpu", "MODEL": "LibreYOLO9t.pt", "PRETRAINED": "false", "BATCH": "8",
         "IMGSZ": "128", "WORKERS": "0", "MONITOR_HOST": "127.0.0.1",
         "EVALUATE": "none"}  # fmt: skip


OUTPUT = "org/weights"  # the runs' OUTPUT_REPO on the test Hub


def hub_env(hub: Hub, **extra: str) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
            "UPLOAD_INTERVAL": "1", **extra}  # fmt: skip


def env_for(hub: Hub, **extra: str) -> dict[str, str]:
    return {**TRAIN, **hub_env(hub), "OUTPUT_REPO": OUTPUT, "MONITOR": "false", **extra}


def logs(result) -> str:
    return result.stdout + result.stderr


def shapes_on_the_hub(hub: Hub, tmp_path: Path) -> bytes:
    demo.ensure(tmp_path / "shapes")
    archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
    data = (tmp_path / "shapes.tar").read_bytes()
    hub.add("org/shapes", {"shapes.tar": data})
    return data


PUBLISHED_INDEX = "/workspace/trainbox/published/run/index.json"


class Container:
    """A detached container on host networking, checked for health every second."""

    def __init__(self, image: str, volume: str, env: dict[str, str]) -> None:
        self.name = f"trainbox-status-{volume[-8:]}"
        flags = [f for k, v in env.items() for f in ("-e", f"{k}={v}")]
        self.started = time.monotonic()
        result = docker("run", "-d", "--name", self.name, "--network", "host",
                        "-v", f"{volume}:/workspace", "--health-interval", "1s",
                        "--health-retries", "1", *flags, image)  # fmt: skip
        assert result.returncode == 0, result.stderr

    def inspect(self) -> tuple[bool, str, int]:
        """(running, health, exit code)."""
        fields = "{{.State.Running}} {{.State.Health.Status}} {{.State.ExitCode}}"
        out = docker("inspect", "--format", fields, self.name)
        running, health, code = out.stdout.split()
        return running == "true", health, int(code)

    def status(self, *args: str) -> subprocess.CompletedProcess:
        return docker("exec", self.name, "trainbox", "status", *args, timeout=30)

    def logs(self) -> str:
        result = docker("logs", self.name)
        return result.stdout + result.stderr

    def remove(self) -> None:
        self.logs()  # into PRINTED, for trains_nothing_when_beside_training
        docker("rm", "-f", self.name)


def until(done: Callable[[], bool], box: Container, seconds: float = 300) -> None:
    """Wait for ``done``; past ``seconds``, fail with the container's log."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, box.logs()[-3000:]
        time.sleep(0.5)


def phase(box: Container) -> str | None:
    return json.loads(box.status("--json").stdout or "{}").get("phase")


def stop(box: Container, timeout: int) -> tuple[int, str]:
    """``docker stop -t timeout``: (exit code, log). Docker is the clock: a container still
    up after ``timeout`` seconds is killed, and exits 137 instead of its own code."""
    docker("stop", "-t", str(timeout), box.name, timeout=timeout + 60)
    return box.inspect()[2], box.logs()


@contextmanager
def detached(image: str, volume: str, env: dict[str, str]) -> Iterator[Container]:
    """A detached container, removed however the test ends."""
    box = Container(image, volume, env)
    try:
        yield box
    finally:
        box.remove()


def hub_epochs(hub: Hub) -> list[int]:
    """The epoch of ``run/last.pt`` at each commit that changed it, by the index beside it."""
    repo = hub.repos[f"models/{OUTPUT}"]
    found, before = [], None
    for commit in repo.commits:
        files = repo.snapshots[commit].files
        if files.get("run/last.pt") not in (None, before):
            found.append(json.loads(files["run/index.json"])["epoch"])
        before = files.get("run/last.pt")
    return found
