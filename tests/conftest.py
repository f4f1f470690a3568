"""Shared test helpers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No trainbox setting leaks in from the machine running the tests."""
    from entrypoint.config import KEYS

    for key in [*KEYS, "TRAINBOX_CONFIG"]:
        monkeypatch.delenv(key.upper(), raising=False)
