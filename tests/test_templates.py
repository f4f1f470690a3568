"""The provider templates in configs/providers: each parsed (with the provider's own library
where it installs offline, else against its documented schema) and checked to run this
image, with settings trainbox knows."""

import copy
import json
import os
import re
import shlex
import sys
import warnings

import jsonschema
import pytest
import yaml

from entrypoint import __version__, config
from entrypoint.gpu import FLAVOURS
from tests.conftest import REPO

PROVIDERS = REPO / "configs" / "providers"
IMAGE = re.compile(rf"^ghcr\.io/[A-Za-z0-9_.-]+/trainbox:{re.escape(__version__)}-cu1[0-9]{{2}}$")
KNOWN = {key.upper() for key in config.KEYS} | {"HF_TOKEN", "HF_TOKEN_FILE"}
BEAM_CLIENT = REPO / ".venv" / "beam-client"


VAST = ("vastai.json", "vastai-blackwell.json")
RUNPOD = ("runpod.json", "runpod-blackwell.json")


@pytest.mark.parametrize("name", VAST)
def test_vastai_template_keeps_the_images_entrypoint_and_its_cuda(name: str) -> None:
    """``POST /api/v0/template/``, checked against vast.ai's own OpenAPI description (vendored
    in tests/providers, read 2026-11-30). The entrypoint (``args``) launch mode: vast.ai runs
    the image as it is, so tini and trainbox get ``docker stop``'s SIGTERM; SSH and Jupyter
    modes replace the entrypoint with vast's own (docs.vast.ai, templates: template-settings),
    and in ``args`` mode ``onstart`` would be the entrypoint (vast-cli: ``--entrypoint``)."""
    spec = json.loads((PROVIDERS / name).read_text())
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
    # Only sshd's port: the dashboard has no authentication, it is reached through SSH.
    assert [flags[i + 1] for i, f in enumerate(flags) if f == "-p"] == ["22:22"]
    assert settings["MONITOR_HOST"] == "127.0.0.1"
    config.load(settings)  # the settings are valid
    # The host filters (driver and card) are checked against the README's table below.
    assert set(spec["extra_filters"]) == {"cuda_max_good", "compute_cap"}
    assert isinstance(spec["recommended_disk_space"], int)


@pytest.mark.parametrize("name", RUNPOD)
def test_runpod_template_is_a_valid_v2_create_template_request(name: str) -> None:
    """REST v2 ``POST /v2/templates``, checked against ``CreateTemplateRequest`` in RunPod's own
    OpenAPI document (runpod/docs api-reference-v2/openapi.json, vendored in tests/providers;
    read 2026-11-30): v1 (``imageName``, ``volumeInGb``, ``readme``...) is retired."""
    spec = json.loads((PROVIDERS / name).read_text())
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


# SkyPilot's GPU names for cards the templates' cu126 image has no kernels for: Kepler and
# Blackwell (entrypoint/gpu.py FLAVOURS; SkyPilot's AWS and GCP catalogs).
NO_KERNELS = {"K80", "B200", "B300", "GB200", "RTXPRO6000"}
# The clouds whose GPU hosts run a docker image with its own entrypoint; RunPod cannot
# (SkyPilot's docker-containers guide). Read 2026-11-30.
SKY_CLOUDS = {"AWS", "GCP"}


