"""What ``docker stop`` does to the final upload in each launch mode (docs/watching.md, "Stop grace,
per platform"), with the process trees the platforms make:

- the image's entrypoint kept (vast.ai's ``args`` mode, RunPod, compose, SkyPilot, Modal):
  tini is PID 1 and hands SIGTERM to trainbox, which stops training and pushes the last
  finished epoch;
- the entrypoint replaced (vast.ai's SSH and Jupyter modes, docs.vast.ai "Launch modes", read
  2026-11-30): the platform's own program is PID 1 and trainbox runs from ``onstart`` in the
  background. SIGTERM goes to that program; when it exits, the kernel kills trainbox with
  SIGKILL: no final upload, and the run's state is left as it was.
"""

import json
import time

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import PUBLISHED_INDEX, docker, env_for, hub_epochs, in_volume
from tests.standins.hub import Hub

pytestmark = pytest.mark.container

# A stand-in for the platform's PID 1: it ends on SIGTERM; trainbox started as onstart does.
REPLACED = 'trap "exit 0" TERM; trainbox run > /tmp/onstart.log 2>&1 & wait'


def uploaded(hub: Hub) -> list[int]:
    return hub_epochs(hub) if "models/org/weights" in hub.repos else []


def run_until_an_epoch_is_uploaded(name: str, hub: Hub) -> None:
    """Until the Hub holds an epoch and the volume has published a later one: uploads lag
    epochs (the Hub takes 7 s a checkpoint), so the stop then leaves the volume ahead of the
    Hub, which the final upload must catch up with. The volume is read, not waited for: on a
    loaded machine an epoch takes far longer than the 1-2 s it takes alone."""
    deadline = time.monotonic() + 600
    while not uploaded(hub) or published(name) <= max(uploaded(hub)):
        assert time.monotonic() < deadline, docker("logs", name).stderr[-3000:]
        time.sleep(0.5)


def published(name: str) -> int:
    """The epoch the running container has published on its volume (0: none yet)."""
    shown = docker("exec", name, "cat", PUBLISHED_INDEX)
    return json.loads(shown.stdout)["epoch"] if shown.returncode == 0 else 0


@pytest.mark.parametrize("mode", ["entrypoint kept", "entrypoint replaced"])
def test_docker_stop_and_the_final_upload(image: str, volume: str, hub: Hub, mode: str) -> None:
    hub.upload_rate = 5e6  # a 35 MB checkpoint takes 7 s: the Hub lags the 1-2 s epochs
    name = f"trainbox-mode-{volume[-8:]}"
    flags = [f for k, v in env_for(hub, EPOCHS="100").items() for f in ("-e", f"{k}={v}")]
    how = ("--entrypoint", "sh") if mode == "entrypoint replaced" else ()
    command = ("-c", REPLACED) if how else ()
    started = docker("run", "-d", "--name", name, "--network", "host", "-v",
                     f"{volume}:/workspace", *how, *flags, image, *command)  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        run_until_an_epoch_is_uploaded(name, hub)
        docker("stop", "-t", "120", name, timeout=200)
        code = int(docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout)
    finally:
        docker("rm", "-f", name)
    state = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    on_volume = json.loads(in_volume(image, volume, "cat", PUBLISHED_INDEX))["epoch"]
    if mode == "entrypoint kept":
        assert code == ExitCode.INTERRUPTED
        assert state["phase"] == "interrupted"
        assert max(hub_epochs(hub)) == on_volume  # the final upload caught up
    else:
        assert code == 0  # the platform's program, not trainbox, decided the exit
        assert state["phase"] == "training"  # trainbox never learnt it was stopped
        assert "uploading" not in [p for p, _ in state["phases"]]
        assert max(hub_epochs(hub)) < on_volume  # what was not yet uploaded stays behind
