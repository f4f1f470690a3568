"""A release through a real registry: docker/release.py --push to Debian's docker-registry (the
CNCF distribution registry) on 127.0.0.1, then pulled back by a second engine that has never
seen the image. Only the flavour whose torch is on PyPI (cu130) builds here: cu126's and
cu132's wheels live on PyTorch's index, which this machine cannot reach; their commands are
checked by tests/test_release.py."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from entrypoint import __version__
from tests.bench import cold_start
from tests.conftest import REPO
from tests.container.conftest import DOCKER, TESTED_CUDA, docker, dockerfile_arg

pytestmark = pytest.mark.container


@pytest.fixture
def registry(engine: None) -> Iterator[int]:
    if not shutil.which("docker-registry"):
        message = "no docker-registry (apt-get install docker-registry; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    folder = tempfile.mkdtemp(prefix="tbreg-", dir="/tmp")
    server, port = cold_start.registry(Path(folder))
    yield port
    server.terminate()
    server.wait(30)
    shutil.rmtree(folder, ignore_errors=True)


def make_room(folder: Path, compressed: int, image: str) -> None:
    """Disk for a cold pull into ``folder``: the compressed layers it downloads and the image
    they unpack to, with 1 GB to spare. The CI machine's disk is shared and has filled here
    ("no space left on device" in the cold engine's pull, 2026-12-01): when it is short, this
    engine's build cache goes first (the session's image is built; no later test builds), and
    if that is not enough, the test fails saying how much was missing, before pulling."""
    size = int(docker("image", "inspect", "--format", "{{.Size}}", image).stdout.strip() or 0)
    needed = compressed + size + 10**9
    if shutil.disk_usage(folder).free < needed:
        docker("builder", "prune", "--force", timeout=900)
    free = shutil.disk_usage(folder).free
    assert free >= needed, (
        f"the cold pull needs {needed / 1e9:.1f} GB free in {folder.parent} and "
        f"{free / 1e9:.1f} GB are, after pruning the build cache: free disk on this machine"
    )


def test_a_release_reaches_the_registry_and_a_cold_engine_pulls_its_tag_and_labels(
    image: str, build_args: list[str], registry: int
) -> None:
    pip = [arg for arg in build_args if arg.startswith("PIP_")]  # the wheelhouse, if any
    released = subprocess.run(
        [sys.executable, "docker/release.py", "--registry", f"127.0.0.1:{registry}/o", "--push",
         "--flavour", "cu130", "--docker", DOCKER, "--network", "host",
         *(f"--build-arg={arg}" for arg in pip)],
        cwd=REPO, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert released.returncode == 0, released.stderr[-3000:]
    ref = f"127.0.0.1:{registry}/o/trainbox:{__version__}-cu130"
    assert docker("image", "inspect", ref).returncode != 0  # removed after its push
    with urllib.request.urlopen(f"http://127.0.0.1:{registry}/v2/o/trainbox/tags/list") as tags:
        assert json.load(tags)["tags"] == [f"{__version__}-cu130"]
    folder = Path(tempfile.mkdtemp(prefix="tbc-", dir="/tmp"))
    make_room(folder, cold_start.compressed(registry, f"o/trainbox:{__version__}-cu130")[0], image)
    engine, host = cold_start.cold_engine(folder)
    try:
        assert docker("-H", host, "image", "ls", "-q").stdout == ""  # cold: it has nothing
        pulled = docker("-H", host, "pull", ref, timeout=1800)
        assert pulled.returncode == 0, pulled.stderr[-2000:]
        shown = docker("-H", host, "image", "inspect", "--format", "{{json .Config.Labels}}", ref)
        labels = json.loads(shown.stdout)
    finally:
        engine.terminate()
        engine.wait(60)
        shutil.rmtree(folder, ignore_errors=True)
    assert labels["ai.trainbox.version"] == __version__
    assert labels["ai.trainbox.cuda"] == TESTED_CUDA
    assert labels["ai.trainbox.torch"] == dockerfile_arg("TORCH_VERSION")
    assert labels["ai.trainbox.libreyolo"] == dockerfile_arg("LIBREYOLO_VERSION")
