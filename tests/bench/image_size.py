#!/usr/bin/env python3
"""Where the image's bytes go: base, system packages, torch, libreyolo, trainbox.

    python tests/bench/image_size.py [IMAGE]     (default trainbox:test; DOCKER names the client)

Torch with its CUDA libraries is the part we cannot shrink, so it is the baseline measured
in the same run: every part is printed as a ratio to it, and what is not torch is overhead.
"""

import os
import subprocess
import sys

DOCKER = os.environ.get("DOCKER", "docker")
BASE, SYSTEM, TORCH, LIBREYOLO, TRAINBOX = (
    "base",
    "system packages",
    "torch + CUDA libraries",
    "libreyolo + dependencies",
    "trainbox",
)
# The Dockerfile's first own instruction: every history entry older than it is the base's.
FIRST_OWN_STEP = "ARG TRAINBOX_VERSION"


def part_of(step: str) -> str:
    """The part of the Dockerfile's story a build step belongs to, from its command."""
    if "/opt/trainbox/src" in step:
        return TRAINBOX
    if "requirements.lock" in step:
        return LIBREYOLO
    if "torch==${TORCH_VERSION}" in step:
        return TORCH
    return SYSTEM


def sizes(image: str) -> dict[str, int]:
    """Bytes per part, from ``docker history`` (oldest step first)."""
    out = subprocess.run(
        [
            DOCKER,
            "history",
            "--no-trunc",
            "--human=false",
            "--format",
            "{{.Size}}\t{{.CreatedBy}}",
            image,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    totals = dict.fromkeys((BASE, SYSTEM, TORCH, LIBREYOLO, TRAINBOX), 0)
    own = False
    for line in reversed(out.splitlines()):
        size, _, step = line.partition("\t")
        own = own or step.startswith(FIRST_OWN_STEP)
        totals[part_of(step) if own else BASE] += int(size)
    return totals


def report(image: str, totals: dict[str, int]) -> str:
    total, torch = sum(totals.values()), totals[TORCH]
    rows = [*totals.items(), ("overhead (not torch)", total - torch)]
    lines = [f"{image}: {total / 1e9:.2f} GB", f"{'part':<26}{'GB':>8}{'share':>8}{'x torch':>9}"]
    lines += [
        f"{name:<26}{size / 1e9:>8.3f}{size / total:>8.1%}{size / torch:>9.3f}"
        for name, size in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    image = sys.argv[1] if len(sys.argv) > 1 else "trainbox:test"
    print(report(image, sizes(image)))
