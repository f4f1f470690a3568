#!/usr/bin/env python3
"""Build, and with --push publish, every CUDA flavour of the image.

    python docker/release.py --registry ghcr.io/OWNER [--push] [--dry-run] [--flavour cu126]

Each flavour (entrypoint/preflight/gpu.py FLAVOURS: torch 2.14 is built for CUDA 12.6, 13.0, 13.2;
there is no 12.8 build) comes from PyTorch's own index for it, but cu130, which is PyPI's own
build, and is tagged REGISTRY/trainbox:VERSION-cuXXX; the Dockerfile's default flavour (CUDA
12.6, which runs on the most hosts) also gets VERSION and latest. The Dockerfile's labels
record the torch and CUDA build of each. With --push, each image is pushed, then removed, so
that a CI runner's disk holds one flavour at a time. --build-arg passes more build args (e.g.
an offline wheelhouse: tests/container/test_release.py pushes to a local registry that way).
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from entrypoint import __version__  # noqa: E402
from entrypoint.preflight.gpu import FLAVOURS  # noqa: E402

INDEX = "https://download.pytorch.org/whl/{name}"
PYPI = "cu130"  # PyPI's torch 2.14.1 is the CUDA 13.0 build: the same torch, from PyPI


def default_cuda() -> str:
    found = re.search(r'^ARG TORCH_CUDA="?([\d.]+)"?$', (REPO / "Dockerfile").read_text(), re.M)
    assert found, "no ARG TORCH_CUDA in the Dockerfile"
    return found.group(1)


def commands(
    registry: str,
    names: list[str],
    push: bool,
    docker: str,
    extra: tuple[str, ...] = (),
    network: str | None = None,
) -> list[list[str]]:
    """The docker commands of a release, in order."""
    default = default_cuda()
    todo = []
    for flavour in FLAVOURS:
        if names and flavour.name not in names:
            continue
        cuda = ".".join(map(str, flavour.cuda))
        image = f"{registry}/trainbox"
        tags = [f"{image}:{__version__}-{flavour.name}"]
        if cuda == default:
            tags += [f"{image}:{__version__}", f"{image}:latest"]
        index = "" if flavour.name == PYPI else INDEX.format(name=flavour.name)
        build = [docker, "build", "--build-arg", f"TORCH_CUDA={cuda}",
                 "--build-arg", f"TORCH_INDEX_URL={index}",
                 *(word for arg in extra for word in ("--build-arg", arg)),
                 *(("--network", network) if network else ()),
                 "--build-arg", f"TRAINBOX_VERSION={__version__}"]  # fmt: skip
        for tag in tags:
            build += ["--tag", tag]
        todo.append([*build, str(REPO)])
        if push:
            todo += [[docker, "push", tag] for tag in tags]
            todo.append([docker, "image", "rm", *tags])
    return todo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", required=True, help="e.g. ghcr.io/OWNER")
    names = [f.name for f in FLAVOURS]
    parser.add_argument("--flavour", action="append", default=[], choices=names, help="only these")
    parser.add_argument("--push", action="store_true", help="push each image, then remove it")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--docker", default="docker", help="the docker client")
    parser.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="one more build arg for every flavour")  # fmt: skip
    parser.add_argument("--network", help="the builds' network, e.g. host for a local wheelhouse")
    args = parser.parse_args()
    todo = commands(args.registry.rstrip("/"), args.flavour, args.push, args.docker,
                    tuple(args.build_arg), args.network)  # fmt: skip
    for command in todo:
        print("+", " ".join(command), flush=True)
        if not args.dry_run:
            subprocess.run(command, check=True, env={"DOCKER_BUILDKIT": "1", **os.environ})


if __name__ == "__main__":
    main()
