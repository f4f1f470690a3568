"""NOTIFY: every event's words from fixture run states, once per run across restarts, the
still-billing message at once then hourly, and a send that never harms the run: the real
Apprise library against a webhook on 127.0.0.1, and against a port that answers nothing."""

import socket
import time
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import notify
from entrypoint.runtime import notices
from entrypoint.settings import config
from entrypoint.settings.launchers import Volume
from entrypoint.state import snapshot, status, store
from tests.conftest import trainbox
from tests.standins.webhook import Webhook

ALL = ",".join(config.EVENTS)
TRAINING = {"completed_epochs": 1, "total_epochs": 10, "epoch_seconds": 61.5,
            "eta_seconds": 553.5}  # fmt: skip
COST = {"per_hour": 2.4, "spent": 1.2345, "per_epoch": 0.041, "projected": 1.6035}


def test_every_events_words_come_from_the_status() -> None:
    state = {"run": "cars", "training": TRAINING, "cost": COST}
    title, body = notices.text("started", state)
    assert title == "trainbox: cars is training"
    assert body == "epoch 1/10 done in 61.5 s; ETA 554 s; projected $1.60 at $2.40/h"
    done = {**state, "training": {**TRAINING, "completed_epochs": 10}, "card": "https://hub/o/n",
            "evaluation": {"test": {"images": 500, "metrics/mAP50-95": 0.4123},
                           "val": {"images": 100, "metrics/mAP50-95": 0.5}}}  # fmt: skip
    title, body = notices.text("completed", {**done, "training_hours": 2.5})
    assert title == "trainbox: cars completed"
    assert body == (
        "test mAP50-95 0.4123 on 500 images; validation mAP50-95 0.5000 on 100 "
        "images. 10/10 epochs in 2.50 h; $1.23 spent; model card: https://hub/o/n"
    )
    failed = {**state, "exit_code": 3}
    line = "exit 3: DATASET_REPO=org/nothing: not found; check the name"
    assert notices.text("failed", failed, line) == (
        "trainbox: cars failed (exit 3)", f"{line} ($1.23 spent)")  # fmt: skip
    assert notices.text("budget", state, "exit 12: MAX_COST=$1.00 ...")[0].endswith(
        "stopped at MAX_COST")  # fmt: skip
    assert "watchdog (exit 9)" in notices.text("watchdog", {**state, "exit_code": 9})[0]
    title, body = notices.text("stopped", state, "exit 130: SIGTERM received")
    assert title == "trainbox: cars stopped" and body.startswith("a stop signal or a preemption")
    assert "1/10 epochs done" in body
    assert notices.text("billing", state, "ON_EXIT=stop failed") == (
        "trainbox: cars: the machine still bills", "ON_EXIT=stop failed")  # fmt: skip
    assert notices.text("completed", {"run": "x"})[1].startswith("no score")
    classifier = {"evaluation": {"val": {"images": 6, "metrics/precision": 0.5,
                                         "metrics/accuracy_top1": 0.75}}}  # fmt: skip
    assert notices.text("completed", classifier)[1].startswith(
        "validation accuracy_top1 0.7500 on 6 images"
    )  # its lead, whatever the status's order


def test_once_per_run_across_restarts_and_only_what_notify_events_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume, run_dir = Volume(tmp_path), tmp_path / "runs" / "run"
    status.record(volume, "training", fresh=True, run="run", training=TRAINING, cost=COST)
    with Webhook() as hook:
        monkeypatch.setenv("NOTIFY", hook.url)
        assert notices.tell(volume, run_dir, ALL, "started")
        assert not notices.tell(volume, run_dir, ALL, "started")  # a restart: said already
        assert not notices.tell(volume, run_dir, "completed,failed", "budget")
        assert not notices.tell(Volume(tmp_path, 1), run_dir, ALL, "failed")  # node 0 speaks
        assert notices.tell(volume, run_dir, ALL, "billing", "up", once=False)
        assert notices.tell(volume, run_dir, ALL, "billing", "up", once=False)
    assert hook.titles() == ["trainbox: run is training"] + 2 * ["trainbox: run: the machine "
                                                                 "still bills"]  # fmt: skip
    assert set(store.notified(tmp_path, "run")) == {"started"}


