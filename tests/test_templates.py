"""The provider templates in configs/providers: each parsed (with the provider's own library
where it installs offline, else against its documented schema) and checked to run this
image, with settings trainbox knows."""

import json
import os
import re
import shlex
import subprocess
import sys

import jsonschema
import pytest
import yaml

from entrypoint import __version__
from entrypoint.preflight.gpu import FLAVOURS
from entrypoint.settings import config
from tests.conftest import IMAGE, KNOWN, PROVIDERS, REPO
from tests.providers import vastai_query as vast_query

PLATFORMS = REPO / "docs" / "platforms.md"  # the templates, each explained
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
    # The host filters (driver and card) are checked against docs/platforms.md's table; the
    # architecture here: vast.ai rents arm64 hosts (GH200) that pass the card's filter, and the
    # image is amd64. Each filter is one vast.ai's own search builds (`vastai search offers`).
    assert set(spec["extra_filters"]) == {"cuda_max_good", "compute_cap", "cpu_arch"}
    assert set(spec["extra_filters"]) <= vast_query.offers_fields
    assert (
        spec["extra_filters"]["cpu_arch"]
        == vast_query.parse_query(
            "cpu_arch=amd64", {}, vast_query.offers_fields, vast_query.offers_alias
        )["cpu_arch"]
    )
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
# Blackwell (entrypoint/preflight/gpu.py FLAVOURS; SkyPilot's AWS and GCP catalogs).
NO_KERNELS = {"K80", "B200", "B300", "GB200", "RTXPRO6000"}
# The clouds whose GPU hosts run a docker image with its own entrypoint; RunPod cannot
# (SkyPilot's docker-containers guide). Read 2026-11-30.
SKY_CLOUDS = {"AWS", "GCP"}


SKYPILOT = REPO / ".venv" / "skypilot"


