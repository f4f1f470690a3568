"""Money: a container's spend from its price history, the run's across containers, an epoch's
cost and the projection, idle seconds in USD; the provider's price as its API answers it; the
MAX_COST verdict; the screen's money line."""

import json
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode
from entrypoint.gateways import provider
from entrypoint.runtime import pricing, watchdog
from entrypoint.settings.launchers import Volume
from entrypoint.state import cost, snapshot, store, view
from entrypoint.training import progress, publish
from tests.conftest import settings
from tests.standins.provider import Provider

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
CENT = 1e-4  # the figures are kept to 4 decimals


def started(workspace: Path, **moments: float) -> None:
    store.mark(Volume(workspace), fresh=True, started=T0, **moments)


def test_a_price_that_changes_mid_run_is_summed_piece_by_piece(tmp_path: Path) -> None:
    started(tmp_path)
    cost.note_price(
        Volume(tmp_path), 1.80, "RunPod", T0 + 20
    )  # the first read counts from the start
    cost.note_price(Volume(tmp_path), 1.80, "RunPod", T0 + 320)  # the same price: no new piece
    cost.note_price(Volume(tmp_path), 3.60, "RunPod", T0 + 1800)
    assert store.prices(Volume(tmp_path))["history"] == [[store.stamp(T0 + 20), 1.80],
                                                 [store.stamp(T0 + 1800), 3.60]]  # fmt: skip
    mine = cost.container(Volume(tmp_path), T0 + 3600, training_over=False)
    assert mine["usd"] == pytest.approx(1800 / 3600 * 1.80 + 1800 / 3600 * 3.60, abs=CENT)  # 2.70
    assert mine["per_hour"] == 3.60 and mine["seconds"] == 3600
    assert cost.price_now(Volume(tmp_path)) == 3.60


def test_idle_seconds_are_priced_before_the_first_step_and_after_the_last(tmp_path: Path) -> None:
    started(tmp_path, first_step=T0 + 360, last_step=T0 + 3000)
    cost.note_price(Volume(tmp_path), 2.00, "PRICE_PER_HOUR", T0 + 5)
    during = cost.container(Volume(tmp_path), T0 + 3060, training_over=False)
    assert during["idle_usd"] == pytest.approx(
        360 / 3600 * 2.00, abs=CENT
    )  # training: only the start
    after = cost.container(Volume(tmp_path), T0 + 3060, training_over=True, epoch_seconds=900)
    assert after["idle_usd"] == pytest.approx((360 + 60) / 3600 * 2.00, abs=CENT)
    assert after["usd_at_last_step"] == pytest.approx(3000 / 3600 * 2.00, abs=CENT)
    assert after["per_epoch"] == pytest.approx(0.5, abs=CENT)


