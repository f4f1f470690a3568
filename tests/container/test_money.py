"""Money in real containers: a price the provider refuses to tell leaves training unharmed and
says what to set; MAX_COST stops a run after an epoch, with that epoch on the Hub, and a new
machine's start for the same run stages nothing. (The price read from RunPod's and vast.ai's
APIs is checked on the completed runs of tests/container/test_restarts.py.)"""

import json
import re
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from tests.container.conftest import (
    OUTPUT,
    docker,
    env_for,
    in_volume,
    run_container,
    shapes_on_the_hub,
)  # fmt: skip
from tests.standins.hub import Hub
from tests.standins.provider import Provider
from tests.standins.webhook import Webhook

pytestmark = pytest.mark.container

RUNPOD = {"RUNPOD_POD_ID": "pod7", "RUNPOD_API_KEY": "rp-key-456"}


def test_a_price_the_provider_refuses_is_one_line_and_training_goes_on(
    image: str, volume: str, hub: Hub
) -> None:
    provider = Provider()
    provider.refusing["/v2/pods/"] = 403  # a pod key that may not read its pod
    try:
        env = env_for(hub, **RUNPOD, RUNPOD_API_URL=provider.url, ON_EXIT="none", EPOCHS="1")
        result = run_container(image, volume, env=env)
    finally:
        provider.close()
    logs = result.stdout + result.stderr
    assert result.returncode == 0, logs[-4000:]
    said = [line for line in logs.splitlines() if "no price for this machine" in line]
    assert len(said) == 1, said
    assert "RunPod answered HTTP 403 to GET" in said[0] and "set PRICE_PER_HOUR" in said[0]
    assert [path for path, _ in provider.reads] == ["/v2/pods/pod7"]
    state = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))
    assert state["phase"] == "completed" and set(state["cost"]) == {"unknown"}
    assert "epoch 1/1 done" in logs and "$" not in logs.split("epoch 1/1 done")[1].split("\n")[0]
    assert "rp-key-456" not in logs


def test_max_cost_stops_after_an_epoch_and_a_new_machine_stages_nothing(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    """At $36 an hour (a cent a second), MAX_COST=$0.50: the preflight and staging (about 15 s
    here) spend less; some epoch's end then finds that the next one would pass the budget.
    Any epoch may be that one (an epoch takes about 2 s on this CPU): the test holds the rule
    the stop line gives, not a timing."""
    shapes_on_the_hub(hub, tmp_path)
    with Webhook() as hook:
        money = {"PRICE_PER_HOUR": "36", "MAX_COST": "0.50", "EPOCHS": "100",
                 "DATASET_REPO": "org/shapes", "NOTIFY": hook.url}  # fmt: skip
        _budget_then_again(image, volume, hub, money, hook)


def _budget_then_again(image: str, volume: str, hub: Hub, money: dict, hook: Webhook) -> None:
    first = run_container(image, volume, env=env_for(hub, **money))
    logs = first.stdout + first.stderr
    assert first.returncode == ExitCode.BUDGET, logs[-4000:]
    state = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))
    rule = re.search(r"MAX_COST=\$0\.50: \$([\d.]+) spent when epoch (\d+) ended, and epoch "
                     r"\d+ would cost \$([\d.]+) more: stopped after epoch \2",
                     state["reason"])  # fmt: skip
    assert rule, state["reason"]
    spent, epoch, next_one = float(rule[1]), int(rule[2]), float(rule[3])
    assert spent + next_one > 0.50 - 0.01 and 1 <= epoch < 100  # the line rounds to cents
    done = state["training"]["completed_epochs"]  # the stop may come as one more epoch ends
    assert epoch <= done <= epoch + 1
    index = json.loads(hub.repos[f"models/{OUTPUT}"].files["run/index.json"])
    assert index["epoch"] == done  # every finished epoch is on the Hub
    assert (state["cost"]["source"], state["cost"]["per_hour"]) == ("PRICE_PER_HOUR", 36.0)
    manifest = json.loads(hub.repos[f"models/{OUTPUT}"].files["run/manifest.json"])
    [entry] = manifest["costs"]
    assert entry["usd"] == pytest.approx(entry["seconds"] * 36 / 3600, abs=0.01)
    assert entry["per_epoch"] > 0 and "cost: the run has cost $" in logs
    downloads = len(hub.downloads("shapes.tar"))
    # Started again on the same volume, as RunPod does: it ends at once, says nothing new, and
    # the status keeps the run's epochs and dollars under a phase that names the budget.
    again = run_container(image, volume, env=env_for(hub, **money))
    assert again.returncode == ExitCode.BUDGET, (again.stdout + again.stderr)[-3000:]
    kept = json.loads(in_volume(image, volume, "cat", "/workspace/trainbox/status.json"))
    assert kept["phase"] == "budget" and kept["training"]["completed_epochs"] == done
    assert kept["cost"]["spent"] >= state["cost"]["spent"] > 0
    [ended] = [line for line in first.stderr.splitlines() if "] exit 12: " in line]
    assert ended.count("raise MAX_COST") == 1 and "start again" not in ended, ended  # once
    assert again.stderr.strip().splitlines()[-1].count("raise MAX_COST") == 1
    budget = [m for m in hook.messages if m["title"] == "trainbox: run stopped at MAX_COST"]
    assert len(budget) == 1 and "MAX_COST=$0.50" in budget[0]["message"], hook.messages

    other = f"{volume}-other"  # a new machine, its own empty volume: it resumes from the Hub
    try:
        second = run_container(image, other, env=env_for(hub, **money))
        logs = second.stdout + second.stderr
        assert second.returncode == ExitCode.BUDGET, logs[-4000:]
        assert "MAX_COST=$0.50 reached: the run has cost $" in logs
        assert "nothing was staged or trained" in logs
        assert len(hub.downloads("shapes.tar")) == downloads
        assert json.loads(hub.repos[f"models/{OUTPUT}"].files["run/index.json"])["epoch"] == done
        # The first machine's messages are on the Hub with the run: none is sent again.
        titles = [m["title"] for m in hook.messages]
        assert titles.count("trainbox: run stopped at MAX_COST") == 1, titles
        assert titles.count("trainbox: run is training") <= 1, titles
    finally:
        docker("volume", "rm", "--force", other)
