"""The cost guard (ON_EXIT): once the run is over and its weights are verified on the Hub, ask
the provider to stop or destroy this very instance. An idle GPU bills like a busy one.

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
"""

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from .config import Config
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")


@dataclass(frozen=True)
class Request:
    provider: str
    method: str
    url: str
    body: dict | None
    key: str
    done: tuple[int, ...] = ()  # error statuses that mean "already stopped or gone"

    def describe(self) -> str:
        """The request without its key."""
        body = f" {json.dumps(self.body)}" if self.body is not None else ""
        return f"{self.method} {self.url}{body} (Authorization: Bearer ***)"


def request(
    cfg: Config, environ: Mapping[str, str] = os.environ, action: str | None = None
) -> Request:
    """The request ON_EXIT (or ``action``) makes on this machine, or a one-line error saying
    why none can be."""
    action = action or cfg.on_exit
    if environ.get("CONTAINER_ID") and environ.get("CONTAINER_API_KEY"):
        url = f"{cfg.vast_api_url.rstrip('/')}/api/v0/instances/{environ['CONTAINER_ID']}/"
        # vast.ai's own OpenAPI (tests/providers): stop is a PUT of the state; destroy a DELETE
        # without a body.
        method, body = ("PUT", {"state": "stopped"}) if action == "stop" else ("DELETE", None)
        return Request("vast.ai", method, url, body, environ["CONTAINER_API_KEY"])
    if environ.get("RUNPOD_POD_ID") and environ.get("RUNPOD_API_KEY"):
        url = f"{cfg.runpod_api_url.rstrip('/')}/v2/pods/{environ['RUNPOD_POD_ID']}"
        key = environ["RUNPOD_API_KEY"]
        # 409: the action does not apply to the pod's state (already stopped); 404: gone.
        if action == "stop":
            return Request("RunPod", "POST", f"{url}/action", {"action": "stop"}, key, (409,))
        return Request("RunPod", "DELETE", url, None, key, (404,))
    raise TrainboxError(
        f"ON_EXIT={action}: this is neither a vast.ai instance (CONTAINER_ID, "
        "CONTAINER_API_KEY) nor a RunPod pod (RUNPOD_POD_ID, RUNPOD_API_KEY); "
        "set ON_EXIT=none, or stop the machine yourself",
        ExitCode.CONFIG,
    )


def check(cfg: Config) -> None:
    """At start: ON_EXIT must be able to act, and only ever after an upload."""
    if cfg.on_exit == "none":
        return
    if not cfg.output_repo:
        raise TrainboxError(
            f"ON_EXIT={cfg.on_exit} needs OUTPUT_REPO: without an upload, stopping the machine "
            "could take the only copy of the weights with it",
            ExitCode.CONFIG,
        )
    found = request(cfg)
    log.info(
        "ON_EXIT=%s: %s will be asked once the upload is verified", cfg.on_exit, found.provider
    )


def send(found: Request) -> None:
    data = json.dumps(found.body).encode() if found.body is not None else None
    call = urllib.request.Request(found.url, data=data, method=found.method)
    call.add_unredirected_header("Authorization", f"Bearer {found.key}")
    if data is not None:
        call.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(call, timeout=30):
        pass


def on_exit(cfg: Config, verified: bool, code: int = ExitCode.OK) -> None:
    """Stop or destroy this machine (ON_EXIT), only when the weights are verified on the Hub.
    After a failed run (``code`` not 0) at most stop: destroying would take the volume, and
    the logs on it, with it."""
    action = cfg.on_exit
    if code != ExitCode.OK and action == "destroy":
        log.warning(
            "ON_EXIT=destroy: the run ended with exit %d, so this machine is only "
            "stopped: its volume keeps the logs; destroy it once you have read them",
            code,
        )
        action = "stop"
    if not verified:
        log.error(
            "ON_EXIT=%s: not done: the upload to %s is not verified, so this machine stays up "
            "(and bills) to keep the only copy of the weights; copy them off, then stop it",
            cfg.on_exit,
            cfg.output_repo,
        )
        return
    found = request(cfg, action=action)
    if cfg.on_exit_dry_run:
        log.info("ON_EXIT_DRY_RUN: would send to %s: %s", found.provider, found.describe())
        return
    log.info("ON_EXIT=%s: asking %s: %s", action, found.provider, found.describe())
    try:
        send(found)
    except urllib.error.HTTPError as err:
        if err.code not in found.done:
            log.error("ON_EXIT=%s failed (HTTP %d): stop this machine yourself", action, err.code)
            return
        log.info("ON_EXIT=%s: %s answered %d: already stopped or gone", action, found.provider,
                 err.code)  # fmt: skip
    except (urllib.error.URLError, OSError) as err:
        log.error("ON_EXIT=%s failed (%s): stop this machine yourself", action, err)
