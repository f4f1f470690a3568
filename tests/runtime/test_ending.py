"""The cost guard (ON_EXIT), end to end on the host: a real `trainbox run` of the demo on the
CPU uploads to the test Hub, verifies the upload, then calls a local stand-in for vast.ai's
or RunPod's API, and only then; the stand-in then stops it, as the platform would."""

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from entrypoint.errors import ExitCode
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from tests.conftest import REPO
from tests.standins.hub import GOOD_TOKEN, Fault, Hub
from tests.standins.provider import Provider, runpod_answers, vast_answers


@pytest.fixture
def provider() -> Iterator[Provider]:
    stand_in = Provider()
    yield stand_in
    stand_in.close()


def run(
    hub: Hub, provider: Provider, workspace: Path, until: str = "", **extra: str
) -> subprocess.CompletedProcess:
    """A real `trainbox run` on the provider's machine; ``until``: a log line at which the
    user stops it (SIGTERM), for a run that waits to be stopped."""
    env = {"WORKSPACE": str(workspace), "DEVICE": "cpu", "EPOCHS": "1", "MONITOR": "false",
           "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN,
           "OUTPUT_REPO": "org/weights", "UPLOAD_INTERVAL": "1", "DATA": "", "DATASET_REPO": "",
           "TRAINBOX_CONFIG": "", "VAST_API_URL": provider.url,
           "RUNPOD_API_URL": provider.url, **extra}  # fmt: skip
    for name in ("CONTAINER_ID", "CONTAINER_API_KEY", "RUNPOD_POD_ID", "RUNPOD_API_KEY"):
        env.setdefault(name, "")
    command = [sys.executable, "-m", "entrypoint", "run"]
    machine = subprocess.Popen(command, env={**os.environ, **env}, cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    # As both platforms stop a container: SIGTERM; it simplifies: at once, with no grace
    # period to run out.
    provider.stop = lambda: machine.send_signal(signal.SIGTERM)
    lines: list[str] = []

    def read() -> None:
        for line in machine.stderr:
            lines.append(line)
            if until and until in line:
                machine.send_signal(signal.SIGTERM)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        out = machine.stdout.read()
        machine.wait(timeout=600)
    finally:
        machine.kill()
        provider.stop = None
    reader.join(10)
    return subprocess.CompletedProcess(command, machine.returncode, out, "".join(lines))


VAST = {"CONTAINER_ID": "4242", "CONTAINER_API_KEY": "vast-key-123"}
RUNPOD = {"RUNPOD_POD_ID": "pod7", "RUNPOD_API_KEY": "rp-key-456"}
STOP_VAST = ("PUT", "/api/v0/instances/4242/", "Bearer vast-key-123", {"state": "stopped"})


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hub, Path]]:
    """One real run that trains, uploads, verifies, then asks the vast.ai stand-in to stop
    this instance: the request, exactly, and only after the Hub was asked for its hashes."""
    stand_in = Provider()
    with Hub() as hub:
        workspace = tmp_path_factory.mktemp("ws")
        result = run(hub, stand_in, workspace, ON_EXIT="stop", **VAST)
        assert result.returncode == 0, result.stderr[-3000:]
        assert stand_in.requests == [
            ("PUT", "/api/v0/instances/4242/", "Bearer vast-key-123", {"state": "stopped"})
        ]
        verified = [i for i, (_, p) in enumerate(hub.requests) if "/paths-info/" in p]
        commits = [i for i, (_, p) in enumerate(hub.requests) if "/commit/" in p]
        assert verified and commits and verified[-1] > commits[-1]
        assert "vast-key-123" not in result.stderr  # the key is never logged
        stand_in.close()
        yield hub, workspace


