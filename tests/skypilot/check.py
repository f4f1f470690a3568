"""A SkyPilot template as SkyPilot itself reads it: ``python check.py TEMPLATE COMMAND...``
(e.g. ``skypilot.yaml launch``, ``skypilot-spot.yaml jobs launch``) prints, as JSON, the
launch line the template's first comment gives, parsed by SkyPilot's own CLI, and the task
that SkyPilot builds from the file with it (what ``sky launch`` or ``sky jobs launch`` does
before it submits, less the GPU catalog download). Run with the SkyPilot of
``.venv/skypilot`` first on ``PYTHONPATH`` (tests/run installs it there: SkyPilot >= 0.10
needs ``click<8.2``, the image pins 8.5.1); tests/test_templates.py asserts on the output.
"""

import json
import os
import re
import shlex
import sys
from pathlib import Path

import sky
from sky import execution
from sky.client.cli import command as cli
from sky.clouds import CloudImplementationFeatures as Feature
from sky.utils import dag_utils, registry

PROVIDERS = Path(__file__).resolve().parents[2] / "configs" / "providers"
FEATURES = {"launch": [Feature.DOCKER_IMAGE, Feature.AUTOSTOP, Feature.AUTODOWN],
            "jobs": [Feature.DOCKER_IMAGE, Feature.SPOT_INSTANCE]}  # fmt: skip


def launch_line(template: str, command: list[str]) -> tuple[str, dict]:
    """The template's own launch line, and its parameters as SkyPilot's CLI parses them
    (``--secret HF_TOKEN`` takes the token from the shell, as typed)."""
    line = re.search(rf"sky {' '.join(command)} [^`\n]*", (PROVIDERS / template).read_text())[0]
    click_command = cli.cli
    for name in command:
        click_command = click_command.commands[name]
    params = click_command.make_context("sky", shlex.split(line)[1 + len(command) :]).params
    return line.strip(), params


def resources(task: sky.Task, features: list[Feature]) -> list[dict]:
    """Each alternative the task allows, and whether SkyPilot says its cloud supports what
    the template needs (a docker image, and autostop, spot or several nodes)."""
    if task.num_nodes > 1:
        features = [*features, Feature.MULTI_NODE]
    found = []
    for each in task.resources:
        supported = True
        if each.cloud is not None:
            try:
                each.cloud.check_features_are_supported(each, set(features))
            except Exception:  # SkyPilot's NotSupportedError: reported, the test decides
                supported = False
        recovery = each.job_recovery
        if recovery:
            registry.JOBS_RECOVERY_STRATEGY_REGISTRY.from_str(recovery["strategy"])
        stop = each.autostop_config
        found.append({
            "image": each.image_id[None] if each.image_id else None,
            "accelerators": sorted(each.accelerators or {}),
            "cloud": str(each.cloud) if each.cloud else None,
            "features_supported": supported,
            "use_spot": each.use_spot,
            "job_recovery": recovery,
            "autostop": {"idle_minutes": stop.idle_minutes, "down": stop.down} if stop else None,
        })  # fmt: skip
    return found


def main(template: str, *command: str) -> dict:
    os.environ.setdefault("HF_TOKEN", "hf_from_the_shell")
    line, params = launch_line(template, list(command))
    path = str(PROVIDERS / template)
    env, secrets = list(params.get("env") or ()), list(params.get("secret") or ())
    refused = {}
    for name, kept_env, kept_secrets in (
        ("HF_TOKEN", env, [s for s in secrets if s[0] != "HF_TOKEN"]),
        ("OUTPUT_REPO", [e for e in env if e[0] != "OUTPUT_REPO"], secrets),
    ):
        try:
            # What launch does first: a secret without a value fails it (sky/execution.py).
            execution._resolve_managed_secrets(
                dag_utils.load_chain_dag_from_yaml(path, kept_env, kept_secrets)
            )
        except Exception as err:  # SkyPilot's own refusal, whatever its type
            refused[name] = str(err)
    dag = dag_utils.load_chain_dag_from_yaml(path, env, secrets)
    if command[0] == "jobs":  # what `sky jobs launch` does to the file (sky/jobs/server/core.py)
        dag_utils.maybe_infer_and_fill_dag_and_task_names(dag)
        dag_utils.fill_default_config_in_dag_for_job_launch(dag)
    [task] = dag.tasks
    return {
        "version": sky.__version__,
        "line": line,
        "entrypoint": list(params["entrypoint"]),
        "launch": {k: params.get(k) for k in ("down", "idle_minutes_to_autostop", "cluster")},
        "env_from_line": [k for k, _ in env],
        "secrets_from_line": [k for k, _ in secrets],
        "refused_without": refused,
        "envs": task.envs,
        "secret_names": sorted(task.secrets),
        # The task as SkyPilot writes it for its logs and its API server: secrets redacted.
        "token_redacted": "hf_from_the_shell"
        not in json.dumps(
            task._to_yaml_config(redact_secrets=True)  # SkyPilot's own redaction
        ),
        "num_nodes": task.num_nodes,
        "run": task.run,
        "resources": resources(task, FEATURES[command[0]]),
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), default=str))
