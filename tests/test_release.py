"""The release: every CUDA flavour built with its own torch index and tag, and the CI
workflow that publishes them on a version tag."""

import re
import subprocess
import sys

import yaml

from entrypoint import __version__
from entrypoint.preflight.gpu import FLAVOURS
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
        # Each flavour from PyTorch's own index for it; CUDA 13.0 is PyPI's own build.
        expected = "" if cuda == "13.0" else f"https://download.pytorch.org/whl/{flavour.name}"
        assert index == f"TORCH_INDEX_URL={expected}"
    # The Dockerfile's default flavour, the one that runs on the most hosts, is also latest.
    default = next(b for b in builds if "TORCH_CUDA=12.6" in b)
    assert f"ghcr.io/o/trainbox:{__version__}" in default and "ghcr.io/o/trainbox:latest" in default
    pushed = [line[2] for line in lines if line[1] == "push"]
    assert len(pushed) == len(FLAVOURS) + 2
    # Each flavour is removed after its push, before the next build: one on the disk at a time.
    order = [line[1] for line in lines]
    assert order == ["build", "push", "push", "push", "image", "build", "push", "image",
                     "build", "push", "image"]  # fmt: skip


def test_the_workflow_publishes_on_a_version_tag() -> None:
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML reads the key `on` as True
    assert workflow["permissions"]["packages"] == "write"
    steps = workflow["jobs"]["images"]["steps"]
    run = " ".join(step.get("run", "") for step in steps)
    assert "docker/release.py" in run and "--push" in run and "ghcr.io" in run


def test_the_headless_opencv_is_the_version_the_lock_pins_for_libreyolo() -> None:
    """The image swaps libreyolo's opencv-python for the headless build of the same version."""
    lock = (REPO / "docker" / "requirements.lock").read_text()
    pinned = re.search(r"^opencv-python==(\S+)$", lock, re.M)[1]
    headless = (REPO / "docker" / "opencv-headless.txt").read_text()
    assert re.findall(r"^opencv-python-headless==(\S+)$", headless, re.M) == [pinned]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "pip uninstall --yes opencv-python mss" in dockerfile
    installed = re.search(r"apt-get install[^&]*", dockerfile)[0]
    assert "python3" in installed and "libgl1" not in installed and "libglib" not in installed
