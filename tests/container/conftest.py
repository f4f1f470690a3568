"""Container tests: a real Docker engine builds the real Dockerfile, and its containers train.

The engine and client come from the machine (``.ci/run`` installs and starts them;
``DOCKER`` names the client). With ``TRAINBOX_WHEELHOUSE`` set, pip inside the build
installs from that folder, served on loopback, instead of PyPI. Without an engine the
tests skip, except under CI, where they fail.
"""

import functools
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCKER = os.environ.get("DOCKER", "docker")
IMAGE = os.environ.get("TRAINBOX_TEST_IMAGE", "trainbox:test")
# A fixed port keeps the build args, and so Docker's layer cache, the same between runs.
WHEELHOUSE_PORT = int(os.environ.get("TRAINBOX_WHEELHOUSE_PORT", "8765"))
LOGS = REPO / ".cache" / "test-logs"


def docker(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the docker client; output captured as text, never raising on failure."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1", **kwargs.pop("env", {})}
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, env=env, **kwargs
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (host networking shares ports)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


@pytest.fixture(scope="session")
def build_args(engine: None) -> Iterator[list[str]]:
    """The tested flavour, with pip's source: the wheelhouse on loopback when one is given."""
    wheelhouse = os.environ.get("TRAINBOX_WHEELHOUSE")
    if not wheelhouse:
        yield FLAVOUR_ARGS
        return
    server = serve(Path(wheelhouse), WHEELHOUSE_PORT)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    yield [*FLAVOUR_ARGS, "--build-arg", f"PIP_FIND_LINKS={url}", "--build-arg", "PIP_NO_INDEX=1"]
    server.shutdown()


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
