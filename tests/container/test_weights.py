"""Start weights in a real container: a new run starts from an earlier run's checkpoint on the
test Hub (MODEL=hf://...), fetched once while the dataset stages; a missing one ends before
training with its line."""

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import (
    OUTPUT,
    docker,
    env_for,
    in_volume,
    logs,
    run_container,
    shapes_on_the_hub,
)
from tests.standins.hub import Hub

pytestmark = pytest.mark.container


def test_a_new_run_starts_from_an_earlier_runs_weights_on_the_hub(
    image: str, volume: str, hub: Hub, tmp_path
) -> None:
    first = run_container(image, volume, env=env_for(hub, EPOCHS="1"))
    assert first.returncode == 0, logs(first)[-3000:]
    shapes_on_the_hub(hub, tmp_path)
    # The weights (~25x the dataset) take about 5 s, so the staging starts while they come;
    # throttled by the dataset's size instead, they took 70 s.
    hub.rate = len(hub.repos[f"models/{OUTPUT}"].files["run/best.pt"]) / 5
    second_volume = f"{volume}-2"
    start = {"DATASET_REPO": "org/shapes", "DOCTOR": "false", "RUN_NAME": "second",
             "MODEL": f"hf://{OUTPUT}/run/best.pt", "EPOCHS": "1"}  # fmt: skip
    try:
        second = run_container(image, second_volume, env=env_for(hub, **start))
        assert second.returncode == 0, logs(second)[-3000:]
        fetched = in_volume(image, second_volume, "ls", f"/workspace/weights/{OUTPUT}/run")
        nope = {**start, "RUN_NAME": "third", "MODEL": f"hf://{OUTPUT}/run/nope.pt"}
        missing = run_container(image, second_volume, env=env_for(hub, **nope))
    finally:
        docker("volume", "rm", "-f", second_volume)
    assert "best.pt" in fetched.split()
    [weights] = [s for s in hub.served if s.name == "run/best.pt"]  # fetched once
    staged = [s for s in hub.served if s.name == "shapes.tar"]
    assert any(weights.overlaps(s) for s in staged), (weights, staged)  # while it staged
    assert "fetching the start weights run/best.pt from org/weights" in logs(second)
    assert missing.returncode == ExitCode.DATASET, logs(missing)[-3000:]
    [line] = [m for m in missing.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert line.endswith(f"MODEL=hf://{OUTPUT}/run/nope.pt: run/nope.pt is not in the Hub model "
                         f"repo {OUTPUT} (or the repo is private and HF_TOKEN cannot read it): "
                         "check the name, or set HF_TOKEN")  # fmt: skip
    assert "spawned: 'train'" not in logs(missing)
