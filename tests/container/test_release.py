"""A release through a real registry: docker/release.py --push to Debian's docker-registry (the
CNCF distribution registry) on 127.0.0.1, then read back through the Distribution API, the
routes an engine's pull takes: the tag, its manifest, every blob it names, the config's labels,
and one layer downloaded and unpacked to its digest. A cold engine's pull of the same image
(6.6 GB to unpack, about 1 minute here) is measured by tests/bench/cold_start.py, not repeated
here. Only the flavour whose torch is on PyPI (cu130) builds here: cu126's and cu132's wheels
live on PyTorch's index, which this machine cannot reach; their commands are checked by
tests/test_release.py."""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from entrypoint import __version__
from tests.bench import cold_start
from tests.conftest import REPO
from tests.container.conftest import DOCKER, TESTED_CUDA, docker, dockerfile_arg

pytestmark = pytest.mark.container


# The registry's storage outlives the run, on a fixed port: the engine remembers, per registry
# and repository, the compressed blobs it pushed there and checks for them first, so the next
# run's push sends only the layers that changed, as a second release does, instead of
# compressing 6.6 GB anew (142 s of both cores here). A new machine pushes it all.
STORE = Path(os.environ.get("TRAINBOX_TEST_REGISTRY", Path.home() / ".cache" / "trainbox-registry"))
PORT = int(os.environ.get("TRAINBOX_TEST_REGISTRY_PORT", "8766"))


@pytest.fixture
def registry(engine: None) -> Iterator[int]:
    if not shutil.which("docker-registry"):
        message = "no docker-registry (apt-get install docker-registry; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server, port = cold_start.registry(STORE, PORT)
    yield port
    server.terminate()
    server.wait(30)


def get(url: str, method: str = "GET") -> tuple[bytes, dict[str, str]]:
    """One Distribution API request: (body, headers)."""
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request) as answer:
        return answer.read(), dict(answer.headers)


def test_a_release_reaches_the_registry_whole_with_the_tested_layers_and_labels(
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
    api = f"http://127.0.0.1:{registry}/v2/o/trainbox"
    assert json.loads(get(f"{api}/tags/list")[0])["tags"] == [f"{__version__}-cu130"]
    manifest = cold_start.manifest(registry, f"o/trainbox:{__version__}-cu130")
    assert manifest["mediaType"] == cold_start.MANIFEST
    for blob in [manifest["config"], *manifest["layers"]]:  # what a pull downloads, all there
        _, headers = get(f"{api}/blobs/{blob['digest']}", method="HEAD")
        assert int(headers["Content-Length"]) == blob["size"], blob
    config_blob = get(f"{api}/blobs/{manifest['config']['digest']}")[0]
    assert "sha256:" + hashlib.sha256(config_blob).hexdigest() == manifest["config"]["digest"]
    config = json.loads(config_blob)
    # The registry holds the image the other container tests ran, layer for layer.
    tested = docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", image).stdout
    assert config["rootfs"]["diff_ids"] == json.loads(tested)
    # One layer, downloaded and unpacked as a pull does, is the layer it names.
    index, layer = min(enumerate(manifest["layers"]), key=lambda pair: pair[1]["size"])
    packed = get(f"{api}/blobs/{layer['digest']}")[0]
    assert "sha256:" + hashlib.sha256(packed).hexdigest() == layer["digest"]
    unpacked = "sha256:" + hashlib.sha256(gzip.decompress(packed)).hexdigest()
    assert unpacked == config["rootfs"]["diff_ids"][index]
    labels = config["config"]["Labels"]
    assert labels["ai.trainbox.version"] == __version__
    assert labels["ai.trainbox.cuda"] == TESTED_CUDA
    assert labels["ai.trainbox.torch"] == dockerfile_arg("TORCH_VERSION")
    assert labels["ai.trainbox.libreyolo"] == dockerfile_arg("LIBREYOLO_VERSION")
