#!/usr/bin/env python3
"""Where the image's bytes go: base, system packages, torch, libreyolo, trainbox.

    python tests/bench/image_size.py [IMAGE]     (default trainbox:test; DOCKER names the client)

Torch with its CUDA libraries is the part we cannot shrink, so it is the baseline measured
in the same run: every part is printed as a ratio to it, and what is not torch is overhead.
"""

import json
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
FIRST_OWN_STEP = "SHELL ["
# The torch stack's steps: its five layers copied from the torch stage, and the removal of
# what its install deleted (or, in the one-layer baseline, the pip step itself).
TORCH_STEPS = ("torch==${TORCH_VERSION}", "COPY /layers/", "torch-removed.txt")


def part_of(step: str) -> str:
    """The part of the Dockerfile's story a build step belongs to, from its command."""
    if "/opt/trainbox/src" in step:
        return TRAINBOX
    if "requirements.lock" in step:
        return LIBREYOLO
    if any(mark in step for mark in TORCH_STEPS):
        return TORCH
    return SYSTEM


def history(image: str) -> list[tuple[int, str]]:
    """(bytes, step) of every layer, oldest first, from ``docker history``."""
    out = subprocess.run(
        [DOCKER, "history", "--no-trunc", "--human=false", "--format",
         "{{.Size}}\t{{.CreatedBy}}", image],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [(int(size), step) for size, _, step in (line.partition("\t") for line in
            reversed(out.splitlines()))]  # fmt: skip


def sizes(image: str) -> dict[str, int]:
    """Bytes per part of the story."""
    totals = dict.fromkeys((BASE, SYSTEM, TORCH, LIBREYOLO, TRAINBOX), 0)
    own = False
    for size, step in history(image):
        own = own or step.startswith(FIRST_OWN_STEP)
        totals[part_of(step) if own else BASE] += size
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


def goals(image: str, totals: dict[str, int]) -> str:
    """Issue #15's size goals: the largest layer, and what is not the torch stack."""
    largest = max(size for size, _ in history(image))
    rest = sum(totals.values()) - totals[TORCH]
    return (f"largest layer {largest / 1e9:.2f} GB (goal <= 1.5 GB); not torch "
            f"{rest / 1e6:.0f} MB (goal <= 600 MB)")  # fmt: skip


# Inside the image: the installed bytes of what libreyolo's default extras bring beyond
# libreyolo itself (docker/lock.py's closure, with and without EXTRAS), per package.
EXTRAS_BYTES = """
import json, sys
sys.path.insert(0, "/opt/trainbox/src/docker")
import lock
plain = [root.split("[")[0] for root in lock.ROOTS]
added = lock.closure(lock.ROOTS) - lock.closure(plain)
print(json.dumps({lock.DISTS[key].metadata["Name"]: sum(f.size or 0 for f in
                  lock.DISTS[key].files or []) for key in sorted(added)}))
"""


def extras(image: str) -> dict[str, int]:
    """Installed bytes per package that the default extras add (``LIBREYOLO_EXTRAS``)."""
    asked = [DOCKER, "run", "--rm", "--entrypoint", "python", image, "-c", EXTRAS_BYTES]
    return json.loads(subprocess.run(asked, check=True, capture_output=True, text=True).stdout)


def extras_report(added: dict[str, int], torch: int) -> str:
    total = sum(added.values())
    biggest = ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in
                        sorted(added.items(), key=lambda item: -item[1])[:4])  # fmt: skip
    return (
        f"libreyolo extras (rfdetr,lora,onnx,plots): {total / 1e6:.0f} MB installed, "
        f"{total / torch:.3f} x torch ({biggest})"
    )


if __name__ == "__main__":
    image = sys.argv[1] if len(sys.argv) > 1 else "trainbox:test"
    parts = sizes(image)
    print(report(image, parts))
    print(goals(image, parts))
    print(extras_report(extras(image), parts[TORCH]))
