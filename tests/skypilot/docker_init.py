"""SkyPilot's own docker initialization (``sky.provision.docker_utils.DockerInitializer``, from
the SkyPilot the tests install in ``.venv/skypilot``) run against a local image, with this
machine standing in for SkyPilot's VM: ``python docker_init.py IMAGE HOME``, where HOME holds
the VM user's ``.ssh/authorized_keys``. Prints the container's user, as SkyPilot gets it.

The VM's commands run through a local runner (SkyPilot's runs them over SSH on the VM), as
the VM's root with ``sudo`` as a no-op. It departs from a real VM where a test machine must:
- the command that rewrites the VM's ``/etc/docker/daemon.json`` and restarts docker is not
  run (it is the VM's own docker, and this machine's engine is the test's);
- ``--cap-add=SYS_RESOURCE`` is dropped where this machine's capability bounding set lacks it
  (runc refuses to start the container otherwise); the image does not depend on it;
- the run options are the test's (SkyPilot's cluster templates add ``--ulimit
  nofile=1048576:1048576``, over this machine's hard limit).
Every command inside the container is SkyPilot's, unchanged.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sky.provision import docker_utils

DAEMON_JSON = "/etc/docker/daemon.json"


def sys_resource_allowed() -> bool:
    bounding = next(line for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("CapBnd"))  # fmt: skip
    return bool(int(bounding.split()[1], 16) >> 24 & 1)  # CAP_SYS_RESOURCE is bit 24


class LocalRunner:
    """The parts of SkyPilot's CommandRunner that DockerInitializer uses, run here."""

    def __init__(self, home: Path, shims: Path) -> None:
        self.env = {**os.environ, "HOME": str(home), "PATH": f"{shims}:{os.environ['PATH']}"}

    def run(self, cmd: str, *, require_outputs: bool = False, separate_stderr: bool = False,
            **_: object) -> tuple[int, str, str]:  # fmt: skip
        if DAEMON_JSON in cmd:
            return 0, "", ""
        if not sys_resource_allowed():
            cmd = cmd.replace("--cap-add=SYS_RESOURCE", "")
        done = subprocess.run(["bash", "-c", cmd], env=self.env, capture_output=True, text=True)
        if separate_stderr:
            return done.returncode, done.stdout, done.stderr
        return done.returncode, done.stdout + done.stderr, ""

    def close_cached_connection(self) -> None:
        pass


def main(image: str, home: str) -> None:
    with tempfile.TemporaryDirectory() as shims:
        sudo = Path(shims) / "sudo"
        sudo.write_text('#!/bin/sh\nexec "$@"\n')  # the VM's root needs none
        sudo.chmod(0o755)
        config = {"image": image, "container_name": "sky_container", "pull_before_run": False,
                  "run_options": ["--ulimit nofile=16384:16384"]}  # fmt: skip
        with tempfile.NamedTemporaryFile() as log:
            runner = LocalRunner(Path(home), Path(shims))
            print(docker_utils.DockerInitializer(config, runner, log.name).initialize())


if __name__ == "__main__":
    main(*sys.argv[1:3])
