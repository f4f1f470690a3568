"""SSH into the box: keys only, host keys kept on the volume, no secret in a session.

The container tests (tests/container/test_ssh.py) log in with a real sshd; these check what
trainbox gives it."""

import os
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.runtime import ssh
from entrypoint.settings import config

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHn5Zr0sVZ0oJ3f1ZfRkq1m1m7v0yQ8cQm9y1N0p0x2a me@laptop"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 other@desk"


def test_public_keys_come_from_ssh_public_key_or_runpods_public_key(tmp_path: Path) -> None:
    base = {"WORKSPACE": str(tmp_path)}
    assert config.load(base).ssh_public_key == ""
    assert config.load({**base, "SSH_PUBLIC_KEY": f"  {KEY}\n\n{RSA}\n"}).ssh_public_key == (
        f"{KEY}\n{RSA}"
    )
    assert config.load({**base, "PUBLIC_KEY": KEY}).ssh_public_key == KEY
    assert config.load({**base, "SSH_PUBLIC_KEY": RSA, "PUBLIC_KEY": KEY}).ssh_public_key == RSA


@pytest.mark.parametrize(
    "wrong",
    ["-----BEGIN OPENSSH PRIVATE KEY-----", "AAAAC3NzaC1lZDI1NTE5", f"{KEY}\nnot a key"],
)
def test_anything_but_public_keys_is_refused_with_the_key_named(tmp_path: Path, wrong: str) -> None:
    with pytest.raises(TrainboxError) as caught:
        config.load({"WORKSPACE": str(tmp_path), "SSH_PUBLIC_KEY": wrong})
    assert caught.value.code == ExitCode.CONFIG
    assert "SSH_PUBLIC_KEY=" in str(caught.value)
    assert "expected OpenSSH public keys" in str(caught.value)


def test_the_host_key_is_made_once_and_kept_on_the_volume(tmp_path: Path) -> None:
    key = ssh.host_key(tmp_path)
    assert key == tmp_path / "trainbox" / "ssh" / "ssh_host_ed25519_key"
    first = key.read_bytes()
    assert b"OPENSSH PRIVATE KEY" in first and key.with_suffix(".pub").is_file()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert ssh.host_key(tmp_path).read_bytes() == first  # a restart keeps the identity
    assert sorted(p.name for p in key.parent.iterdir()) == [key.name, f"{key.name}.pub"]


def test_sshd_allows_keys_only_and_no_secret_reaches_a_session(tmp_path: Path) -> None:
    cfg = config.load({"WORKSPACE": str(tmp_path), "SSH_PUBLIC_KEY": KEY, "SSH_PORT": "2222"})
    environ = {
        "PATH": "/opt/trainbox/venv/bin:/usr/bin",
        "WORKSPACE": "/workspace",
        "NODE_RANK": "0",
        "OUTPUT_REPO": "org/run",
        "HF_TOKEN": "hf_secret",
        "RUNPOD_API_KEY": "rp_secret",
        "CONTAINER_API_KEY": "vast_secret",
        "WANDB_API_KEY": "wb_secret",
        "SSH_PUBLIC_KEY": KEY,
        "PUBLIC_KEY": KEY,
        "EPOCHS": 'say "hi"',  # a value sshd could not quote is left out, not mangled
    }
    text = ssh.sshd_config(cfg, tmp_path, tmp_path / "key", environ)
    lines = text.splitlines()
    for line in ("Port 2222", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PermitRootLogin prohibit-password", "UsePAM no"):  # fmt: skip
        assert line in lines
    assert f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}" in lines
    [setenv] = [line for line in lines if line.startswith("SetEnv ")]
    assert setenv == (
        'SetEnv "PATH=/opt/trainbox/venv/bin:/usr/bin" "WORKSPACE=/workspace" "NODE_RANK=0" '
        '"OUTPUT_REPO=org/run"'
    )
    assert "secret" not in text


def test_without_a_key_no_sshd_starts(tmp_path: Path) -> None:
    with ssh.prepared(config.load({"WORKSPACE": str(tmp_path)})) as command:
        assert command is None
    assert not (tmp_path / "trainbox").exists()  # not even a host key


@pytest.mark.skipif(os.path.exists(ssh.SSHD), reason="this host has an sshd")
def test_an_image_without_sshd_says_so_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with ssh.prepared(config.load({"WORKSPACE": str(tmp_path), "SSH_PUBLIC_KEY": KEY})) as c:
        assert c is None
    assert "this image has no sshd: no SSH" in caplog.text
