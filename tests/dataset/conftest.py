"""What the dataset tests share: the test Hub's dataset repo and the staging environment."""

import hashlib
from pathlib import Path

from tests.standins.hub import Hub

REPO_ID = "org/shapes"


def env_for(hub: Hub, workspace: Path, **extra: str) -> dict[str, str]:
    return {
        "HF_ENDPOINT": hub.url, "HF_HOME": str(workspace / "hf"),
        "HF_TOKEN": "", "HF_TOKEN_FILE": "", "WORKSPACE": str(workspace), "DOCTOR": "false",
        "DATASET_REPO": REPO_ID, "DATA": "", "TRAINBOX_CONFIG": "", **extra,
    }  # fmt: skip


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in ("data.yaml", ".trainbox-dataset.json")
    }