def test_another_machines_record_from_the_hub_is_taken_in_and_goes_back_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new machine resumes the run from the Hub: the events its manifest records are not
    sent again; this machine's own join them, and each epoch's manifest carries them all."""
    monkeypatch.setenv("NOTIFY", "json://127.0.0.1:9/")  # never reached: nothing is due
    volume, run_dir = Volume(tmp_path), tmp_path / "runs" / "run"
    store.write_notified(tmp_path, "run", {"budget": "here"})
    notices.remember(tmp_path, "run", {"started": "there", "budget": "there"})
    assert store.notified(tmp_path, "run") == {"started": "there", "budget": "here"}
    assert not notices.due(volume, "run", ALL, "started") and not notices.due(
        volume, "run", ALL, "budget")  # fmt: skip
    assert notices.due(volume, "run", ALL, "stopped")  # recorded as had before its send
    published = snapshot.folder(run_dir)
    published.mkdir(parents=True)
    store.write_manifest(published, {"run": "run", "costs": []})
    snapshot.keep(run_dir, notified=store.notified(tmp_path, "run"))
    assert set(store.manifest(published)["notified"]) == {"started", "budget", "stopped"}
    assert store.manifest(published)["costs"] == []  # the rest of it kept


def test_still_billing_is_said_at_once_then_every_hour() -> None:
    sent: list[str] = []
    billing = notices.Billing(sent.append, "ON_EXIT=stop failed: stop it in RunPod's console.",
                              2.4, since=1000.0)  # fmt: skip
    assert billing.tick(1000.0)
    assert [billing.tick(1000.0 + s) for s in (600, 1200, 3000)] == [False, False, False]
    assert billing.tick(1000.0 + 3600)
    assert not billing.tick(1000.0 + 3600 + 600) and billing.tick(1000.0 + 7200)
    assert sent[0] == ("ON_EXIT=stop failed: stop it in RunPod's console. It has cost $0.00 "
                       "since the run ended (0.0 h at $2.400/h).")  # fmt: skip
    assert sent[1].endswith("It has cost $2.40 since the run ended (1.0 h at $2.400/h).")
    assert len(sent) == 3 and sent[2].endswith("$4.80 since the run ended (2.0 h at $2.400/h).")


def test_a_url_apprise_cannot_parse_stops_the_start_naming_no_secret() -> None:
    with pytest.raises(TrainboxError) as refused:
        notify.check({"NOTIFY": "json://127.0.0.1/ok, bogus://user:hunter22@host/x"})
    assert refused.value.code == ExitCode.CONFIG
    assert "URL 2 (bogus://...)" in str(refused.value) and "hunter22" not in str(refused.value)
    notify.check({"NOTIFY": "ntfy://my-topic slack://T1/B2/C3 json://h:1/p"})  # all parse
    done = trainbox("run", env={"NOTIFY": "nope://x:hunter22@h", "WORKSPACE": "/nonexistent"})
    assert done.returncode == ExitCode.CONFIG and "hunter22" not in done.stderr


def test_a_password_in_notify_is_shown_nowhere_and_never_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Webhook("me", "s3cret-pw") as hook:
        env = {"NOTIFY": hook.url, "HF_TOKEN": "hf_never_in_a_message", "WORKSPACE": str(tmp_path)}
        shown = trainbox("config", env=env)
        assert "NOTIFY=json://me:****@127.0.0.1" in shown.stdout and "s3cret" not in shown.stdout
        tried = trainbox("notify", "--test", env=env)
        assert tried.returncode == 0 and ": answered" in tried.stdout
        assert "s3cret" not in tried.stdout + tried.stderr
        monkeypatch.setenv("NOTIFY", hook.url)
        monkeypatch.setenv("HF_TOKEN", "hf_never_in_a_message")
        volume = Volume(tmp_path)
        status.record(volume, "failed", fresh=True, run="run", reason="hf_never_in_a_message")
        notices.tell(volume, tmp_path / "runs/run", ALL, "failed", "token hf_never_in_a_message")
    assert hook.auth[0].startswith("Basic ")  # the password went where it belongs
    assert len(hook.messages) == 2 and "hf_never_in_a_message" not in str(hook.messages)


def test_a_service_that_never_answers_costs_the_timeout_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()  # a closed port: refused at once
    try:
        began = time.monotonic()
        answered = notify.send("t", "b", {"NOTIFY": f"json://127.0.0.1:{port}/h "
                                                    f"json://u:pw1234@127.0.0.1:{dead}/h"},
                               timeout=2)  # fmt: skip
        took = time.monotonic() - began
    finally:
        silent.close()
    assert took < 2.5 and list(answered.values()) == [False, False]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("NOTIFY:")]
    assert len(lines) == 2 and all(line.endswith("; the run goes on") for line in lines)
    assert "pw1234" not in " ".join(lines)