@pytest.mark.parametrize(
    ("action", "machine", "expected"),
    [
        ("destroy", VAST, ("DELETE", "/api/v0/instances/4242/", "Bearer vast-key-123", None)),
        ("stop", RUNPOD, ("POST", "/v2/pods/pod7/action", "Bearer rp-key-456",
                          {"action": "stop"})),
        ("destroy", RUNPOD, ("DELETE", "/v2/pods/pod7", "Bearer rp-key-456", None)),
    ],
    ids=["vast-destroy", "runpod-stop", "runpod-destroy"],
)  # fmt: skip
def test_the_exact_request_is_sent_after_a_verified_upload(
    trained: tuple[Hub, Path], provider: Provider, action: str, machine: dict, expected: tuple
) -> None:
    """A restart of the completed run trains nothing, verifies the upload, and asks."""
    hub, workspace = trained
    result = run(hub, provider, workspace, ON_EXIT=action, **machine)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already completed" in result.stderr
    assert provider.requests == [expected]
    assert list(machine.values())[1] not in result.stderr
    assert f"ON_EXIT={action} failed" not in result.stderr  # the stand-in took it (2xx)


def test_the_runpod_stand_in_answers_by_runpods_own_openapi() -> None:
    assert runpod_answers("POST", "/v1/pods/pod7/stop", None) == 404  # v1 is retired
    assert runpod_answers("POST", "/v2/pods/pod7/action", {"action": "stop"}) == 200
    assert runpod_answers("POST", "/v2/pods/pod7/action", {"action": "halt"}) == 422
    assert runpod_answers("POST", "/v2/pods/pod7/action", {"action": "stop", "x": 1}) == 422
    assert runpod_answers("DELETE", "/v2/pods/pod7", None) == 204


def test_the_vast_stand_in_answers_by_vasts_own_openapi() -> None:
    assert vast_answers("PUT", "/api/v0/instances/4242/", {"state": "stopped"}) == 200
    assert vast_answers("PUT", "/api/v0/instances/4242/", {"state": "paused"}) == 400
    assert vast_answers("PUT", "/api/v0/instances/4242/", {}) == 400
    assert vast_answers("DELETE", "/api/v0/instances/4242/", None) == 200
    assert vast_answers("DELETE", "/api/v0/instances/4242/", {}) == 400  # it takes no body
    assert vast_answers("POST", "/api/v0/instances/4242/stop", None) == 404


def test_an_unverified_upload_sends_nothing_and_says_so(
    trained: tuple[Hub, Path], provider: Provider
) -> None:
    hub, workspace = trained
    hub.faults.append(Fault("/paths-info/", status=500, times=99))
    try:
        # It waits to be stopped (an exit would be started again): the user stops it.
        result = run(
            hub, provider, workspace, until="not verified", ON_EXIT="destroy", HUB_WAIT="5", **VAST
        )  # fmt: skip  (the verification gives up after 5 s)
    finally:
        hub.faults.clear()
    assert result.returncode == 0, result.stderr[-3000:]
    assert provider.requests == []
    assert "ON_EXIT=destroy: not done: the upload to org/weights is not verified" in result.stderr


def test_a_hub_that_holds_other_bytes_is_not_verified(
    trained: tuple[Hub, Path], provider: Provider
) -> None:
    hub, workspace = trained
    kept = hub.repos["models/org/weights"].files["run/last.pt"]
    hub.add("org/weights", {"run/last.pt": b"not the checkpoint"}, kind="models")
    try:
        result = run(hub, provider, workspace, until="not verified", ON_EXIT="stop", **RUNPOD)
    finally:
        hub.add("org/weights", {"run/last.pt": kept}, kind="models")
    assert provider.requests == [] and "not verified" in result.stderr, result.stderr[-3000:]


def test_a_dry_run_logs_the_request_instead(trained: tuple[Hub, Path], provider: Provider) -> None:
    hub, workspace = trained
    result = run(hub, provider, workspace, ON_EXIT="stop", ON_EXIT_DRY_RUN="true", **VAST)
    assert result.returncode == 0, result.stderr[-3000:]
    assert provider.requests == []
    assert (
        f'would send to vast.ai: PUT {provider.url}/api/v0/instances/4242/ {{"state": "stopped"}}'
        " (Authorization: Bearer ***)" in result.stderr
    )
    assert "vast-key-123" not in result.stderr


