"""The provider templates in configs/providers: each parsed (with the provider's own library
where it installs offline, else against its documented schema) and checked to run this
image, with settings trainbox knows."""

import copy
import json
import re
import shlex
import warnings

import jsonschema
import pytest
import yaml

from entrypoint import __version__, config
from tests.conftest import REPO

PROVIDERS = REPO / "configs" / "providers"
IMAGE = re.compile(rf"^ghcr\.io/[A-Za-z0-9_.-]+/trainbox:{re.escape(__version__)}-cu1[0-9]{{2}}$")
KNOWN = {key.upper() for key in config.KEYS} | {"HF_TOKEN", "HF_TOKEN_FILE"}


def test_vastai_template_keeps_the_images_entrypoint_and_its_cuda() -> None:
    """``POST /api/v0/template/``, checked against vast.ai's own OpenAPI description (vendored
    in tests/providers, read 2026-11-30). The entrypoint (``args``) launch mode: vast.ai runs
    the image as it is, so tini and trainbox get ``docker stop``'s SIGTERM; SSH and Jupyter
    modes replace the entrypoint with vast's own (docs.vast.ai, templates: template-settings),
    and in ``args`` mode ``onstart`` would be the entrypoint (vast-cli: ``--entrypoint``)."""
    spec = json.loads((PROVIDERS / "vastai.json").read_text())
    openapi = yaml.safe_load(
        (REPO / "tests" / "providers" / "vastai-create-template.yaml").read_text()
    )
    body = openapi["paths"]["/api/v0/template/"]["post"]["requestBody"]["content"]
    validator = jsonschema.Draft202012Validator(body["application/json"]["schema"])
    assert not list(validator.iter_errors(spec))
    assert list(validator.iter_errors({**spec, "runtype": "entrypoint"}))  # the schema can fail
    for required in ("name", "docker_login_repo", "docker_login_user", "docker_login_pass"):
        assert isinstance(spec[required], str)  # docs.vast.ai's table: "" when not needed
    assert IMAGE.match(f"{spec['image']}:{spec['tag']}")
    assert (spec["runtype"], spec["args_str"]) == ("args", "run") and "onstart" not in spec
    assert not (spec["use_ssh"] or spec["ssh_direct"] or spec["jup_direct"])
    flags = shlex.split(spec["env"])
    settings = dict(flags[i + 1].split("=", 1) for i, f in enumerate(flags) if f == "-e")
    assert set(settings) <= KNOWN and "HF_TOKEN" not in settings  # the token is never in a template
    assert "-p" not in flags  # the dashboard has no authentication: reach it through SSH
    assert settings["MONITOR_HOST"] == "127.0.0.1"
    config.load(settings)  # the settings are valid
    # Only hosts whose driver runs the image's CUDA: cu130 needs CUDA 13.0 (driver >= 580).
    cuda = re.search(r"-cu(\d+)(\d)$", spec["tag"])
    assert spec["extra_filters"] == {"cuda_max_good": {"gte": float(f"{cuda[1]}.{cuda[2]}")}}
    assert isinstance(spec["recommended_disk_space"], int)


def test_runpod_template_is_a_valid_v2_create_template_request() -> None:
    """REST v2 ``POST /v2/templates``, checked against ``CreateTemplateRequest`` in RunPod's own
    OpenAPI document (runpod/docs api-reference-v2/openapi.json, vendored in tests/providers;
    read 2026-11-30): v1 (``imageName``, ``volumeInGb``, ``readme``...) is retired."""
    spec = json.loads((PROVIDERS / "runpod.json").read_text())
    openapi = json.loads((REPO / "tests" / "providers" / "runpod-openapi-v2.json").read_text())
    schema = openapi["paths"]["/v2/templates"]["post"]["requestBody"]["content"]
    schema = {**schema["application/json"]["schema"], "components": openapi["components"]}
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(spec))
    assert list(validator.iter_errors({**spec, "imageName": spec["image"]}))  # v1's: refused
    assert isinstance(spec["name"], str) and IMAGE.match(spec["image"])
    assert spec["mounts"]["persistent"]["path"] == "/workspace" and spec["serverless"] is False
    assert spec["startJupyter"] is False  # Jupyter would be a second, unauthenticated door
    assert isinstance(spec["env"], dict) and set(spec["env"]) <= KNOWN
    assert spec["env"]["HF_TOKEN"] == "{{ RUNPOD_SECRET_hf_token }}"  # a secret, not a value
    assert "args" not in spec  # the image's own entrypoint and command
    config.load({k: v for k, v in spec["env"].items() if k != "HF_TOKEN"})


