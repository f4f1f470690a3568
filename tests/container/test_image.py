"""The real image: it builds, holds exactly the pinned torch, and trains the demo to the end."""

import json
import zipfile
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import (
    TESTED_CUDA,
    build,
    docker,
    dockerfile_arg,
    in_volume,
    run_container,
    serve,
)

pytestmark = pytest.mark.container


def logs(result) -> str:
    return result.stdout + result.stderr


def status(image: str, volume: str, run: str = "run") -> dict:
    return json.loads(in_volume(image, volume, "cat", f"/workspace/runs/{run}/status.json"))


def test_demo_trains_to_the_end_and_a_second_run_reuses_its_data(image: str, volume: str) -> None:
    first = run_container(image, volume, env={"DEVICE": "cpu"})
    assert first.returncode == 0, logs(first)[-4000:]
    for epoch in (1, 2, 3):
        assert f"epoch {epoch}/3 done" in logs(first)  # trainbox's line per epoch
        assert f"Epoch {epoch} - Average loss" in logs(first)  # libreyolo's own
    assert "demo dataset written to /workspace/data/demo" in logs(first)
    assert status(image, volume)["state"] == "completed"
    container = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))
    assert (container["phase"], container["exit_code"], container["run"]) == ("completed", 0, "run")
    weights = in_volume(
        image,
        volume,
        "stat",
        "-c",
        "%n %s",
        "/workspace/runs/run/weights/best.pt",
        "/workspace/runs/run/weights/last.pt",
    )
    assert all(int(line.split()[1]) > 1_000_000 for line in weights.splitlines())
    for name in ("metrics.jsonl", "train.log"):
        assert in_volume(image, volume, "cat", f"/workspace/runs/run/{name}").strip()

    stamp = "stat -c %Y /workspace/data/demo/data.yaml /workspace/data/demo/images/train/0000.png"
    written_at = in_volume(image, volume, "sh", "-c", stamp)
    second = run_container(image, volume, env={"DEVICE": "cpu", "RUN_NAME": "second"})
    assert second.returncode == 0, logs(second)[-4000:]
    assert "demo dataset reused from /workspace/data/demo" in logs(second)
    assert "written to" not in logs(second)
    assert in_volume(image, volume, "sh", "-c", stamp) == written_at
    assert status(image, volume, "second")["state"] == "completed"

    again = run_container(image, volume, env={"DEVICE": "cpu"})
    assert again.returncode == 0, logs(again)
    assert "already completed: nothing to train" in logs(again)
    assert "spawned: 'train'" not in logs(again)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"EPOCHS": "-1"}, "environment: EPOCHS='-1': expected a whole number >= 1"),
        ({"DEVICE": "banana"}, "environment: DEVICE='banana': expected auto, cpu, or GPU indices"),
        ({"TRAINBOX_CONFIG": "/config/run.yaml"}, "/config/run.yaml: unknown key 'epoch'"),
    ],
)
def test_a_bad_setting_stops_before_training_with_one_line(
    image: str, volume: str, tmp_path: Path, env: dict[str, str], line: str
) -> None:
    (tmp_path / "run.yaml").write_text("epoch: 3\n")
    result = run_container(image, volume, env=env, options=("-v", f"{tmp_path}:/config:ro"))
    assert result.returncode == ExitCode.CONFIG, logs(result)
    assert result.stdout == ""
    [message] = result.stderr.strip().splitlines()
    assert message.startswith("[trainbox] error: ") and line in message
    assert in_volume(image, volume, "ls", "-A", "/workspace") == ""