def test_a_restarted_run_sums_every_container_and_projects_the_epochs_left(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "run"
    snapshot.write_manifest(run_dir, {"run": "run", "costs": [
        {"container_started": "first", "usd": 1.25, "idle_usd": 0.10, "per_epoch": 0.30},
        {"container_started": "second", "usd": 0.75, "idle_usd": 0.05},
    ]})  # fmt: skip
    started(tmp_path, first_step=T0 + 180, last_step=T0 + 1800)
    cost.note_price(Volume(tmp_path), 1.20, "vast.ai", T0 + 1)
    snapshot.keep(run_dir, costs=cost.container(Volume(tmp_path), T0 + 1800, training_over=False))
    manifest = store.manifest(publish.folder(run_dir))
    assert [e["container_started"] for e in manifest["costs"]] == ["first", "second",
                                                                   store.stamp(T0)]  # fmt: skip
    state = {
        "phase": "training",
        "training": {"completed_epochs": 6, "total_epochs": 10, "epoch_seconds": 600},
    }
    money = pricing.figures(settings(tmp_path), state, now=T0 + 1800)
    assert money["source"] == "vast.ai" and money["per_hour"] == 1.20
    assert money["spent"] == pytest.approx(1.25 + 0.75 + 0.60, abs=CENT)
    assert money["idle"] == pytest.approx(0.10 + 0.05 + 180 / 3600 * 1.20, abs=CENT)
    assert money["per_epoch"] == pytest.approx(0.20, abs=CENT)  # 600 s at $1.20/h
    assert money["projected"] == pytest.approx(2.60 + 4 * 0.20, abs=CENT)
    assert money["at_epoch_end"] == pytest.approx(2.60, abs=CENT)
    assert cost.so_far(manifest) == (pytest.approx(2.60, abs=CENT), 0.30)
    screen = view.human({"phase": "training", "cost": money})
    assert "cost     $2.60 so far at $1.200/h (vast.ai), $0.200/epoch, $3.40 projected" in screen


def test_no_price_known_gives_no_figures_and_says_why(tmp_path: Path) -> None:
    started(tmp_path)
    assert pricing.figures(settings(tmp_path), {"phase": "staging"}, now=T0 + 60) is None
    cost.note_price(Volume(tmp_path), None, "", T0 + 1, unknown="no provider API tells it here")
    found = pricing.figures(settings(tmp_path), {"phase": "staging"}, now=T0 + 60)
    assert found == {"unknown": "no provider API tells it here"}
    assert "cost     unknown: no provider API tells it here" in view.human({"cost": found})
    started(tmp_path)  # a new container: the last one's price is not this one's
    store.mark(Volume(tmp_path), fresh=True, started=T0 + 7200)
    assert pricing.figures(settings(tmp_path), {"phase": "staging"}, now=T0 + 7300) is None


@pytest.mark.parametrize(("environ", "per_hour"), [
    ({"RUNPOD_POD_ID": "pod7", "RUNPOD_API_KEY": "rp-key"}, 0.69),
    ({"CONTAINER_ID": "4242", "CONTAINER_API_KEY": "vast-key"}, 1.0020741),
])  # fmt: skip
def test_the_price_is_the_providers_own_answer(environ: dict, per_hour: float) -> None:
    stand_in = Provider()
    stand_in.per_hour = per_hour
    try:
        found = provider.machine(environ)
        assert provider.price(found, stand_in.url, stand_in.url) == per_hour
        [(path, key)] = stand_in.reads
        assert key == f"Bearer {found.key}"
        assert path in ("/v2/pods/pod7", "/api/v0/instances/4242/?owner=me")
        stand_in.refusing["/"] = 403  # a key without the permission to read
        with pytest.raises(provider.PriceUnknown, match="answered HTTP 403 to GET"):
            provider.price(found, stand_in.url, stand_in.url)
    finally:
        stand_in.close()


def test_a_stopped_pod_or_a_gone_instance_holds_no_price() -> None:
    with pytest.raises(provider.PriceUnknown, match="holds no price"):
        provider._dollars_per_hour("RunPod", {"id": "pod7", "cost": 0.0})  # EXITED
    with pytest.raises(provider.PriceUnknown, match="holds no price"):
        provider._dollars_per_hour("vast.ai", {"instances": None})
    assert provider._dollars_per_hour("RunPod", json.loads('{"costPerHr": 0.5}')) == 0.5  # v1


def budget_state(phase: str, done: int, total: int, **money: float) -> dict:
    return {"phase": phase, "started_at": store.stamp(T0), "progress_at": store.stamp(T0),
            "training": {"completed_epochs": done, "total_epochs": total},
            "cost": money}  # fmt: skip


def test_max_cost_stops_after_the_epoch_whose_next_would_pass_it(tmp_path: Path) -> None:
    cfg = settings(tmp_path, MAX_COST="10")
    within = budget_state("training", 3, 10, spent=9.5, at_epoch_end=7.0, per_epoch=3.0)
    assert watchdog.verdict(cfg, within, now=T0) is None  # 7 + 3 is not past 10: train on
    over = watchdog.verdict(cfg, budget_state("training", 4, 10, spent=10.1, at_epoch_end=10.0,
                                              per_epoch=3.0), now=T0)  # fmt: skip
    assert over.code == ExitCode.BUDGET
    assert "MAX_COST=$10.00: $10.00 spent when epoch 4 ended, and epoch 5 would cost $3.00" in (
        str(over))  # fmt: skip
    last = budget_state("training", 10, 10, spent=12.0, at_epoch_end=12.0, per_epoch=3.0)
    assert watchdog.verdict(cfg, last, now=T0) is None  # the run is done: its end is its own
    first = budget_state("training", 0, 10, spent=11.0, per_epoch=3.0)
    assert watchdog.verdict(cfg, first, now=T0) is None  # the epoch in progress finishes
    staging = watchdog.verdict(cfg, budget_state("staging", 0, 0, spent=10.0), now=T0)
    assert staging.code == ExitCode.BUDGET and "before training: nothing was trained" in (
        str(staging))  # fmt: skip
    assert watchdog.verdict(settings(tmp_path), budget_state("staging", 0, 0, spent=99.0),
                            now=T0) is None  # no MAX_COST  # fmt: skip


PROFILE = Path(__file__).parent / "data" / "profile_summary.cpu-demo.json"


def test_the_profile_verdict_comes_with_the_guides_advice_and_its_price(tmp_path: Path) -> None:
    """A real profile_summary.json, written by LibreYOLO's profiler on the demo on the CPU
    (PROFILE_STEPS=2, 2026-12-05): host / launch bound, 0.68 img/s, the GPU 0% busy."""
    run = tmp_path / "runs" / "run" / "profile"
    run.mkdir(parents=True)
    run.joinpath("profile_summary.json").write_text(PROFILE.read_text())
    found = cost.advice(progress.profile(tmp_path / "runs" / "run"), 3.60)
    assert (found["bound"], found["img_per_s"], found["gpu_util"]) == ("host / launch", 0.68, 0.0)
    assert "a larger BATCH first; a faster card buys nothing" in found["advice"]
    assert "a cheaper card with at least 0% of this one's speed" in found["advice"]
    assert found["per_1000_images"] == pytest.approx(1000 / 0.68 * 3.60 / 3600, abs=CENT)
    screen = view.human({"phase": "training", "profile": found})
    assert "profile  host / launch bound, 11845 ms/step, 0.7 img/s" in screen
    assert "advice   the GPU waits for the host: a larger BATCH first" in screen
    compute = cost.advice({**found, "bound": "compute", "gpu_util": 0.93}, None)
    assert compute["advice"].startswith("the card is the lever")
    assert "per_1000_images" not in cost.advice({"bound": "dataloader", "img_per_s": 9}, None)