def test_a_failed_final_upload_sends_nothing(hub: Hub, provider: Provider, tmp_path: Path) -> None:
    hub.faults += [  # the manifest's commit at start goes through, every later one fails
        Fault("/commit/", times=1, methods=("POST",)),
        Fault("/commit/", status=500, times=999),
    ]
    result = run(hub, provider, tmp_path, ON_EXIT="stop", STOP_GRACE="8", **RUNPOD)
    assert result.returncode == ExitCode.UPLOAD, result.stderr[-3000:]
    assert provider.requests == []  # the next start retries the upload: it may mend it
    assert "exit 7: RunPod starts a container that exits again" in result.stderr
    # why, in the status and the job's last line, with what to do
    reason = store.status(Volume(tmp_path))["reason"]
    assert reason.startswith("final upload failed (") and "only on the volume" in reason
    assert f"exit 7: {reason}; fix the token; after a failed final upload" in result.stderr


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ({"OUTPUT_REPO": "", "ON_EXIT": "destroy"}, "ON_EXIT=destroy needs OUTPUT_REPO"),
        ({"ON_EXIT": "stop"}, "ON_EXIT=stop: this is neither a vast.ai instance"),
    ],
    ids=["destroy-without-output-repo", "no-provider"],
)
def test_on_exit_that_cannot_act_stops_at_start(
    hub: Hub, provider: Provider, tmp_path: Path, extra: dict, line: str
) -> None:
    result = run(hub, provider, tmp_path, **extra)
    assert result.returncode == ExitCode.CONFIG
    [error] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert line in error
    assert not (tmp_path / "runs").exists()  # nothing trained


def stop_this_process() -> None:
    """The platform's stop of an in-process ``settle``: SIGTERM, as both platforms send."""
    os.kill(os.getpid(), signal.SIGTERM)


def test_after_a_failed_run_destroy_only_stops_and_train_log_is_published(
    provider: Provider, tmp_path: Path
) -> None:
    from entrypoint.runtime import ending
    from entrypoint.settings import config
    from entrypoint.training import publish

    cfg = config.load({"ON_EXIT": "destroy", "VAST_API_URL": provider.url, "ON_EXIT_WAIT": "1",
                       "WORKSPACE": str(tmp_path)})  # fmt: skip
    assert ending.settle(cfg, ExitCode.TIME_LIMIT, VAST) == ExitCode.TIME_LIMIT
    assert provider.requests == [
        ("PUT", "/api/v0/instances/4242/", "Bearer vast-key-123", {"state": "stopped"})
    ]
    run_dir = tmp_path / "runs" / "run"
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "weights" / "last.pt").write_bytes(b"epoch 2")
    publish.publish(run_dir, 2)
    (run_dir / "weights" / "last.pt").write_bytes(b"torn by the failure")
    (run_dir / "train.log").write_text("Traceback (most recent call last): ...\n")
    failure = SimpleNamespace(save_dir=str(run_dir), exception=RuntimeError("CUDA error"))
    publish.Publisher().on_train_exception(failure)
    index = publish.read_index(run_dir)
    assert index["epoch"] == 2 and "train.log" in index["files"]
    assert (publish.folder(run_dir) / "last.pt").read_bytes() == b"epoch 2"  # not the torn one
    stopped = SimpleNamespace(save_dir=str(run_dir), exception=KeyboardInterrupt())
    (run_dir / "train.log").write_text("interrupted\n")
    publish.Publisher().on_train_exception(stopped)  # a stop is no failure: nothing published
    assert (publish.folder(run_dir) / "train.log").read_text().startswith("Traceback")


@pytest.mark.parametrize(
    ("code", "before", "expected"),
    [
        (0, [], True),  # completed: a new start has nothing to train
        (6, [], True),  # the GPU check: the same card fails it again
        (2, [], True),
        (8, [], True),  # MAX_RUNTIME is the user's limit for the run
        (5, [], False),  # the Hub may be back
        (5, [0], False),
        (5, [5], True),  # the same failure again
        (1, [7], False),
        (1, [5, 7], True),  # the third failed start in a row
        (1, [5, 0], False),
        (1, [130, 5], False),  # a stop signal is no failure
        (130, [130], False),  # a stop signal is never acted on
    ],
)
def test_which_ends_a_new_start_would_repeat(code: int, before: list[int], expected: bool) -> None:
    from entrypoint.runtime import ending

    assert ending.final(code, [{"at": "", "code": c} for c in before]) is expected


