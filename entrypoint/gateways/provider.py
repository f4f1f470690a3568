"""The gateway to the providers' APIs: which rented machine this is, and the one request
that stops or destroys it (``ending`` decides when). An idle GPU bills like a busy one.

vast.ai sets ``CONTAINER_ID`` and ``CONTAINER_API_KEY`` (a per-instance key) in every
instance; its CLI stops with ``PUT /api/v0/instances/ID/ {"state": "stopped"}`` and destroys
with ``DELETE`` on the same URL. RunPod sets ``RUNPOD_POD_ID`` and ``RUNPOD_API_KEY`` (a
pod-scoped key; docs.runpod.io, pods/templates/environment-variables). Its REST API v2
stops with ``POST /v2/pods/ID/action {"action": "stop"}`` (200) and terminates with
``DELETE /v2/pods/ID`` (204): runpod/docs api-reference-v2/openapi.json at 098c7fb0, read
2026-11-30 and vendored in tests/providers. v1 (``rest.runpod.io/v1``) is retired: RunPod's
migration guide (api-reference-v2/migrate-from-v1, runpod/docs df512e53) gives November 15,
2026, earlier copies December 1. Both providers take ``Authorization: Bearer KEY``; the key
is never logged.

When RunPod's REST API refuses (a pod-scoped key without that permission answered 403 in one
user's log, where ``runpodctl stop pod`` worked) or cannot be asked, the request
``runpodctl`` itself sends is tried next: the GraphQL mutation ``podStop`` (``podTerminate``
to destroy) on ``/graphql`` of the same host, the key as its ``api_key`` query parameter
(runpod/runpodctl ``api/pod.go`` ``StopPod``, ``api/query.go``, read 2026-12-04). vast.ai's
CLI has one way only (``vastai stop instance``: the same PUT).
"""

import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from entrypoint.errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")


@dataclass(frozen=True)
class Machine:
    """The rented machine this container runs on, as its provider's variables tell."""

    provider: str  # "vast.ai" or "RunPod"
    id: str
    key: str  # the machine's own API key; empty: none given, so nothing can be asked
    exited: str  # what the provider does with a container that exits, for the log
    restarts: bool  # whether it starts an exited container again by itself

    @property
    def left_running(self) -> str:
        """What ON_EXIT=none leaves to the user here."""
        return f"ON_EXIT=none: {self.provider} {self.exited}: {self.stop_hint}"

    @property
    def stop_hint(self) -> str:
        if self.provider == "RunPod":
            return f"stop the pod yourself (`runpodctl stop pod {self.id}`, or the console)"
        return f"stop the instance yourself (`vastai stop instance {self.id}`, or the console)"


def machine(environ: Mapping[str, str] = os.environ) -> Machine | None:
    """This vast.ai instance or RunPod pod, or None on any other machine."""
    vast = environ.get("CONTAINER_API_KEY") or environ.get("VAST_CONTAINERLABEL")
    if environ.get("CONTAINER_ID") and vast:
        # vast.ai: an exited container's instance shows `exited` ("Container process exited
        # unexpectedly": docs.vast.ai, cli/reference/show-instance, read 2026-12-02); whether
        # it still bills the GPU is not documented, so it is taken to.
        return Machine(
            "vast.ai",
            environ["CONTAINER_ID"],
            environ.get("CONTAINER_API_KEY", ""),
            "keeps an exited container's instance, billed, until it is stopped",
            restarts=False,
        )
    if environ.get("RUNPOD_POD_ID"):
        # dstackai/dstack#1142 (RunPod "infinitely restarts the pod"; RunPod's own docs say
        # nothing of an exit and advise an idle `sleep infinity`), read 2026-12-02.
        return Machine(
            "RunPod",
            environ["RUNPOD_POD_ID"],
            environ.get("RUNPOD_API_KEY", ""),
            "starts a container that exits again, and bills meanwhile",
            restarts=True,
        )
    return None