def _sky_launch(template: str, *command: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The launch line the template's first comment gives (and the README), parsed by
    SkyPilot's own CLI as typed: `--env HF_TOKEN` takes the token from the shell."""
    from sky import cli

    monkeypatch.setenv("HF_TOKEN", "hf_from_the_shell")
    line = re.search(rf"sky {' '.join(command)} [^`\n]*", (PROVIDERS / template).read_text())[0]
    assert line.strip() in (REPO / "README.md").read_text()
    click_command = cli.cli
    for name in command:
        click_command = click_command.commands[name]
    params = click_command.make_context("sky", shlex.split(line)[1 + len(command) :]).params
    assert params["entrypoint"] == (f"configs/providers/{template}",)
    return params


def _sky_token_and_teardown(spec: dict, launch: dict, managed: bool = False) -> None:
    """HF_TOKEN through SkyPilot's secrets and the teardown in the file where the SkyPilot
    the tests use has them (`secrets:` and resources.autostop came in 0.10); otherwise the
    token is required at launch, never written, and the launch line asks for autodown. A
    managed job needs neither: its controller terminates the cluster when the job ends."""
    from sky.utils import schemas

    if "secrets" in schemas.get_task_schema()["properties"]:
        assert "HF_TOKEN" in spec["secrets"] and "HF_TOKEN" not in spec["envs"]
    else:
        assert spec["envs"]["HF_TOKEN"] is None and "HF_TOKEN" in dict(launch["env"])
    if managed:
        return
    if "autostop" in schemas.get_resources_schema()["properties"]:
        assert spec["resources"]["autostop"]["down"] is True
    else:  # autodown: torn down 1 idle minute after the job ends (sky/execution.py)
        assert launch["down"] and launch["idle_minutes_to_autostop"] is None


def _sky_clouds(task, *features) -> set[str]:
    """Each alternative the task allows runs the image on a GPU it has kernels and a driver for,
    on a named cloud (none would let SkyPilot pick any, RunPod included) that SkyPilot says
    supports a docker image and `features`. Returns the clouds."""
    from sky.clouds import CloudImplementationFeatures

    clouds = set()
    for resources in task.resources:
        assert IMAGE.match(resources.image_id[None].removeprefix("docker:"))
        assert resources.accelerators and not set(resources.accelerators) & NO_KERNELS
        assert resources.cloud is not None, "pin the clouds: SkyPilot would also pick RunPod"
        resources.cloud.check_features_are_supported(
            resources, {CloudImplementationFeatures.DOCKER_IMAGE, *features}
        )
        clouds.add(str(resources.cloud))
    return clouds


def test_skypilot_task_is_valid_for_skypilot(monkeypatch: pytest.MonkeyPatch) -> None:
    import sky
    from sky.clouds import CloudImplementationFeatures as Feature

    spec = yaml.safe_load((PROVIDERS / "skypilot.yaml").read_text())
    with pytest.raises(ValueError, match="HF_TOKEN"):  # the token must come at launch
        sky.Task.from_yaml_config(copy.deepcopy(spec))
    launch = _sky_launch("skypilot.yaml", "launch", monkeypatch=monkeypatch)
    _sky_token_and_teardown(spec, launch)
    # SkyPilot's own schema check, with what the launch line passes.
    task = sky.Task.from_yaml_config(spec, env_overrides=list(launch["env"]))
    assert task.envs["HF_TOKEN"] == "hf_from_the_shell"
    assert _sky_clouds(task, Feature.AUTODOWN) <= SKY_CLOUDS
    assert set(task.envs) <= KNOWN
    assert "trainbox run" in task.run
    config.load({k: v for k, v in task.envs.items() if k != "HF_TOKEN"})


def test_skypilot_spot_job_recovers_on_a_new_machine_from_the_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A managed job (`sky jobs launch`) on spot instances: after a preemption SkyPilot's
    controller launches a new machine (job_recovery), whose empty disk trainbox fills from
    OUTPUT_REPO, so SkyPilot must refuse the job without it."""
    from sky.clouds import CloudImplementationFeatures as Feature
    from sky.utils import dag_utils, registry

    path = str(PROVIDERS / "skypilot-spot.yaml")
    spec = yaml.safe_load((PROVIDERS / "skypilot-spot.yaml").read_text())
    launch = _sky_launch("skypilot-spot.yaml", "jobs", "launch", monkeypatch=monkeypatch)
    _sky_token_and_teardown(spec, launch, managed=True)
    env = dict(launch["env"])
    without_repo = [(k, v) for k, v in env.items() if k != "OUTPUT_REPO"]
    with pytest.raises(ValueError, match="OUTPUT_REPO"):
        dag_utils.load_chain_dag_from_yaml(path, env_overrides=without_repo)
    # What `sky jobs launch` does to the file before submitting it (sky/jobs/server/core.py),
    # less dag.validate(), which downloads SkyPilot's GPU catalog.
    dag = dag_utils.load_chain_dag_from_yaml(path, env_overrides=list(env.items()))
    dag_utils.maybe_infer_and_fill_dag_and_task_names(dag)
    dag_utils.fill_default_config_in_dag_for_job_launch(dag)
    [task] = dag.tasks
    assert _sky_clouds(task, Feature.SPOT_INSTANCE) <= SKY_CLOUDS
    for resources in task.resources:
        assert resources.use_spot
        recovery = resources.job_recovery
        registry.JOBS_RECOVERY_STRATEGY_REGISTRY.from_str(recovery["strategy"])  # a real one
        assert recovery["max_restarts_on_errors"] == 0  # trainbox's own errors: not retried
    assert "trainbox run" in task.run
    settings = {k: v for k, v in task.envs.items() if k != "HF_TOKEN"}
    assert set(settings) <= KNOWN
    assert config.load(settings).output_repo == env["OUTPUT_REPO"]


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
    # The command the docstring and the README give, as Modal's own CLI reads it: --detach,
    # so that a 24-hour run survives the laptop that launched it.
    from modal.cli.run import run

    line = re.search(r"modal run [^`\n]*", module.__doc__)[0]
    assert line in (REPO / "README.md").read_text()
    assert run.make_context("modal run", shlex.split(line)[2:]).params["detach"]


def test_beam_app_builds_with_beam(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import importlib.util

    # Beam's objects build with a token and no account; its channel, which they open, points
    # at a closed local port and no config file is read (beta9's config.py reads these).
    monkeypatch.setenv("BEAM_TOKEN", "offline-test")
    monkeypatch.setenv("GATEWAY_HOST", "127.0.0.1")
    monkeypatch.setenv("GATEWAY_PORT", "9")
    monkeypatch.setenv("CONFIG_PATH", str(tmp_path / "beam.ini"))
    # beam-client lives in a folder of its own (tests/run puts it there): its beta9 pins
    # rich<15 and the image pins rich 15, so it cannot share the venv. Appended to the path,
    # the venv's own packages still win where both have one.
    if not BEAM_CLIENT.is_dir():
        pytest.fail(f"beam-client is not in {BEAM_CLIENT}: tests/run installs it there")
    monkeypatch.setattr("sys.path", [*sys.path, str(BEAM_CLIENT)])
    import beam
    from beta9.type import GpuType

    spec = importlib.util.spec_from_file_location("beam_app", PROVIDERS / "beam_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = module.train.parent
    assert isinstance(function, beam.function)
    assert IMAGE.match(function.image.base_image)
    assert GpuType(function.gpu) != GpuType.NoGPU and function.gpu_count >= 1
    [volume] = function.volumes
    assert isinstance(volume, beam.Volume) and volume.mount_path == "/workspace"
    assert [secret.name for secret in function.secrets] == ["HF_TOKEN"]
    settings = dict(pair.split("=", 1) for pair in function.env)
    assert set(settings) <= KNOWN and "HF_TOKEN" not in settings
    timeout = function.task_policy.timeout  # Beam's default would be one hour
    assert int(settings["MAX_RUNTIME"]) + int(settings["STOP_GRACE"]) < timeout
    assert function.headless  # it goes on when the laptop that started it disconnects
    config.load(settings)


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
    for name in VAST:
        vast = json.loads((PROVIDERS / name).read_text())
        images.add(f"{vast['image']}:{vast['tag']}")
    # The default flavour everywhere; the -blackwell templates are the one exception.
    blackwell = {i for i in images if i.endswith("-cu130")}
    assert len(images - blackwell) == 1 and len(blackwell) == 1, images
    for name in os.listdir(PROVIDERS):
        blackwell_image = f"{__version__}-cu130" in (PROVIDERS / name).read_text()
        assert blackwell_image == ("blackwell" in name), name
    readme = (REPO / "README.md").read_text()
    for template in sorted(PROVIDERS.iterdir()):
        assert f"configs/providers/{template.name}" in readme, template.name
    assert yaml.safe_load((PROVIDERS / "skypilot.yaml").read_text())["name"] == "trainbox"


def test_skypilot_two_node_task_resolves_each_node(monkeypatch: pytest.MonkeyPatch) -> None:
    import sky
    from sky.clouds import CloudImplementationFeatures as Feature

    spec = yaml.safe_load((PROVIDERS / "skypilot-multinode.yaml").read_text())
    launch = _sky_launch("skypilot-multinode.yaml", "launch", monkeypatch=monkeypatch)
    _sky_token_and_teardown(spec, launch)
    task = sky.Task.from_yaml_config(spec, env_overrides=list(launch["env"]))
    assert task.num_nodes == 2 and "trainbox run" in task.run
    assert _sky_clouds(task, Feature.AUTODOWN, Feature.MULTI_NODE) <= SKY_CLOUDS
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


def which_image() -> dict[str, tuple[tuple[int, int], int]]:
    """The README's "Which image for which machine" table: flavour -> (CUDA, lowest driver)."""
    readme = (REPO / "README.md").read_text()
    table = readme.split("### Which image for which machine", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (cu\d+)[^|]*\| [^|]*`(\d+)\.(\d+)` \| >= (\d+)", table, re.M)
    return {name: ((int(major), int(minor)), int(driver)) for name, major, minor, driver in rows}


def test_each_template_lands_only_on_hosts_the_readme_says_run_its_image() -> None:
    table = which_image()
    assert set(table) == {"cu126", "cu130", "cu132"}
    assert table["cu130"] == ((13, 0), 580) and table["cu126"] == ((12, 6), 525)
    archs = {f.name: sorted(f.archs) for f in FLAVOURS}

    def needs(image: str) -> tuple[str, tuple[int, int], int]:
        flavour = re.search(r"-(cu\d+)$", image)[1]
        return (flavour, *table[flavour])

    def cards(flavour: str) -> tuple[int, int]:
        """Compute capabilities (x100, as vast.ai counts) the flavour has kernels for."""
        return archs[flavour][0] * 10, (archs[flavour][-1] // 10 + 1) * 100

    for name in VAST:  # the driver's CUDA, and the card: cu126 has no Blackwell kernels
        vast = json.loads((PROVIDERS / name).read_text())
        (flavour, cuda, _driver) = needs(vast["tag"])
        filters = vast["extra_filters"]
        assert filters["cuda_max_good"] == {"gte": float(f"{cuda[0]}.{cuda[1]}")}
        lowest, above = cards(flavour)
        assert filters["compute_cap"].get("gte", 0) >= lowest, name
        assert filters["compute_cap"].get("lt", 10**4) <= above, name
        assert filters["compute_cap"] != {"gte": 0}

    for name in RUNPOD:  # RunPod filters the host's CUDA; the card is chosen at deploy time
        runpod = json.loads((PROVIDERS / name).read_text())
        (flavour, cuda, _driver) = needs(runpod["image"])
        allowed = [tuple(int(n) for n in v.split(".")) for v in runpod["allowedCudaVersions"]]
        assert allowed == sorted(allowed) and allowed[0] == cuda and allowed[-1] == (13, 2)
        assert ("Blackwell" in runpod["name"]) == (flavour == "cu130"), name

    for name in ("kubernetes-pytorchjob.yaml", "kubernetes-trainjob.yaml"):
        text = (PROVIDERS / name).read_text()
        (flavour, cuda, driver) = needs(re.search(r"image: (\S+)", text)[1])
        rule = re.search(
            r"key: nvidia\.com/cuda\.driver-version\.major\s+operator: Gt\s+values: \[\"(\d+)\"\]",
            text,
        )
        assert rule and int(rule[1]) == driver - 1, name
        card = re.search(
            r"key: nvidia\.com/gpu\.compute\.major\s+operator: Lt\s+values: \[\"(\d+)\"\]", text
        )
        assert card and int(card[1]) == cards(flavour)[1] // 100, name
