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


def client_at(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point the real huggingface_hub client, in this process, at ``url``: what HF_ENDPOINT
    does at import (the resolve URL template is built from it then)."""
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", url)
    monkeypatch.setattr(
        "huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
        url + "/{repo_id}/resolve/{revision}/{filename}",
    )


@pytest.fixture
def hub(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator["Hub"]:
    """A fresh test Hub on 127.0.0.1, and a fresh xet cache: hf_xet's cache, per endpoint,
    remembers chunks it uploaded and does not send them again, but a new Hub on a port used
    before holds none of them (its shard is refused: seen in CI)."""
    from huggingface_hub.utils import _xet

    from tests.hub import Hub

    monkeypatch.setenv("HF_XET_CACHE", str(tmp_path_factory.mktemp("xet")))
    _xet._GLOBAL_XET_HOLDER.sigint_abort()  # this process's session reads it anew
    with Hub() as server:
        yield server


def tar_on_hub(hub: "Hub", repo: str, folder: Path, size: int) -> bytes:
    """A one-file dataset (data.yaml and ``size`` bytes) packed as ``NAME.tar`` in ``repo``
    on the test Hub, NAME the folder's; returns the tar's bytes."""
    from entrypoint.dataset import archive

    folder.mkdir()
    (folder / "data.yaml").write_text("names: {0: a}\n")
    (folder / "a.bin").write_bytes(b"x" * size)
    tar = folder.with_suffix(".tar")
    archive.pack(folder, tar)
    hub.add(repo, {tar.name: tar.read_bytes()})
    return tar.read_bytes()
