"""The Kubernetes templates: Kubeflow Trainer's TrainJob (v2) and the legacy training operator's
PyTorchJob (v1), each checked against its CRD's own OpenAPI schema (vendored in tests/providers,
read 2026-11-30) the way the API server reads it, and resolved through trainbox's config with
the variables each operator sets in its pods."""

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import ValidationError

from entrypoint.settings import config
from tests.conftest import IMAGE, KNOWN, PROVIDERS, REPO

CRDS = REPO / "tests" / "providers"
# kubeflow/trainer v2.3.0 pkg/constants/constants.go: what the torch plugin sets in the trainer
# container, and refuses in spec.trainer.env (TorchRunReservedEnvNames).
TORCH_RESERVED = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                  "PET_MASTER_PORT"}  # fmt: skip
# The labels NVIDIA's GPU feature discovery puts on GPU nodes (NVIDIA/k8s-device-plugin v0.20.0,
# internal/lm/nvml.go, cuda.driver.major being its deprecated twin, and resource.go), the
# driver each image's CUDA needs (NVIDIA's CUDA compatibility guide: CUDA 12.x needs >= 525,
# 13.x >= 580), and the first compute capability major it has no kernels for (cu126: Blackwell).
DRIVER_LABEL = "nvidia.com/cuda.driver-version.major"
CARD_LABEL = "nvidia.com/gpu.compute.major"
MIN_DRIVER = {"126": 525, "130": 580}
NO_KERNELS = {"126": 10}


def _properties(validator, properties, instance, schema) -> Iterator[ValidationError]:
    """A structural schema's object keeps only its declared fields: the API server prunes the
    others, and kubectl's default (strict) field validation refuses them."""
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, schema
    )
    if not validator.is_type(instance, "object") or "additionalProperties" in schema:
        return
    if not schema.get("x-kubernetes-preserve-unknown-fields"):
        for field in sorted(instance.keys() - properties.keys()):
            yield ValidationError(f"unknown field {field!r}")


def _list_type(validator, kind, instance, schema) -> Iterator[ValidationError]:
    """``x-kubernetes-list-type``: a map's items are unique by their keys, a set's items are."""
    if not validator.is_type(instance, "array"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen = []
    for item in instance:
        key = tuple(item.get(k) for k in keys) if kind == "map" else item
        if kind in ("map", "set") and key in seen:
            yield ValidationError(f"duplicate entry {key!r} in a list of type {kind}")
        seen.append(key)


# OpenAPI v3's keywords are JSON Schema's; int-or-string is an anyOf in the schema itself, and
# formats (int32, int64...) are not asserted. The other x-kubernetes-* keywords do not validate
# (embedded resources, map types) or are CEL rules, which no Python package here evaluates.
KubeValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"properties": _properties, "x-kubernetes-list-type": _list_type},
)


def crd(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / name).read_text())


