"""The release: every CUDA flavour built with its own torch index and tag, and the CI
workflow that publishes them on a version tag."""

import subprocess
import sys

import yaml

from entrypoint import __version__
from entrypoint.gpu import FLAVOURS
from tests.conftest import REPO


def test_release_builds_every_flavour_with_its_tag_then_pushes_and_frees_the_disk() -> None:
    result = subprocess.run(
        [sys.executable, "docker/release.py", "--registry", "ghcr.io/o/", "--push", "--dry-run"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line.removeprefix("+ ").split() for line in result.stdout.splitlines()]
    builds = [line for line in lines if line[1] == "build"]
    assert [b[b.index("--tag") + 1] for b in builds] == [
        f"ghcr.io/o/trainbox:{__version__}-{f.name}" for f in FLAVOURS
    ]
    assert {f.name for f in FLAVOURS} >= {"cu126", "cu130", "cu132"}
    for build, flavour in zip(builds, FLAVOURS, strict=True):
        cuda = ".".join(map(str, flavour.cuda))
        assert f"TORCH_CUDA={cuda}" in build
        index = next(a for a in build if a.startswith("TORCH_INDEX_URL="))
        # The default build (CUDA 13.0) is PyPI's; the others come from PyTorch's own index.
        expected = "" if cuda == "13.0" else f"https://download.pytorch.org/whl/{flavour.name}"
        assert index == f"TORCH_INDEX_URL={expected}"
    default = next(b for b in builds if "TORCH_CUDA=13.0" in b)
    assert f"ghcr.io/o/trainbox:{__version__}" in default and "ghcr.io/o/trainbox:latest" in default
    pushed = [line[2] for line in lines if line[1] == "push"]
    assert len(pushed) == len(FLAVOURS) + 2
    # Each flavour is removed after its push, before the next build: one on the disk at a time.
    order = [line[1] for line in lines]
    assert order == ["build", "push", "image", "build", "push", "push", "push", "image",
                     "build", "push", "image"]  # fmt: skip


def test_the_workflow_publishes_on_a_version_tag() -> None:
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML reads the key `on` as True
    assert workflow["permissions"]["packages"] == "write"
    steps = workflow["jobs"]["images"]["steps"]
    run = " ".join(step.get("run", "") for step in steps)
    assert "docker/release.py" in run and "--push" in run and "ghcr.io" in run