def action(on_exit: str, found: Machine | None) -> str:
    """ON_EXIT resolved on ``found`` (this machine): ``auto`` is ``stop`` on a vast.ai instance
    or RunPod pod, else none."""
    if on_exit != "auto":
        return on_exit
    return "stop" if found else "none"


@dataclass(frozen=True)
class Request:
    provider: str
    method: str
    url: str
    body: dict | None
    key: str
    done: tuple[int, ...] = ()  # error statuses that mean "already stopped or gone"
    graphql: bool = False  # RunPod's GraphQL: the key in the query, errors in a 200 answer

    def describe(self) -> str:
        """The request without its key."""
        body = f" {json.dumps(self.body)}" if self.body is not None else ""
        if self.graphql:
            return f"{self.method} {self.url}?api_key=***{body}"
        return f"{self.method} {self.url}{body} (Authorization: Bearer ***)"


# runpodctl's own mutations (api/pod.go): the pod's id as the podId variable.
GRAPHQL = {
    "stop": "mutation stopPod($podId: String!) { podStop(input: {podId: $podId}) "
            "{ id desiredStatus } }",
    "destroy": "mutation terminatePod($podId: String!) { podTerminate(input: {podId: $podId}) }",
}  # fmt: skip


def requests(found: Machine, how: str, vast_api_url: str, runpod_api_url: str) -> list[Request]:
    """The requests that stop (``how="stop"``) or destroy ``found``, in the order to try them:
    the next one only when the one before failed."""
    if found.provider == "vast.ai":
        url = f"{vast_api_url.rstrip('/')}/api/v0/instances/{found.id}/"
        # vast.ai's own OpenAPI (tests/providers): stop is a PUT of the state; destroy a DELETE
        # without a body.
        method, body = ("PUT", {"state": "stopped"}) if how == "stop" else ("DELETE", None)
        return [Request("vast.ai", method, url, body, found.key)]
    base = runpod_api_url.rstrip("/")
    url = f"{base}/v2/pods/{found.id}"
    # 404: the pod is gone, which is what a stop wants; 409: the action does not apply to the
    # pod's state (already stopped).
    rest = (
        Request("RunPod", "POST", f"{url}/action", {"action": "stop"}, found.key, (404, 409))
        if how == "stop"
        else Request("RunPod", "DELETE", url, None, found.key, (404,))
    )
    body = {"query": GRAPHQL[how], "variables": {"podId": found.id}}
    return [rest, Request("RunPod", "POST", f"{base}/graphql", body, found.key, graphql=True)]


def check(on_exit: str, output_repo: str, environ: Mapping[str, str] = os.environ) -> None:
    """At start: an ON_EXIT that was asked for must be able to act; destroy only ever after
    an upload to ``output_repo`` (a stop keeps the volume, and the weights on it)."""
    found = machine(environ)
    how = action(on_exit, found)
    if how == "none":
        if found and on_exit == "none":
            log.warning(found.left_running)
        return
    if how == "destroy" and not output_repo:
        raise TrainboxError(
            "ON_EXIT=destroy needs OUTPUT_REPO: without an upload, destroying the machine would "
            "take the only copy of the weights with it (ON_EXIT=stop keeps the volume)",
            ExitCode.CONFIG,
        )
    if found is None:
        raise TrainboxError(
            f"ON_EXIT={how}: this is neither a vast.ai instance (CONTAINER_ID, "
            "CONTAINER_API_KEY) nor a RunPod pod (RUNPOD_POD_ID, RUNPOD_API_KEY); "
            "set ON_EXIT=none, or stop the machine yourself",
            ExitCode.CONFIG,
        )
    if not found.key:
        log.warning("ON_EXIT=%s: %s gave this container no API key, so it cannot be asked; "
                    "it %s: %s", how, found.provider, found.exited, found.stop_hint)  # fmt: skip
        return
    log.info("ON_EXIT=%s: %s will be asked once the run has ended%s", how, found.provider,
             " and its upload is verified" if output_repo else "")  # fmt: skip


