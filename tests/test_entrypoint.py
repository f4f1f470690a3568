"""The image's entrypoint script, run on the host: trainbox's subcommands and options go to
`trainbox`, anything else runs as it is (the container tests run it in the image)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from entrypoint.cli import cli
from tests.conftest import REPO

SCRIPT = REPO / "docker" / "entrypoint.sh"


def test_it_knows_every_trainbox_subcommand() -> None:
    listed = re.search(r"^  -\*\|([a-z|-]+)\)$", SCRIPT.read_text(), re.M)
    assert listed and set(listed.group(1).split("|")) == set(cli.commands)


def test_subcommands_and_options_go_to_trainbox_and_the_rest_runs_as_it_is(
    tmp_path: Path,
) -> None:
    (tmp_path / "trainbox").write_text('#!/bin/sh\necho "trainbox $*"\n')
    (tmp_path / "trainbox").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}

    def run(*args: str) -> str:
        done = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "trainbox run"  # as the image's CMD
    assert run("status", "--json") == "trainbox status --json"
    assert run("--version") == "trainbox --version"
    assert run("echo", "ok") == "ok"
    assert run(sys.executable, "-c", "print(6 * 7)") == "42"
    assert run("trainbox", "config") == "trainbox config"
