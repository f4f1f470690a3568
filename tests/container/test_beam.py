"""The image after Beam's own build step for the template's ``Image(base_image=...,
python_version="python3.12")``: the image's pinned venv survives it, its selftest passes, and
the demo trains when Beam's runner interpreter starts trainbox, as ``beam_app.train`` does.

Beam's step is beta9's own text (beam-cloud/beta9 0b79dfe, read 2026-12-02, vendored in
tests/beam): ``installScriptTemplate`` from pkg/common/config.default.yaml, rendered for
python3.12, then ``python3.12 -m pip install`` of pkg/abstractions/image/base_requirements.txt
(pkg/abstractions/image/builder.go, RenderV2Dockerfile, the open-source default "clip v2").
It departs from Beam's where this machine must:
- the python-build-standalone CPython 3.12.7 it downloads from github.com (not reachable here)
  is stood in by this machine's own CPython 3.12 build (pyenv), laid out as the standalone
  tarball is (``python/bin``, ``python/lib``), with ``ldconfig`` after it because that build
  links libpython as a shared library (the standalone one does not);
- its ``apt-get install build-essential curl git`` is left out (network; nothing of Python's);
- pip installs from the wheelhouse, as every build here does.
"""

import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.container.conftest import TRAIN, docker

pytestmark = pytest.mark.container

BEAM = REPO / "tests" / "beam"
STANDALONE = {"PythonVersion": "3.12.7", "Architecture": "x86_64", "Vendor": "unknown",
              "OS": "linux"}  # fmt: skip
STAND_INS = Path("/root/.pyenv/versions")  # this machine kind's CPython builds
LEFT_OUT = ("test", "idlelib", "tkinter", "turtledemo", "__pycache__")


def beam_step() -> str:
    """Beam's install script, rendered, with the stand-in's tarball in place of the download."""
    script = (BEAM / "install_script.sh.tmpl").read_text()
    script = re.sub(r"\{\{\.(\w+)\}\}", lambda m: STANDALONE[m[1]], script)
    apt = "apt-get update -q && \\\napt-get install -q -y build-essential curl git && \\\n"
    assert script.startswith(apt), script
    download = r"curl -fsSL -o python\.tgz '[^']+'"
    script, found = re.subn(download, "cp /tmp/standalone.tgz python.tgz", script[len(apt) :])
    assert found == 1, script
    return script.strip()


def pack_stand_in(target: Path) -> None:
    """This machine's CPython 3.12 as a python-build-standalone install_only tarball."""
    prefix = next(iter(sorted(STAND_INS.glob("3.12.*"))), None)
    if prefix is None:
        pytest.fail("no CPython 3.12 under /root/.pyenv/versions to stand in for Beam's")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts  # python/lib/python3.12/site-packages/NAME/...
        if any(part in LEFT_OUT for part in parts):
            return None
        if len(parts) > 4 and parts[3] == "site-packages" and not parts[4].startswith("pip"):
            return None  # this machine's own packages: a standalone CPython has only pip
        return info

    with tarfile.open(target, "w:gz", compresslevel=1) as tar:
        for part in ("bin", "lib", "include"):
            tar.add(prefix / part, arcname=f"python/{part}", filter=keep)


@pytest.fixture(scope="module")
def beam_image(image: str, build_args: list[str], tmp_path_factory) -> Iterator[str]:
    context = tmp_path_factory.mktemp("beam")
    pack_stand_in(context / "standalone.tgz")
    pins = " ".join(f'"{line}"' for line in (BEAM / "base_requirements.txt").read_text().split())
    (context / "Dockerfile").write_text(f"""FROM {image}
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ENV DEBIAN_FRONTEND=noninteractive PIP_ROOT_USER_ACTION=ignore UV_NO_CACHE=true \\
    UV_COMPILE_BYTECODE=true
RUN pip freeze > /tmp/venv-before.txt
COPY standalone.tgz /tmp/standalone.tgz
RUN {beam_step()} && ldconfig
RUN python3.12 -m pip install {pins}
""")
    tag = "trainbox-beam:test"
    pip = [f for i, f in enumerate(build_args) if f.startswith("PIP_") or
           (i + 1 < len(build_args) and build_args[i + 1].startswith("PIP_"))]  # fmt: skip
    result = docker("build", "--network", "host", "-t", tag, *pip, str(context), timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    yield tag
    docker("image", "rm", "--force", tag)


def shell(image: str, command: str, *env: str) -> tuple[int, str]:
    result = docker("run", "--rm", "--network", "host", *env, "--entrypoint", "sh", image, "-c",
                    command, timeout=900)  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_the_pinned_environment_survives_beams_build(beam_image: str) -> None:
    code, out = shell(beam_image, "readlink /usr/bin/python3; /usr/bin/python3 --version")
    assert code == 0 and out.startswith("/usr/local/bin/python3\nPython 3.12"), out  # Beam's
    beams = "import rich, pydantic; print(rich.__file__, pydantic.VERSION)"
    code, out = shell(beam_image, f"python3.12 -c '{beams}'")
    assert code == 0 and "/usr/local/lib/python3.12" in out and "2.5.3" in out, out
    code, out = shell(beam_image, "pip freeze | diff /tmp/venv-before.txt - && echo same")
    assert code == 0 and out.strip().endswith("same"), out  # the venv: every pin as it was
    # The build's own selftest, against the torch build the image's labels name.
    labels = docker("image", "inspect", "--format", "{{json .Config.Labels}}", beam_image)
    wanted = json.loads(labels.stdout)
    asked = ["-e", f"TORCH_VERSION={wanted['ai.trainbox.torch']}",
             "-e", f"TORCH_CUDA={wanted['ai.trainbox.cuda']}"]  # fmt: skip
    code, out = shell(beam_image, "python /opt/trainbox/src/docker/selftest.py", *asked)
    assert code == 0, out


def test_the_demo_trains_when_beams_runner_starts_trainbox(beam_image: str) -> None:
    """As beam_app.train: Beam's interpreter (python3.12, its runner's) runs trainbox."""
    flags = [f for k, v in {**TRAIN, "EPOCHS": "1", "MONITOR": "false"}.items()
             for f in ("-e", f"{k}={v}")]  # fmt: skip
    start = "import subprocess, sys; sys.exit(subprocess.run(['trainbox', 'run']).returncode)"
    code, out = shell(beam_image, f'python3.12 -c "{start}"', *flags)
    assert code == 0, out[-4000:]
    assert "epoch 1/1 done" in out, out[-4000:]