def send(found: Request) -> None:
    """Send ``found``; raise on an HTTP error, and on a GraphQL answer that holds errors."""
    data = json.dumps(found.body).encode() if found.body is not None else None
    url = found.url
    if found.graphql:
        url += "?" + urllib.parse.urlencode({"api_key": found.key})
    call = urllib.request.Request(url, data=data, method=found.method)
    if not found.graphql:
        call.add_unredirected_header("Authorization", f"Bearer {found.key}")
    if data is not None:
        call.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(call, timeout=30) as answer:
        text = answer.read()
    if found.graphql and (errors := json.loads(text or b"{}").get("errors")):
        raise RefusedByGraphQL("; ".join(str(e.get("message", e)) for e in errors))


class RefusedByGraphQL(Exception):
    """A GraphQL answer 200 that carries ``errors`` (as runpodctl reads them)."""


def ask(found: Request, dry_run: bool = False) -> bool:
    """Send ``found``; True once the provider took it (or says it is already done). Every
    failure is one line: the caller says what the user must do instead."""
    if dry_run:
        log.info("ON_EXIT_DRY_RUN: would send to %s: %s", found.provider, found.describe())
        return False
    log.info("asking %s: %s", found.provider, found.describe())
    try:
        send(found)
    except urllib.error.HTTPError as err:
        if err.code not in found.done:
            log.error("%s answered HTTP %d", found.provider, err.code)
            return False
        log.info("%s answered %d: already stopped or gone", found.provider, err.code)
    except RefusedByGraphQL as err:
        log.error("%s refused: %s", found.provider, err)
        return False
    except (urllib.error.URLError, OSError, ValueError) as err:
        log.error("%s could not be asked (%s)", found.provider, err)
        return False
    return True


class PriceUnknown(Exception):
    """The provider could not tell this machine's price: the one line says why."""


def price(found: Machine, vast_api_url: str, runpod_api_url: str) -> float:
    """This machine's price in USD per hour, as its provider's API says it: RunPod's pod
    ``cost`` ("Current cost in USD per hour"), vast.ai's instance ``dph_total`` ("total
    dollars per hour", disk included). One request, with the machine's own key."""
    if not found.key:
        raise PriceUnknown(f"{found.provider} gave this container no API key")
    if found.provider == "vast.ai":  # as vast-cli's ``show instance`` asks
        url = f"{vast_api_url.rstrip('/')}/api/v0/instances/{found.id}/?owner=me"
    else:
        url = f"{runpod_api_url.rstrip('/')}/v2/pods/{found.id}"
    call = urllib.request.Request(url, method="GET")
    call.add_unredirected_header("Authorization", f"Bearer {found.key}")
    try:
        with urllib.request.urlopen(call, timeout=30) as answer:
            body = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        raise PriceUnknown(f"{found.provider} answered HTTP {err.code} to GET {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise PriceUnknown(f"{found.provider} could not be asked ({err})") from None
    return _dollars_per_hour(found.provider, body)


def _dollars_per_hour(provider: str, body: object) -> float:
    """The price in an answer: vast.ai nests the instance under ``instances`` (one object, null
    once it is gone: vast-cli's ``show instance``); RunPod answers the pod itself (v2 says
    ``cost``; v1 and GraphQL said ``adjustedCostPerHr``, ``costPerHr``)."""
    if provider == "vast.ai":
        record = body.get("instances") if isinstance(body, dict) else None
        value = record.get("dph_total") if isinstance(record, dict) else None
    else:
        record = body if isinstance(body, dict) else {}
        said = [record.get(k) for k in ("cost", "adjustedCostPerHr", "costPerHr")]
        value = next((v for v in said if isinstance(v, int | float) and v > 0), None)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise PriceUnknown(f"{provider}'s answer holds no price for this machine")
    return float(value)
