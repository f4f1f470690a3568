"""SSH into the running box, the way the providers' own images do it: when a public key is
given (``SSH_PUBLIC_KEY``, or RunPod's ``PUBLIC_KEY``), sshd serves it, keys only.

sshd runs for the whole job, from the volume lock to the end (a long staging is when one most
wants to look in), as a supervisord program the job starts at the lock and stops last.
Its host keys are made at the first start and kept on the volume, so a restarted container
keeps its identity (no "host key changed" warning). The session gets the container's
environment from an allow-list: trainbox's settings and the image's own variables, never
``HF_TOKEN`` or a provider's key.
"""

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from entrypoint.files import write_atomic
from entrypoint.settings import config as settings
from entrypoint.settings.config import Config
from entrypoint.state import store

log = logging.getLogger("trainbox")

SSHD = "/usr/sbin/sshd"
PRIVSEP = Path("/run/sshd")  # Debian's sshd refuses to start without it
RUNTIME_PARENT = "/run"  # root's, not world-writable
IMAGE_VARIABLES = ("PATH", "VIRTUAL_ENV", "HF_HOME", "HF_ENDPOINT", "HF_TOKEN_FILE",
                   "PYTHONUNBUFFERED", "LANG", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                   "TRAINBOX_CONFIG")  # fmt: skip
NOT_FOR_SESSIONS = {"SSH_PUBLIC_KEY"}


def host_key(workspace: Path) -> Path:
    """This box's host key, on the volume: made once, kept across restarts."""

    def make(scratch: Path) -> None:
        command = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainbox", "-f"]
        subprocess.run([*command, str(scratch)], check=True)

    return store.host_key(workspace, make)


def session_environment(environ: dict[str, str]) -> dict[str, str]:
    """What an SSH session gets: the settings trainbox knows and the image's variables."""
    names = {name for name, _default, _doc in settings.describe()} | set(IMAGE_VARIABLES)
    return {
        name: value
        for name, value in environ.items()
        if name in names - NOT_FOR_SESSIONS and value and '"' not in value and "\n" not in value
    }


def sshd_config(cfg: Config, runtime: Path, key: Path, environ: dict[str, str]) -> str:
    """sshd's whole configuration: keys only, root by key, nothing else."""
    session = " ".join(f'"{name}={value}"' for name, value in session_environment(environ).items())
    lines = [
        f"Port {cfg.ssh_port}",
        f"HostKey {key}",
        f"PidFile {runtime / 'sshd.pid'}",
        f"AuthorizedKeysFile {runtime / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitEmptyPasswords no",
        "UsePAM no",
        "PrintMotd no",
        "X11Forwarding no",
        "AllowTcpForwarding local",  # the dashboard tunnel: ssh -L 8420:localhost:8420
        "Subsystem sftp internal-sftp",
        *([f"SetEnv {session}"] if session else []),
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def prepared(cfg: Config) -> Iterator[list[str] | None]:
    """sshd's command, its configuration written and checked, while the block runs, when a key
    is set (None: nothing listens); its folder goes at the end."""
    if not cfg.ssh_public_key or not _has_sshd():
        yield None
        return
    # sshd's StrictModes refuses keys under a world-writable folder such as /tmp.
    runtime = Path(tempfile.mkdtemp(prefix="trainbox-ssh-", dir=RUNTIME_PARENT))
    try:
        yield _configured(cfg, runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _has_sshd() -> bool:
    if Path(SSHD).is_file():
        return True
    log.warning("SSH_PUBLIC_KEY is set, but this image has no sshd: no SSH")
    return False


def _configured(cfg: Config, runtime: Path) -> list[str] | None:
    write_atomic(runtime / "authorized_keys", cfg.ssh_public_key + "\n")
    (runtime / "authorized_keys").chmod(0o600)
    conf = runtime / "sshd_config"
    environ = {**os.environ, **cfg.job_shape()}  # what this node resolved
    conf.write_text(sshd_config(cfg, runtime, host_key(cfg.workspace), environ))
    PRIVSEP.mkdir(mode=0o755, exist_ok=True)
    checked = subprocess.run([SSHD, "-t", "-f", str(conf)], capture_output=True, text=True)
    if checked.returncode:
        log.warning("sshd refused its configuration (%s): no SSH", checked.stderr.strip())
        return None
    log.info("ssh: sshd on port %d, keys only (%d key(s))", cfg.ssh_port,
             len(cfg.ssh_public_key.splitlines()))  # fmt: skip
    return [SSHD, "-D", "-e", "-f", str(conf)]