def test_skypilot_task_is_valid_for_skypilot() -> None:
    import sky

    spec = yaml.safe_load((PROVIDERS / "skypilot.yaml").read_text())
    with pytest.raises(ValueError, match="HF_TOKEN"):  # the token must come at launch
        sky.Task.from_yaml_config(copy.deepcopy(spec))
    # SkyPilot's own schema check, as `sky launch --env HF_TOKEN` does it.
    task = sky.Task.from_yaml_config(spec, env_overrides=[("HF_TOKEN", "hf_at_launch")])
    [resources] = task.resources
    assert IMAGE.match(resources.image_id[None].removeprefix("docker:"))
    assert set(task.envs) <= KNOWN
    assert "trainbox run" in task.run
    config.load({k: v for k, v in task.envs.items() if k != "HF_TOKEN"})


def test_modal_app_builds_with_modal() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("modal_app", PROVIDERS / "modal_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # modal's objects are lazy: no network, no account
    assert module.app.name == "trainbox"
    assert IMAGE.match(module.IMAGE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        function = module.app.registered_functions["train"]
    assert function._spec_.gpus == "H100"
    assert module.TIMEOUT <= 24 * 60 * 60  # Modal's documented maximum
    assert int(module.SETTINGS["MAX_RUNTIME"]) + int(module.SETTINGS["STOP_GRACE"]) < module.TIMEOUT
    assert set(module.SETTINGS) <= KNOWN
    config.load(module.SETTINGS)


def test_docker_run_line_uses_the_image_a_volume_shm_and_a_stop_timeout() -> None:
    line = (PROVIDERS / "docker-run.sh").read_text().split("exec ", 1)[1]
    words = shlex.split(line.replace("\\\n", " "))
    assert words[:3] == ["docker", "run", "--gpus"] and IMAGE.match(words[-1])
    assert "trainbox:/workspace" in words and "--shm-size" in words
    assert int(words[words.index("--stop-timeout") + 1]) >= 110 + 10  # STOP_GRACE + the stop
    assert "127.0.0.1:8420:8420" in words


def test_every_template_runs_the_same_image() -> None:
    texts = [p.read_text() for p in sorted(PROVIDERS.iterdir())]
    images = {m for text in texts for m in re.findall(r"ghcr\.io/[\w.-]+/trainbox:[\w.-]+", text)}
    vast = json.loads((PROVIDERS / "vastai.json").read_text())
    images.add(f"{vast['image']}:{vast['tag']}")
    assert len(images) == 1, images
    readme = (REPO / "README.md").read_text()
    for template in sorted(PROVIDERS.iterdir()):
        assert f"configs/providers/{template.name}" in readme, template.name
    assert yaml.safe_load((PROVIDERS / "skypilot.yaml").read_text())["name"] == "trainbox"


def test_skypilot_two_node_task_resolves_each_node() -> None:
    import sky

    spec = yaml.safe_load((PROVIDERS / "skypilot-multinode.yaml").read_text())
    task = sky.Task.from_yaml_config(spec, env_overrides=[("HF_TOKEN", "hf_at_launch")])
    assert task.num_nodes == 2 and "trainbox run" in task.run
    [resources] = task.resources
    assert IMAGE.match(resources.image_id[None].removeprefix("docker:"))
    settings = {k: v for k, v in task.envs.items() if k != "HF_TOKEN"}
    assert set(settings) <= KNOWN
    # What SkyPilot sets on the second node.
    node = config.load({**settings, "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2",
                        "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.8",
                        "SKYPILOT_NUM_GPUS_PER_NODE": "8"})  # fmt: skip
    assert (node.nnodes, node.node_rank, node.master_addr, node.nproc_per_node) == (
        2,
        1,
        "10.0.0.7",
        8,
    )


def test_kubernetes_pytorchjob_runs_two_nodes_of_the_image() -> None:
    job = yaml.safe_load((PROVIDERS / "kubernetes-pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    for role in ("Master", "Worker"):
        pod = replicas[role]["template"]["spec"]
        assert replicas[role]["restartPolicy"] == "Never"
        assert pod["terminationGracePeriodSeconds"] >= config.Config.stop_grace + 10
        [container] = pod["containers"]
        assert container["name"] == "pytorch"  # the operator injects its variables there
        assert IMAGE.match(container["image"]) and container["args"] == ["run"]
        env = {e["name"]: e for e in container["env"]}
        assert set(env) <= KNOWN
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]  # from a secret, never a value
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/workspace", "/dev/shm"} <= mounts
    settings = {k: e["value"] for k, e in env.items() if "value" in e}
    # What the training operator sets in the Worker pod (PyTorchJob v1: the pod's RANK).
    node = config.load({**settings, "PET_NNODES": "2", "RANK": "1", "WORLD_SIZE": "2",
                        "MASTER_ADDR": "trainbox-master-0", "MASTER_PORT": "23456",
                        "PET_NPROC_PER_NODE": job["spec"]["nprocPerNode"]})  # fmt: skip
    assert (node.nnodes, node.node_rank, node.master_addr, node.master_port) == (
        2,
        1,
        "trainbox-master-0",
        23456,
    )
    assert node.nproc_per_node == 8