def sky_check(template: str, *command: str) -> dict:
    """The template as SkyPilot reads it (tests/skypilot/check.py), with the SkyPilot that
    tests/run installs apart: SkyPilot >= 0.10 needs click<8.2, the image pins 8.5.1."""
    if not SKYPILOT.is_dir():
        pytest.fail(f"SkyPilot is not in {SKYPILOT}: tests/run installs it there")
    env = {**os.environ, "PYTHONPATH": str(SKYPILOT), "HF_TOKEN": "hf_from_the_shell"}
    done = subprocess.run([sys.executable, str(REPO / "tests" / "skypilot" / "check.py"),
                           template, *command], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["line"] in PLATFORMS.read_text()  # the docs give the same line
    assert found["entrypoint"] == [f"configs/providers/{template}"]
    return found


def _sky_task(found: dict, *, autostop: bool = True) -> dict[str, str]:
    """What every SkyPilot template must be: the token a secret (redacted, never in the file,
    the launch refused without it), the teardown in the file, a STOP_GRACE that fits SkyPilot's
    30 s from SIGTERM to SIGKILL, and each alternative on a named cloud (none would let
    SkyPilot pick any, RunPod included) that runs the image on a GPU it has kernels for. The
    task's settings, valid for trainbox."""
    assert tuple(int(n) for n in found["version"].split(".")[:2]) >= (0, 10)
    assert found["secret_names"] == ["HF_TOKEN"] and found["secrets_from_line"] == ["HF_TOKEN"]
    assert "HF_TOKEN" not in found["envs"] and "HF_TOKEN" not in found["env_from_line"]
    assert found["token_redacted"] and "HF_TOKEN" in found["refused_without"]
    assert int(found["envs"]["STOP_GRACE"]) + 5 <= 30  # sky/skylet/subprocess_daemon.py
    for resources in found["resources"]:
        assert IMAGE.match(resources["image"].removeprefix("docker:"))
        assert resources["accelerators"] and not set(resources["accelerators"]) & NO_KERNELS
        assert resources["cloud"] in SKY_CLOUDS, "pin the clouds: SkyPilot would also pick RunPod"
        assert resources["features_supported"]
        if autostop:
            assert resources["autostop"] == {"idle_minutes": 1, "down": True}
    assert "trainbox run" in found["run"]
    assert set(found["envs"]) <= KNOWN
    return found["envs"]


def test_skypilot_task_is_valid_for_skypilot() -> None:
    found = sky_check("skypilot.yaml", "launch")
    config.load(_sky_task(found))
    assert found["num_nodes"] == 1


def test_skypilot_spot_job_recovers_on_a_new_machine_from_the_hub() -> None:
    """A managed job (`sky jobs launch`) on spot instances: after a preemption SkyPilot's
    controller launches a new machine (job_recovery), whose empty disk trainbox fills from
    OUTPUT_REPO, so SkyPilot must refuse the job without it."""
    found = sky_check("skypilot-spot.yaml", "jobs", "launch")
    settings = _sky_task(found, autostop=False)  # the controller ends the job's cluster
    assert "OUTPUT_REPO" in found["refused_without"]
    for resources in found["resources"]:
        assert resources["use_spot"]
        assert resources["job_recovery"]["max_restarts_on_errors"] == 0  # trainbox's errors
    assert config.load(settings).output_repo == "my-org/my-run"


def load_modal_app(monkeypatch: pytest.MonkeyPatch) -> tuple[object, dict]:
    """configs/providers/modal_app.py, built by Modal's own objects (lazy: no network, no
    account), and what it asked Modal for: the volume and the function's options, recorded on
    the way to Modal's own calls, which check them."""
    import importlib.util

    import modal

    asked: dict = {}
    volume, function = modal.Volume.from_name, modal.App.function

    def from_name(*args, **kwargs):
        asked["volume"] = kwargs
        return volume(*args, **kwargs)

    def app_function(self, *args, **kwargs):
        asked["function"] = kwargs
        return function(self, *args, **kwargs)

    monkeypatch.setattr(modal.Volume, "from_name", from_name)
    monkeypatch.setattr(modal.App, "function", app_function)
    spec = importlib.util.spec_from_file_location("modal_app", PROVIDERS / "modal_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, asked


def test_modal_app_builds_with_modal(monkeypatch: pytest.MonkeyPatch) -> None:
    import modal

    module, asked = load_modal_app(monkeypatch)
    assert module.app.name == "trainbox"
    assert IMAGE.match(module.IMAGE)
    options = asked["function"]
    assert options["gpu"] == "H100"
    assert module.TIMEOUT <= 24 * 60 * 60  # Modal's documented maximum
    assert int(module.SETTINGS["MAX_RUNTIME"]) + int(module.SETTINGS["STOP_GRACE"]) < module.TIMEOUT
    # Modal's SIGKILL comes 30 s after its SIGINT: the final upload and the commit fit before.
    assert int(module.SETTINGS["STOP_GRACE"]) + 10 <= module.GRACE == 30
    assert asked["volume"]["version"] == 2  # no 500,000-inode limit
    # A run longer than Modal's timeout goes on in a fresh container (long-training example).
    assert isinstance(options["retries"], modal.Retries) and options["single_use_containers"]
    assert set(module.SETTINGS) <= KNOWN
    config.load(module.SETTINGS)
    # The command the docstring and the docs give, as Modal's own CLI reads it: --detach,
    # so that a 24-hour run survives the laptop that launched it.
    from modal.cli.run import run

    line = re.search(r"modal run [^`\n]*", module.__doc__)[0]
    assert line in PLATFORMS.read_text()
    assert run.make_context("modal run", shlex.split(line)[2:]).params["detach"]


MODAL_FUNCTION = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("modal_app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.workspace.commit = lambda: None  # no Modal account: the volume is a folder here
module.train.local()  # Modal's own way to call the function in this process
"""


def test_modals_stop_reaches_trainbox_as_sigterm_with_time_for_the_final_upload(
    hub, tmp_path
) -> None:
    """The template's function, called as Modal calls it, with the real trainbox training the
    demo: Modal's stop (SIGINT to the function's process, SIGKILL 30 s later, as
    modal/exception.py simulates a preemption) ends in trainbox's final upload and the
    function's KeyboardInterrupt (no result, so Modal runs a preempted input again)."""
    import signal
    import time

    from tests.standins.hub import GOOD_TOKEN

    module_settings = re.search(r'"STOP_GRACE": "(\d+)"', (PROVIDERS / "modal_app.py").read_text())
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
           "WORKSPACE": str(tmp_path), "DEVICE": "cpu", "EPOCHS": "50", "MONITOR": "false",
           "HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN, "OUTPUT_REPO": "org/weights",
           "UPLOAD_INTERVAL": "1", "DATA": "", "DATASET_REPO": "", "TRAINBOX_CONFIG": "",
           "STOP_GRACE": module_settings[1]}  # fmt: skip
    command = [sys.executable, "-c", MODAL_FUNCTION, str(PROVIDERS / "modal_app.py")]
    # trainbox's programs log to stdout, the job to stderr: one stream, as in Modal's logs.
    function = subprocess.Popen(command, env=env, cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        # Stopped once an epoch is on the Hub: training is under way.
        while "run/last.pt" not in getattr(hub.repos.get("models/org/weights"), "files", {}):
            assert function.poll() is None and time.monotonic() < deadline, function.stdout.read()
            time.sleep(0.5)
        function.send_signal(signal.SIGINT)  # Modal's stop
        try:
            function.wait(timeout=30)
        except subprocess.TimeoutExpired:
            function.kill()  # Modal's SIGKILL
            pytest.fail(
                "the function outlived Modal's 30 s grace: " + function.stdout.read()[-3000:]
            )
    finally:
        function.kill()
    log = function.stdout.read()
    assert "SIGTERM received: stopping training" in log, log[-3000:]
    assert "final upload done" in log, log[-3000:]
    assert log.rstrip().endswith("KeyboardInterrupt"), log[-3000:]


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
    # Beam's runner on an interpreter of its own: the image's venv keeps its pins (test_beam).
    assert str(function.image.python_version) == "python3.12"
    assert int(settings["STOP_GRACE"]) + 5 <= 30  # beta9's worker.terminationGracePeriod
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
    readme = PLATFORMS.read_text()
    for template in sorted(PROVIDERS.iterdir()):
        assert f"configs/providers/{template.name}" in readme, template.name
    assert yaml.safe_load((PROVIDERS / "skypilot.yaml").read_text())["name"] == "trainbox"


def test_skypilot_two_node_task_resolves_each_node() -> None:
    found = sky_check("skypilot-multinode.yaml", "launch")  # MULTI_NODE checked there too
    settings = _sky_task(found)
    assert found["num_nodes"] == 2
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
    """docs/platforms.md's "Which image for which machine" table: flavour -> (CUDA, driver)."""
    readme = PLATFORMS.read_text()
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
