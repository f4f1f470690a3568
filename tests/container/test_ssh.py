"""SSH into the running box with a real sshd and a real ssh client: keys only, the host key
kept on the volume across containers, no secret in a session; without a key, no sshd."""

import json
import subprocess
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from tests.conftest import free_port
from tests.container.conftest import TRAIN, detached, docker, stop, until

pytestmark = pytest.mark.container

LONG = {**TRAIN, "EPOCHS": "200", "MONITOR": "false", "HF_TOKEN": "hf_never_in_a_session"}


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    private = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(private)],
                   check=True)  # fmt: skip
    return private, (folder / f"{name}.pub").read_text().strip()


def ssh(key: Path, port: int, known: Path, *command: str, strict: str = "accept-new",
        **options: str) -> subprocess.CompletedProcess:  # fmt: skip
    flags = {"BatchMode": "yes", "ConnectTimeout": "5", "StrictHostKeyChecking": strict,
             "UserKnownHostsFile": str(known), "IdentitiesOnly": "yes", **options}  # fmt: skip
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), *(f"-o{k}={v}" for k, v in flags.items()),
         "root@127.0.0.1", *command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def processes(name: str) -> str:
    """The container's processes, as `ps -ef` on the host lists them."""
    listing = docker("top", name)
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


def test_with_a_key_ssh_reaches_trainbox_status_and_only_by_that_key(
    image: str, volume: str, tmp_path: Path
) -> None:
    key, public = keypair(tmp_path, "user")
    stranger, _ = keypair(tmp_path, "stranger")
    port, known = free_port(), tmp_path / "known_hosts"
    # RunPod's name for it: what its startSsh puts in the pod.
    env = {**LONG, "PUBLIC_KEY": public, "SSH_PORT": str(port)}
    with detached(image, volume, env) as box:
        until(lambda: ssh(key, port, known, "true").returncode == 0, box, 120)
        answer = ssh(key, port, known, "trainbox", "status", "--json")
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout)["phase"] in {"preflight", "staging", "training"}
        session = ssh(key, port, known, "env").stdout
        assert "WORKSPACE=" not in session or "/workspace" in session
        assert "hf_never_in_a_session" not in session and "HF_TOKEN" not in session
        assert "/opt/trainbox/venv/bin" in session  # trainbox is on the session's PATH
        refused = ssh(stranger, port, known, "true")
        assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr
        password = ssh(key, port, known, "true", PubkeyAuthentication="no",
                       PreferredAuthentications="password,keyboard-interactive")  # fmt: skip
        assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr
        assert "sshd" in processes(box.name)
        on_volume = docker("exec", box.name, "cat",
                           "/workspace/trainbox/ssh/ssh_host_ed25519_key.pub").stdout  # fmt: skip
        code, log = stop(box, 60)
        assert code == ExitCode.INTERRUPTED, log[-3000:]  # its own exit, not docker's SIGKILL
    assert on_volume.split()[1] in known.read_text()  # the host key served is the volume's
    # A new container on the same volume is the same host: strict checking still passes. The
    # stop comes about a second in, before training: once it came during torch's import, whose
    # ``except Exception`` caught the stop's error, and the container trained on until SIGKILL.
    with detached(image, volume, {**env, "EPOCHS": "201"}) as box:
        until(lambda: ssh(key, port, known, "true", strict="yes").returncode == 0, box, 120)
        code, log = stop(box, 60)
        assert code == ExitCode.INTERRUPTED, log[-3000:]


def test_without_a_key_nothing_listens(image: str, volume: str, tmp_path: Path) -> None:
    key, _ = keypair(tmp_path, "user")
    port = free_port()
    with detached(image, volume, {**LONG, "SSH_PORT": str(port)}) as box:
        until(lambda: "training" in box.status().stdout, box, 180)
        assert "sshd" not in processes(box.name)
        refused = ssh(key, port, tmp_path / "known_hosts", "true")
        assert refused.returncode == 255 and "Connection refused" in refused.stderr
        assert not docker("exec", box.name, "ls", "/workspace/trainbox").stdout.count("ssh")
        docker("stop", "-t", "60", box.name, timeout=120)
