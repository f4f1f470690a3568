"""Shared test helpers."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.hub import Hub

REPO = Path(__file__).resolve().parent.parent


def trainbox(
    *args: str, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """Run the real ``trainbox`` command (``python -m entrypoint``) in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "entrypoint", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        cwd=REPO,
        **kwargs,
    )


@pytest.fixture
def hub() -> Iterator["Hub"]:
    """A fresh test Hub on 127.0.0.1."""
    from tests.hub import Hub

    with Hub() as server:
        yield server