def test_a_refused_setting_on_runpod_stops_the_pod_once(
    hub: Hub, provider: Provider, tmp_path: Path
) -> None:
    """A start whose settings are refused fails the same way on every restart: the pod is
    stopped at the first (never destroyed), and the next start would not send it again."""
    result = run(hub, provider, tmp_path, EPOCHS="many", ON_EXIT="destroy", **RUNPOD)
    assert result.returncode == ExitCode.CONFIG, result.stderr[-3000:]
    assert "[trainbox] error: environment: EPOCHS=" in result.stderr
    assert provider.requests == [
        ("POST", "/v2/pods/pod7/action", "Bearer rp-key-456", {"action": "stop"})
    ]
    starts = json.loads((tmp_path / "trainbox" / "starts.json").read_text())
    assert [s["code"] for s in starts] == [ExitCode.CONFIG]


def test_a_completed_run_without_a_key_waits_instead_of_looping(
    trained: tuple[Hub, Path], provider: Provider
) -> None:
    """RunPod without RUNPOD_API_KEY: nothing can be asked, so the container stays up, idle,
    and says what to do, instead of exiting into RunPod's restart."""
    hub, workspace = trained
    pod = {"RUNPOD_POD_ID": "pod7"}
    result = run(hub, provider, workspace, until="waits instead of exiting", **pod)
    assert result.returncode == 0, result.stderr[-3000:]
    assert provider.requests == []
    assert "RunPod gave this container no API key" in result.stderr
    assert "runpodctl stop pod pod7" in result.stderr


def test_a_failure_a_restart_may_mend_stops_on_vast_at_once_and_on_runpod_when_it_repeats(
    provider: Provider, tmp_path: Path
) -> None:
    """Exit 5 (the Hub out of reach): RunPod starts the container again, which may mend it, so
    only the second exit 5 in a row stops the pod; vast.ai starts nothing again by itself, so
    the first one stops the instance (the volume stays)."""
    from entrypoint.runtime import ending
    from entrypoint.settings import config

    machines = {"vast": tmp_path / "vast", "runpod": tmp_path / "runpod"}
    vast = config.load({"VAST_API_URL": provider.url, "WORKSPACE": str(machines["vast"]),
                        "ON_EXIT_WAIT": "1"})  # fmt: skip
    assert ending.settle(vast, ExitCode.HUB, VAST) == ExitCode.HUB
    assert provider.requests == [STOP_VAST]
    provider.requests.clear()
    pod = config.load({"RUNPOD_API_URL": provider.url, "WORKSPACE": str(machines["runpod"])})
    assert ending.settle(pod, ExitCode.HUB, RUNPOD) == ExitCode.HUB
    assert provider.requests == []  # the next start may mend it
    provider.stop = stop_this_process  # RunPod's stop; without it this start would stay up
    assert ending.settle(pod, ExitCode.HUB, RUNPOD) == ExitCode.HUB
    assert provider.requests == [("POST", "/v2/pods/pod7/action", "Bearer rp-key-456",
                                  {"action": "stop"})]  # fmt: skip


STOP_POD = ("POST", "/v2/pods/pod7/action", "Bearer rp-key-456", {"action": "stop"})
# runpodctl's own request (runpod/runpodctl api/pod.go StopPod, api/query.go): the key as a query
# parameter, no Authorization header.
STOP_POD_GRAPHQL = ("POST", "/graphql?api_key=rp-key-456", "", {
    "query": "mutation stopPod($podId: String!) { podStop(input: {podId: $podId}) "
             "{ id desiredStatus } }",
    "variables": {"podId": "pod7"}})  # fmt: skip


