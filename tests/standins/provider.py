"""Stand-ins for the providers' APIs (vast.ai's instances, RunPod's REST v2), answering by
their own vendored OpenAPI documents (tests/providers), for host and container tests."""

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import yaml

from tests.conftest import REPO

PROVIDERS = REPO / "tests" / "providers"
RUNPOD_SPEC = json.loads((PROVIDERS / "runpod-openapi-v2.json").read_text())
# vast.ai's own descriptions of the two requests ON_EXIT makes (vendored, see their headers).
VAST_SPECS = [yaml.safe_load((PROVIDERS / f"vastai-{name}-instance.yaml").read_text())
              for name in ("stop", "destroy", "show")]  # fmt: skip


def answers(specs: list[dict], method: str, path: str, body: object, refused: int) -> int:
    """The status a provider answers, by its own OpenAPI documents: 404 for a route they do
    not have, ``refused`` for a body the operation's schema refuses or a body where the
    operation takes none, else the operation's success code."""
    path = path.partition("?")[0]
    for spec in specs:
        for template, item in spec["paths"].items():
            if not re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
                continue
            if method.lower() not in item:
                continue
            operation = item[method.lower()]
            content = operation.get("requestBody", {}).get("content", {})
            if schema := content.get("application/json", {}).get("schema"):
                found = {**schema, "components": spec.get("components", {})}
                if not jsonschema.Draft202012Validator(found).is_valid(body):
                    return refused
            elif body is not None:
                return refused
            return min(int(code) for code in operation["responses"] if code.startswith("2"))
    return 404


def runpod_answers(method: str, path: str, body: object) -> int:
    """RunPod's REST v2 (its OpenAPI document): 404 for a route it does not have (v1's among
    them), 422 for a body its schema refuses, else 200 for a pod action, 204 for a delete.
    It simplifies: every pod exists and every action is allowed in its state (no 409)."""
    return answers([RUNPOD_SPEC], method, path, body, 422)


def vast_answers(method: str, path: str, body: object) -> int:
    """vast.ai's instances API (its OpenAPI descriptions of stop and destroy): 400 for a body
    they refuse, else 200. It simplifies: every instance exists."""
    return answers(VAST_SPECS, method, path, body, 400)


def runpod_pod(pod: str, per_hour: float) -> dict:
    """RunPod's answer to ``GET /v2/pods/ID``: its own example pod (the vendored document's),
    this pod's id and ``cost``, checked against its ``Pod`` schema."""
    operation = RUNPOD_SPEC["paths"]["/v2/pods/{id}"]["get"]["responses"]["200"]
    content = operation["content"]["application/json"]
    body = {**next(iter(content["examples"].values()))["value"], "id": pod, "cost": per_hour}
    _valid(RUNPOD_SPEC, content["schema"], body)
    return body


def vast_instance(instance: str, per_hour: float) -> dict:
    """vast.ai's answer to ``GET /api/v0/instances/ID/`` (show instance): the instance under
    ``instances``, each field its vendored document's example, ``dph_total`` this price,
    checked against its schema. It simplifies: the price's parts (``dph_base``, storage) are
    not made to add up to ``dph_total``."""
    spec = VAST_SPECS[2]
    fields = spec["components"]["schemas"]["Instance"]["properties"]
    # (the examples its own schema refuses are left out: a null, os_version's YAML 18.04)
    record = {k: v["example"] for k, v in fields.items() if v.get("example") is not None
              and jsonschema.Draft202012Validator(v).is_valid(v["example"])}  # fmt: skip
    body = {"instances": {**record, "id": int(instance), "dph_total": per_hour}}
    operation = spec["paths"]["/api/v0/instances/{id}/"]["get"]["responses"]["200"]
    _valid(spec, operation["content"]["application/json"]["schema"], body)
    return body


def _valid(spec: dict, schema: dict, body: dict) -> None:
    found = {**schema, "components": spec.get("components", {})}
    jsonschema.Draft202012Validator(found).validate(body)


def graphql_answer(body: object) -> dict:
    """RunPod's GraphQL (``/graphql``) as runpodctl reads it (runpod/runpodctl api/pod.go):
    ``podStop`` answers the pod with ``desiredStatus`` EXITED, ``podTerminate`` null. It
    simplifies: it reads the operation's name from the query's text, without a schema."""
    query = body.get("query", "") if isinstance(body, dict) else ""
    pod = (body.get("variables") or {}).get("podId") if isinstance(body, dict) else None
    if pod and "podStop(" in query:
        return {"data": {"podStop": {"id": pod, "desiredStatus": "EXITED"}}}
    if pod and "podTerminate(" in query:
        return {"data": {"podTerminate": None}}
    return {"errors": [{"message": "Cannot query this field"}]}


class Provider:
    """A stand-in for the providers' APIs on 127.0.0.1: records every request (the reads, GETs
    of the machine's price, in ``reads``; those that act in ``requests``); RunPod's routes
    answer as ``runpod_answers`` says (``/graphql`` as ``graphql_answer``), vast.ai's
    (``/api/...``) as ``vast_answers``. A stop or destroy it took calls ``stop``: the test's
    machine is stopped as the platform would. ``refusing``: a path's beginning -> the HTTP
    status every request there gets instead (e.g. 403 for a key without the permission, 404
    for a pod that is gone); ``carries_out=False``: it takes a request and stops nothing.
    ``per_hour``: the machine's price in the answers to a pod's or an instance's GET."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, object]] = []
        self.reads: list[tuple[str, str]] = []  # (path, Authorization)
        self.stop: Callable[[], None] | None = None
        self.refusing: dict[str, int] = {}
        self.carries_out = True
        self.per_hour = 0.44  # RunPod's example pod's cost
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length)) if length else None
                key = self.headers.get("Authorization", "")
                if self.command == "GET":
                    provider.reads.append((self.path, key))
                else:
                    provider.requests.append((self.command, self.path, key, body))
                answer = b"{}"
                if refused := [c for p, c in provider.refusing.items() if self.path.startswith(p)]:
                    status = refused[0]
                elif self.path.startswith("/api/"):
                    status = vast_answers(self.command, self.path, body)
                    if status == 200 and self.command == "GET":
                        instance = self.path.partition("?")[0].rstrip("/").rsplit("/", 1)[1]
                        answer = json.dumps(vast_instance(instance, provider.per_hour)).encode()
                elif self.path.startswith("/graphql"):
                    found = graphql_answer(body)
                    status, answer = 200, json.dumps(found).encode()
                    if "errors" in found:
                        status = 400
                else:
                    status = runpod_answers(self.command, self.path, body)
                    if status == 200 and self.command == "GET":
                        pod = self.path.partition("?")[0].rsplit("/", 1)[1]
                        answer = json.dumps(runpod_pod(pod, provider.per_hour)).encode()
                answer = b"" if status == 204 else answer
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                took = status < 300 and self.command != "GET"
                if took and provider.carries_out and provider.stop:
                    provider.stop()

            do_PUT = do_POST = do_DELETE = do_GET = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
