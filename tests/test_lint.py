"""The code and the Dockerfile stay clean: ruff and hadolint, as CI runs them."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: run the tests through tests/run")
    return found


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff(command: list[str]) -> None:
    result = subprocess.run([tool("ruff"), *command], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint() -> None:
    result = subprocess.run(
        [tool("hadolint"), "Dockerfile"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_has_no_syntax_line() -> None:
    # A `# syntax=` line makes BuildKit pull a frontend image from a registry.
    assert not re.search(r"^#\s*syntax\s*=", (REPO / "Dockerfile").read_text(), re.I | re.M)