def schema_of(definition: dict[str, Any]) -> dict[str, Any]:
    [version] = [v for v in definition["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]


def errors(schema: dict[str, Any], obj: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in KubeValidator(schema).iter_errors(obj)]


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The sub-schema at a dotted path: ``[]`` for a list's items, ``*`` for a map's values."""
    for part in path.split("."):
        schema = {"[]": schema.get("items"), "*": schema.get("additionalProperties")}.get(
            part
        ) or schema["properties"][part]
    return schema


def documents(name: str) -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all((PROVIDERS / name).read_text()):
        by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def quantity(value: str | int) -> float:
    """A Kubernetes resource quantity in bytes (the binary and decimal suffixes)."""
    number, suffix = re.fullmatch(r"([0-9.]+)([kMGTPE]|[KMGTPE]i)?", str(value)).groups()
    if not suffix:
        return float(number)
    base = 1024 if suffix.endswith("i") else 1000
    return float(number) * base ** ("KMGTPE".index(suffix[0].upper()) + 1)


def check_pod(pod: dict[str, Any], container: dict[str, Any], image: str) -> None:
    """What every trainbox pod needs, in either API: the grace period, the driver, the volumes."""
    assert pod["terminationGracePeriodSeconds"] >= config.Config.stop_grace + 10
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    rules = {rule["key"]: rule for rule in term["matchExpressions"]}
    cuda = re.search(r"-cu(\d+)$", image)[1]
    assert rules.pop(DRIVER_LABEL) == {  # Gt: at least MIN_DRIVER
        "key": DRIVER_LABEL, "operator": "Gt", "values": [str(MIN_DRIVER[cuda] - 1)]
    }  # fmt: skip
    if cuda in NO_KERNELS:
        assert rules.pop(CARD_LABEL) == {
            "key": CARD_LABEL, "operator": "Lt", "values": [str(NO_KERNELS[cuda])]
        }  # fmt: skip
    # The image is amd64 only; GH200 nodes (arm64) would pass the card's rule. The node label
    # is the kubelet's own (kubernetes.io/docs, reference/labels-annotations-taints).
    assert rules.pop("kubernetes.io/arch") == {
        "key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]
    }  # fmt: skip
    assert rules == {}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    by_path = {path: volumes[name] for name, path in mounts.items()}
    workspace = by_path["/workspace"]  # a claim, never an emptyDir
    assert "persistentVolumeClaim" in workspace or "ephemeral" in workspace
    assert by_path["/dev/shm"]["emptyDir"]["medium"] == "Memory"
    requests = container["resources"]["requests"]
    for volume in volumes.values():
        if "emptyDir" not in volume:
            continue
        # Where an emptyDir remains: the pod asks for the node's disk (the container's layer and
        # logs, and a disk-backed emptyDir) and, for a memory-backed one, its size in memory.
        assert quantity(requests["ephemeral-storage"]) > 0
        limit = quantity(volume["emptyDir"]["sizeLimit"])
        if volume["emptyDir"].get("medium") == "Memory":
            assert quantity(requests["memory"]) >= limit
        else:
            assert quantity(requests["ephemeral-storage"]) >= limit


def check_env(env: list[dict[str, Any]]) -> dict[str, str]:
    named = {e["name"]: e for e in env}
    assert set(named) <= KNOWN and not set(named) & TORCH_RESERVED
    assert named["HF_TOKEN"]["valueFrom"]["secretKeyRef"]  # from a secret, never a value
    assert "value" not in named["HF_TOKEN"]
    settings = {k: e["value"] for k, e in named.items() if "value" in e}
    config.load(settings)  # the settings are valid
    return settings


def test_trainjob_is_valid_for_the_trainer_crd() -> None:
    definition = crd("kubeflow-trainjob-crd.yaml")
    schema = schema_of(definition)
    [job] = documents("kubernetes-trainjob.yaml")["TrainJob"]
    group, [version] = definition["spec"]["group"], definition["spec"]["versions"]
    assert (job["apiVersion"], job["kind"]) == (
        f"{group}/{version['name']}",
        definition["spec"]["names"]["kind"],
    )
    assert not errors(schema, job)
    # The CRD's own CEL rules on the object itself (checked by hand: no CEL evaluator here).
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    [pattern] = [re.search(r"matches\('(.+)'\)", r)[1] for r in rules if ".matches(" in r]
    assert re.fullmatch(pattern, job["metadata"]["name"]) and len(job["metadata"]["name"]) <= 63

    # The schema can fail: a misspelled field, a field PodSpec has but a runtime patch may not
    # set, a wrong type, a duplicate in a list keyed by name.
    bad = copy.deepcopy(job)
    bad["spec"]["trainer"]["numNode"] = bad["spec"]["trainer"].pop("numNodes")
    assert errors(schema, bad) == ["['spec', 'trainer']: unknown field 'numNode'"]
    bad = copy.deepcopy(job)
    [patch] = bad["spec"]["runtimePatches"]
    [replicated] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    replicated["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert any("unknown field 'restartPolicy'" in e for e in errors(schema, bad))
    bad = copy.deepcopy(job)
    bad["spec"]["trainer"]["env"][0]["value"] = 100
    assert any("is not of type 'string'" in e for e in errors(schema, bad))
    bad["spec"]["trainer"]["env"][0]["value"] = "100"
    bad["spec"]["trainer"]["env"].append(bad["spec"]["trainer"]["env"][0])
    assert any("duplicate entry" in e for e in errors(schema, bad))


def test_trainjob_runs_two_nodes_of_the_image_on_their_own_claims() -> None:
    name_of = documents("kubernetes-trainjob.yaml")
    [job] = name_of["TrainJob"]
    assert set(name_of) == {"TrainJob"}  # every node's claim comes from its own pod
    spec = job["spec"]
    # kubeflow/trainer v2.3.0 manifests/base/runtimes/torch_distributed.yaml: the runtime's one
    # replicated job and its trainer container are both named `node`.
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    assert spec["runtimeRef"].get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime"
    trainer = spec["trainer"]
    assert IMAGE.match(trainer["image"]) and trainer["args"] == ["run"]
    assert "command" not in trainer  # the image's entrypoint: tini, then trainbox
    assert trainer["numNodes"] == 2
    settings = check_env(trainer["env"])
    [patch] = spec["runtimePatches"]
    # The Trainer's webhook: a manager is a domain-prefixed path (IsDomainPrefixedPath).
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9/._~-]+", patch["manager"])
    [replicated] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    pod = replicated["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["name"] == "node" and "env" not in container  # env: spec.trainer's only
    check_pod(pod, {**container, "resources": trainer["resourcesPerNode"]}, trainer["image"])
    workspace = next(v for v in pod["volumes"] if v["name"] == "workspace")
    claim = workspace["ephemeral"]["volumeClaimTemplate"]["spec"]  # one claim per pod
    assert claim["accessModes"] == ["ReadWriteOnce"] and quantity(
        claim["resources"]["requests"]["storage"]
    ) >= quantity("100Gi")
    # What the torch plugin sets in the second node's pod (PET_NODE_RANK: its Job completion
    # index; the master is the first pod of the JobSet's headless service).
    name = job["metadata"]["name"]
    node = config.load({**settings, "PET_NNODES": str(trainer["numNodes"]),
                        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
                        "PET_NODE_RANK": "1", "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
                        "PET_MASTER_PORT": "29500"})  # fmt: skip
    assert (node.nnodes, node.node_rank, node.master_addr, node.master_port) == (
        2,
        1,
        "trainbox-node-0-0.trainbox",
        29500,
    )
    assert node.nproc_per_node == 8


def test_pytorchjob_is_valid_for_the_training_operator_crd() -> None:
    definition = crd("kubeflow-pytorchjob-crd.yaml")
    schema = schema_of(definition)
    by_kind = documents("kubernetes-pytorchjob.yaml")
    [job] = by_kind["PyTorchJob"]
    group, [version] = definition["spec"]["group"], definition["spec"]["versions"]
    assert (job["apiVersion"], job["kind"]) == (
        f"{group}/{version['name']}",
        definition["spec"]["names"]["kind"],
    )
    assert not errors(schema, job)
    # The claims, against the PersistentVolumeClaimSpec the same CRD embeds (core/v1).
    claim_spec = at(
        schema,
        "spec.pytorchReplicaSpecs.*.template.spec.volumes.[].ephemeral.volumeClaimTemplate.spec",
    )
    for claim in by_kind["PersistentVolumeClaim"]:
        assert claim["apiVersion"] == "v1" and not errors(claim_spec, claim["spec"])
    assert errors(claim_spec, {**claim["spec"], "accessMode": ["ReadWriteOnce"]})
    # The schema can fail: nprocPerNode is a string there, and a misspelled field.
    assert any("is not of type 'string'" in e for e in errors(schema, {**job, "spec": {
        **job["spec"], "nprocPerNode": 8}}))  # fmt: skip
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["restartpolicy"] = "Never"
    assert errors(schema, bad) == [
        "['spec', 'pytorchReplicaSpecs', 'Worker']: unknown field 'restartpolicy'"
    ]


def test_kubernetes_pytorchjob_runs_two_nodes_of_the_image() -> None:
    by_kind = documents("kubernetes-pytorchjob.yaml")
    [job] = by_kind["PyTorchJob"]
    claims = {c["metadata"]["name"]: c["spec"] for c in by_kind["PersistentVolumeClaim"]}
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    claimed = []
    for role in ("Master", "Worker"):
        pod = replicas[role]["template"]["spec"]
        assert replicas[role]["restartPolicy"] == "Never"
        [container] = pod["containers"]
        assert container["name"] == "pytorch"  # the operator injects its variables there
        assert IMAGE.match(container["image"]) and container["args"] == ["run"]
        settings = check_env(container["env"])
        assert {"/workspace", "/dev/shm"} <= {m["mountPath"] for m in container["volumeMounts"]}
        check_pod(pod, container, container["image"])
        [workspace] = [v for v in pod["volumes"] if v["name"] == "workspace"]
        claimed.append(workspace["persistentVolumeClaim"]["claimName"])
    # A claim per replica, each in the file: two nodes never share a ReadWriteOnce volume.
    assert len(set(claimed)) == 2 and set(claimed) == set(claims)
    for claim in claims.values():
        assert claim["accessModes"] == ["ReadWriteOnce"]
        assert quantity(claim["resources"]["requests"]["storage"]) >= quantity("100Gi")
    # What the training operator (v1.9.4, pkg/controller.v1/pytorch) sets in the Worker pod:
    # its node rank as RANK and PET_NODE_RANK, WORLD_SIZE = replicas x nprocPerNode.
    node = config.load({**settings, "PET_NNODES": "2", "RANK": "1", "PET_NODE_RANK": "1",
                        "WORLD_SIZE": "16", "MASTER_ADDR": "trainbox-master-0",
                        "MASTER_PORT": "23456", "PET_MASTER_ADDR": "trainbox-master-0",
                        "PET_MASTER_PORT": "23456",
                        "PET_NPROC_PER_NODE": job["spec"]["nprocPerNode"]})  # fmt: skip
    assert (node.nnodes, node.node_rank, node.master_addr, node.master_port) == (
        2,
        1,
        "trainbox-master-0",
        23456,
    )
    assert node.nproc_per_node == 8
    # Before v1.7.0 the operator set only RANK for the node rank: trainbox reads it too.
    older = config.load({**settings, "PET_NNODES": "2", "RANK": "1",
                         "MASTER_ADDR": "trainbox-master-0", "MASTER_PORT": "23456"})  # fmt: skip
    assert older.node_rank == 1


def test_the_kubernetes_templates_run_the_image_the_others_run() -> None:
    def images(path: Path) -> set[str]:
        return set(re.findall(r"ghcr\.io/[\w.-]+/trainbox:[\w.-]+", path.read_text()))

    kubernetes = [PROVIDERS / "kubernetes-trainjob.yaml", PROVIDERS / "kubernetes-pytorchjob.yaml"]
    others = [p for p in PROVIDERS.iterdir() if p not in kubernetes]
    [image] = set().union(*map(images, kubernetes))
    assert IMAGE.match(image) and all(images(p) == {image} for p in kubernetes)
    assert image in set().union(*map(images, others))