def settle_on_runpod(
    provider: Provider, tmp_path: Path, stop_when: str, **settings: str
) -> tuple[int, str]:
    """``settle`` a completed start on a RunPod pod in this process; the platform's stop
    (SIGTERM) comes once the status's ``waiting`` holds ``stop_when``. (code, waiting)."""
    from entrypoint.runtime import ending
    from entrypoint.settings import config
    from entrypoint.state import store

    cfg = config.load({"RUNPOD_API_URL": provider.url, "WORKSPACE": str(tmp_path), **settings})
    seen: list[str] = []

    def platform() -> None:
        while stop_when not in (waiting := store.status(Volume(tmp_path)).get("waiting", "")):
            threading.Event().wait(0.1)
        seen.append(waiting)
        stop_this_process()

    threading.Thread(target=platform, daemon=True).start()
    return ending.settle(cfg, ExitCode.OK, RUNPOD), seen[0]


def test_a_pod_that_refuses_its_stop_stays_up_idle_and_says_how_to_stop_it(
    provider: Provider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """REST v2 refused (403), then runpodctl's GraphQL refused too: no exit into RunPod's
    restart; the line names what failed and the command that stops the pod."""
    provider.refusing = {"/v2/": 403, "/graphql": 403}
    code, waiting = settle_on_runpod(provider, tmp_path, "did not take the request")
    assert code == ExitCode.OK
    assert provider.requests == [STOP_POD, STOP_POD_GRAPHQL]
    assert waiting == ("ON_EXIT=stop failed: RunPod did not take the request: stop the pod "
                       "yourself (`runpodctl stop pod pod7`, or the console); this container "
                       "waits, idle, instead of exiting")  # fmt: skip
    assert waiting in caplog.text and "rp-key-456" not in caplog.text


def test_runpodctls_request_is_tried_when_the_rest_api_refuses(
    provider: Provider, tmp_path: Path
) -> None:
    provider.refusing = {"/v2/": 403}
    provider.stop = stop_this_process
    from entrypoint.runtime import ending
    from entrypoint.settings import config

    cfg = config.load({"RUNPOD_API_URL": provider.url, "WORKSPACE": str(tmp_path)})
    assert ending.settle(cfg, ExitCode.OK, RUNPOD) == ExitCode.OK
    assert provider.requests == [STOP_POD, STOP_POD_GRAPHQL]


def test_a_pod_gone_is_stopped_and_a_stop_that_never_comes_leaves_it_up(
    provider: Provider, tmp_path: Path
) -> None:
    """404 (the pod is gone) counts as done: nothing else is tried. A stop RunPod took but
    never carried out: past ON_EXIT_WAIT, the start stays up and says so."""
    provider.refusing = {"/v2/": 404}
    code, waiting = settle_on_runpod(provider, tmp_path, "has not stopped", ON_EXIT_WAIT="1")
    assert code == ExitCode.OK and provider.requests == [STOP_POD]
    assert waiting.startswith("ON_EXIT=stop: RunPod took the request but has not stopped this "
                              "machine within ON_EXIT_WAIT=1 s; this container waits")  # fmt: skip


def test_on_vast_a_refused_stop_exits_with_one_line(
    provider: Provider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vast.ai starts nothing again: the start ends with its code and says how to stop."""
    from entrypoint.runtime import ending
    from entrypoint.settings import config

    provider.refusing = {"/api/": 403}
    cfg = config.load({"VAST_API_URL": provider.url, "WORKSPACE": str(tmp_path)})
    assert ending.settle(cfg, ExitCode.OK, VAST) == ExitCode.OK
    assert provider.requests == [STOP_VAST]
    assert "ON_EXIT=stop failed: vast.ai did not take the request: stop the instance" in caplog.text


def test_a_first_failure_on_vast_says_why_it_stops_not_that_it_would_repeat(
    provider: Provider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Exit 5 once: a new start might mend it, but vast.ai starts none, so the line says that."""
    from entrypoint.runtime import ending
    from entrypoint.settings import config

    cfg = config.load({"VAST_API_URL": provider.url, "WORKSPACE": str(tmp_path),
                       "ON_EXIT_WAIT": "1"})  # fmt: skip
    with caplog.at_level("INFO", logger="trainbox"):
        assert ending.settle(cfg, ExitCode.HUB, VAST) == ExitCode.HUB
    assert "ON_EXIT=stop after exit 5: vast.ai keeps an exited container's instance" in caplog.text
    assert "a new start would end the same way" not in caplog.text
