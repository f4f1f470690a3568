"""The Hub gateway's rules, one by one: what counts as "the Hub said no", "not there" and "the
Hub could not be asked", and what each turns into. (End to end, against the test Hub:
tests/upload/test_faults.py and tests/standins/test_hub.py.)"""

import urllib.error
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import errors

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.gateways.hub import errors as policy
from tests.conftest import trainbox

TARGET = hub.Target("OUTPUT_REPO", "org/w", repo_type="model")


def answered(status: int, kind: type[Exception] = errors.HfHubHTTPError) -> Exception:
    """A client error as huggingface_hub raises it, for a response with ``status``."""
    request = httpx2.Request("GET", "https://huggingface.co/api/models/org/w")
    return kind(f"{status} from the Hub", response=httpx2.Response(status, request=request))


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (answered(503), hub.UNREACHABLE),
        (answered(429), hub.UNREACHABLE),
        (answered(408), hub.UNREACHABLE),
        (ConnectionResetError(), hub.UNREACHABLE),
        (TimeoutError(), hub.UNREACHABLE),
        (urllib.error.URLError("refused"), hub.UNREACHABLE),
        (errors.LocalEntryNotFoundError("offline, nothing cached"), hub.UNREACHABLE),
        (answered(404, errors.RepositoryNotFoundError), hub.ABSENT),
        (answered(404, errors.RemoteEntryNotFoundError), hub.ABSENT),
        (answered(401, errors.RepositoryNotFoundError), hub.REFUSED),  # private, no token
        (answered(403, errors.GatedRepoError), hub.REFUSED),
        (answered(403), hub.REFUSED),
        (ValueError("a bug of ours"), None),  # let through: never retried as the Hub's
        (PermissionError("the volume"), None),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_every_failure_is_classified_once(err: Exception, kind: str | None) -> None:
    assert hub.classify(err) == kind


def test_a_refusal_names_the_setting_and_the_fix_never_the_token() -> None:
    line = str(hub.refusal(answered(403), TARGET))
    assert line.startswith("the Hub refused HF_TOKEN for OUTPUT_REPO=org/w (403)")
    assert "make a token with write access" in line


def test_a_refusal_is_not_retried_and_a_bug_is_let_through() -> None:
    tries: list[int] = []

    def refused() -> None:
        tries.append(1)
        raise answered(403)

    with pytest.raises(TrainboxError) as caught:
        hub.call(refused, "reading the index", TARGET, wait=60)
    assert (caught.value.code, len(tries)) == (ExitCode.UPLOAD, 1)
    with pytest.raises(ZeroDivisionError):
        hub.call(lambda: 1 / 0, "anything", TARGET, wait=60)


def test_an_unreachable_hub_is_retried_then_given_up_with_exit_5(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(policy.time, "sleep", slept.append)  # the backoff, recorded, not waited
    clock = iter(range(0, 100, 4))  # each try takes 4 s of the wait
    monkeypatch.setattr(policy.time, "monotonic", lambda: float(next(clock)))
    told: list[str] = []

    def down() -> None:
        raise answered(503)

    with pytest.raises(hub.Unreachable) as caught, hub.told(told.append):
        hub.call(down, "reading the index", TARGET, wait=10)
    assert caught.value.code == ExitCode.HUB
    assert "cannot ask the Hub for OUTPUT_REPO=org/w (reading the index: 503" in str(caught.value)
    assert slept == [1, 2] and len(told) == 2  # backoff, each wait told to the status
    assert told[0] == "reading the index: 503 from the Hub; retrying in 1 s"


def raising(err: Exception) -> Callable[[], None]:
    def action() -> None:
        raise err

    return action


def test_what_is_absent_is_none_and_what_is_unreachable_is_still_an_error() -> None:
    assert hub.absent_as_none(raising(answered(404, errors.RemoteEntryNotFoundError)))() is None
    with pytest.raises(errors.HfHubHTTPError):
        hub.absent_as_none(raising(answered(503)))()


def test_a_wait_is_told_only_inside_told() -> None:
    """``told`` attaches its callback for the block alone, and a wait is still logged."""
    told: list[str] = []
    with hub.told(told.append):
        policy.waits.warning("inside", extra={"waiting": "inside"})
    policy.waits.warning("after", extra={"waiting": "after"})
    assert told == ["inside"] and not policy.waits.handlers


def test_a_xet_duration_without_its_unit_is_refused_with_the_key() -> None:
    """hf_xet would ignore it silently (its own log file says so) and keep its 300 s."""
    with pytest.raises(TrainboxError) as caught:
        hub.check_settings({"HF_XET_CLIENT_READ_TIMEOUT": "5"})
    assert caught.value.code == ExitCode.CONFIG
    assert str(caught.value).startswith("HF_XET_CLIENT_READ_TIMEOUT='5': hf_xet reads a duration")
    for fine in ("5s", "500ms", "2m30s"):
        hub.check_settings({"HF_XET_CLIENT_READ_TIMEOUT": fine,
                            "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "3"})  # fmt: skip


def test_trainbox_run_refuses_a_xet_duration_before_anything_runs(tmp_path: Path) -> None:
    result = trainbox("run", env={"HF_XET_CLIENT_READ_TIMEOUT": "5", "WORKSPACE": str(tmp_path)})
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr.strip().startswith(
        "[trainbox] error: HF_XET_CLIENT_READ_TIMEOUT='5': hf_xet reads a duration"
    )
    assert list(tmp_path.iterdir()) == []
