"""The image under SkyPilot's own docker initialization (tests/skypilot/docker_init.py runs
SkyPilot's ``DockerInitializer``, from the SkyPilot the tests install): the container it
starts serves SSH on port 10022 with the VM's key, as SkyPilot then connects to it, though
the image ships no host key."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.container.conftest import docker

pytestmark = pytest.mark.container

SKYPILOT = REPO / ".venv" / "skypilot"
CONTAINER = "sky_container"  # SkyPilot's name for it (sky/skylet/constants.py)
SSH = ["ssh", "-p", "10022", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
       "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10"]  # fmt: skip


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[Path]:
    """The VM's home: the key SkyPilot connects with, in its authorized_keys."""
    if not SKYPILOT.is_dir():
        pytest.fail(f"SkyPilot is not in {SKYPILOT}: tests/run installs it there")
    (tmp_path / ".ssh").mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")],
                   check=True)  # fmt: skip
    (tmp_path / ".ssh" / "authorized_keys").write_text((tmp_path / "key.pub").read_text())
    docker("rm", "--force", CONTAINER)
    yield tmp_path
    docker("rm", "--force", CONTAINER)


def test_skypilots_docker_initialization_gives_ssh_on_10022(image: str, vm: Path) -> None:
    keys = docker("run", "--rm", "--entrypoint", "sh", image, "-c", "ls /etc/ssh/ | grep -c host")
    assert keys.stdout.strip() == "0", keys.stdout  # the image ships no host key
    init = subprocess.run(
        [sys.executable, str(REPO / "tests" / "skypilot" / "docker_init.py"), image, str(vm)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(SKYPILOT)},
    )  # fmt: skip
    assert init.returncode == 0, init.stderr[-3000:]
    assert init.stdout.strip().splitlines()[-1] == "root"  # the user SkyPilot connects as
    # As SkyPilot runs its commands in the container: a login shell, over SSH.
    status = subprocess.run([*SSH, "-i", str(vm / "key"), "root@127.0.0.1",
                             "bash --login -c 'trainbox status'"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    # trainbox answers, in SkyPilot's container, before any job: no run yet (its exit 1).
    assert status.returncode == 1, status.stderr[-2000:]
    assert "no container has run on this volume" in status.stderr, status.stderr[-2000:]
    made = docker("exec", CONTAINER, "sh", "-c", "ls /etc/ssh/ssh_host_*_key")
    assert "ssh_host_ed25519_key" in made.stdout  # this container's own, made at its start
