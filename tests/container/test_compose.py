"""compose.yaml: what it asks of the host, and a real `docker compose up` of the demo."""

import json
import os
import subprocess
import uuid

import pytest

from tests.conftest import REPO
from tests.container.conftest import compose_command, docker, in_volume

BASE = ["-f", "compose.yaml"]
CPU = [*BASE, "-f", "compose.cpu.yaml"]
HOSTNET = [*CPU, "-f", "tests/container/compose.hostnet.yaml"]


def compose(
    *args: str, image: str = "trainbox:test", timeout: float = 120
) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINBOX_IMAGE": image}
    return subprocess.run(
        [*compose_command(), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


def config(*files: str) -> dict:
    result = compose(*files, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]["train"]


def test_compose_asks_for_every_gpu_shared_memory_a_volume_and_a_grace_period() -> None:
    train = config(*BASE)
    [gpus] = train["deploy"]["resources"]["reservations"]["devices"]
    assert (gpus["driver"], gpus["count"], gpus["capabilities"]) == ("nvidia", -1, ["gpu"])
    assert int(train["shm_size"]) >= 8 * 2**30
    assert {"type": "volume", "source": "workspace", "target": "/workspace"}.items() <= (
        train["volumes"][0].items()
    )
    assert train["stop_grace_period"] == "2m0s"
    [monitor] = train["ports"]  # the dashboard, on the host's loopback only
    assert (monitor["host_ip"], monitor["published"], monitor["target"]) == (
        "127.0.0.1",
        "8420",
        8420,
    )


def test_cpu_override_drops_the_gpu_request() -> None:
    train = config(*CPU)
    assert "deploy" not in train
    assert train["environment"]["DEVICE"] == "cpu"
    hostnet = config(*HOSTNET)
    assert hostnet["network_mode"] == "host" and not hostnet.get("ports")


@pytest.mark.container
def test_compose_up_trains_the_demo(image: str) -> None:
    project = f"trainbox-test-{uuid.uuid4().hex[:8]}"
    try:
        up = compose(
            "-p",
            project,
            *HOSTNET,
            "up",
            "--no-build",
            "--exit-code-from",
            "train",
            image=image,
            timeout=900,
        )
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        assert "epoch 3/3 done" in up.stdout
        status = in_volume(image, f"{project}_workspace", "cat", "/workspace/runs/run/status.json")
        assert json.loads(status)["state"] == "completed"
        assert project not in docker("network", "ls", "--format", "{{.Name}}").stdout
    finally:
        compose("-p", project, *HOSTNET, "down", "--volumes", image=image)


def test_env_example_means_the_same_to_docker_run_and_to_compose(engine: None, tmp_path) -> None:
    """Every line of .env.example, uncommented, as `docker run --env-file` (the docker CLI's
    own parser, through `docker create`) and compose's env_file read it: the same values, so
    configs/providers/docker-run.sh and compose.yaml get the same settings."""
    import re

    lines = [line[2:] for line in (REPO / ".env.example").read_text().splitlines()
             if re.match(r"# [A-Z_]+=", line)]  # fmt: skip
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    (tmp_path / "compose.yaml").write_text(
        "services:\n  x:\n    image: debian:bookworm-slim\n    env_file: .env\n"
    )
    compose_file = str(tmp_path / "compose.yaml")
    command = [*compose_command(), "-f", compose_file, "config", "--format", "json"]
    read = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    by_compose = json.loads(read.stdout)["services"]["x"]["environment"]
    created = docker("create", "--env-file", str(tmp_path / ".env"), "debian:bookworm-slim")
    assert created.returncode == 0, created.stderr
    try:
        env = docker("inspect", "--format", "{{json .Config.Env}}", created.stdout.strip())
    finally:
        docker("rm", created.stdout.strip())
    by_docker = dict(item.split("=", 1) for item in json.loads(env.stdout))
    names = [line.split("=", 1)[0] for line in lines]
    assert {k: by_docker[k] for k in names} == {k: by_compose[k] or "" for k in names}