def test_torch_is_exactly_the_pinned_build_after_libreyolo(image: str) -> None:
    probe = (
        "import json, torch, torchvision, libreyolo;"
        "print(json.dumps([torch.__version__, torch.version.cuda,"
        " torchvision.__version__, libreyolo.__version__]))"
    )
    result = docker(
        "run", "--rm", "--network", "host", "--entrypoint", "python", image, "-c", probe
    )
    assert result.returncode == 0, result.stderr
    torch_version, cuda, vision, libreyolo = json.loads(result.stdout)
    assert torch_version.split("+")[0] == dockerfile_arg("TORCH_VERSION")
    assert cuda == TESTED_CUDA
    assert vision.split("+")[0] == dockerfile_arg("TORCHVISION_VERSION")
    assert libreyolo == dockerfile_arg("LIBREYOLO_VERSION")
    labels = json.loads(
        docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout
    )
    assert labels["ai.trainbox.torch"] == dockerfile_arg("TORCH_VERSION")
    assert labels["ai.trainbox.cuda"] == cuda
    assert labels["ai.trainbox.libreyolo"] == libreyolo


def fake_wheel(folder: Path, name: str, version: str, *requires: str) -> str:
    """A minimal wheel: metadata only, enough for pip's resolver."""
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {req}\n" for req in requires)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", metadata)
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path.name


def test_the_build_fails_when_a_dependency_would_replace_torch(
    image: str, build_args: list[str], tmp_path: Path
) -> None:
    # A package that needs another torch, and that other torch, offered to pip by URL.
    needs = fake_wheel(tmp_path, "needs-old-torch", "1.0", "torch==2.13.0")
    torch = fake_wheel(tmp_path, "torch", "2.13.0")
    server = serve(tmp_path)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    extra = f"{base}/{needs} {base}/{torch}"
    try:
        # Without trainbox's constraints, pip would swap the image's torch for it ...
        dry = docker(
            "run",
            "--rm",
            "--network",
            "host",
            "--entrypoint",
            "pip",
            image,
            "install",
            "--dry-run",
            "--no-index",
            *extra.split(),
        )
        assert dry.returncode == 0, logs(dry)
        assert "Would install needs-old-torch-1.0 torch-2.13.0" in dry.stdout
        # ... with them, the build stops at that step.
        result = build(
            "trainbox:test-conflict", build_args, "--build-arg", f"EXTRA_PACKAGES={extra}"
        )
    finally:
        server.shutdown()
    assert result.returncode != 0
    output = logs(result)
    assert "torch-constraints.txt" in output and "conflict" in output.lower()
    assert "selftest:" not in output


def test_image_size_bench_accounts_for_every_byte(image: str) -> None:
    from tests.bench import image_size

    totals = image_size.sizes(image)
    whole = int(docker("image", "inspect", "--format", "{{.Size}}", image).stdout)
    assert sum(totals.values()) == whole
    assert max(totals, key=totals.get) == image_size.TORCH
    assert 0 < totals[image_size.TRAINBOX] < 1_000_000  # our layer stays small
    assert all(
        totals[part] > 0 for part in (image_size.BASE, image_size.SYSTEM, image_size.LIBREYOLO)
    )
    assert "overhead (not torch)" in image_size.report(image, totals)
    added = image_size.extras(image)  # what the default LIBREYOLO_EXTRAS cost
    assert {"transformers", "peft", "onnxruntime"} <= set(added) and all(added.values())
    assert sum(added.values()) < totals[image_size.LIBREYOLO]  # within libreyolo's layer


def test_any_command_runs_under_tini_and_trainbox_subcommands_go_to_trainbox(
    image: str, volume: str
) -> None:
    shell = run_container(image, volume, "bash", "-c", "echo ok; tr '\\0' ' ' < /proc/1/cmdline")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines()[0] == "ok" and "tini" in shell.stdout.splitlines()[1]
    python = run_container(image, volume, "python", "-c", "import torch; print(6 * 7)")
    assert (python.returncode, python.stdout.strip()) == (0, "42"), python.stderr
    settings = run_container(image, volume, "config")
    assert settings.returncode == 0 and "RUN_NAME=run" in settings.stdout.splitlines()
    for command in (("status",), ("trainbox", "status")):  # no run on this volume yet
        status = run_container(image, volume, *command)
        assert status.returncode == 1, status.stderr
        assert "no status at /workspace/trainbox/status.json" in status.stderr
