"""Typed settings, the one source of truth for how a run is configured.

Layers, lowest first: the defaults below; ``configs/demo.yaml`` when no dataset is
configured (the built-in demo); the YAML file named by ``TRAINBOX_CONFIG``; environment
variables (each setting's name in upper case; an empty value counts as unset).
Every value is parsed and checked before anything else happens, and a bad one raises
a ``TrainboxError`` whose message names the key and the values it accepts.
"""

import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import launchers
from entrypoint.settings.launchers import Volume

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
DEMO_PRESET = CONFIG_DIR / "demo.yaml"
WORKSPACE = Path("/workspace")

Parser = Callable[[Any], Any]
# How a dataset repo can be published (entrypoint/dataset/forms.py tells them apart), and the
# box layouts a published dataset may use (entrypoint/dataset/published/boxes.py).
FORMS = ("trainbox", "parquet", "yolo", "coco", "imagefolder", "archive")
BOX_FORMATS = ("xywh", "xyxy", "xywhn", "xyxyn", "cxcywhn")


def _int_at_least(low: int, *, also: int | None = None) -> Parser:
    accepted = f"a whole number >= {low}" + (f", or {also}" if also is not None else "")

    def parse(raw: Any) -> int:
        if isinstance(raw, bool) or not re.fullmatch(r"[+-]?\d+", str(raw).strip()):
            raise ValueError(f"expected {accepted}")
        value = int(str(raw).strip())
        if value < low and value != also:
            raise ValueError(f"expected {accepted}")
        return value

    return parse


def _workers(raw: Any) -> int | str:
    if str(raw).strip().lower() == "auto":
        return "auto"
    try:
        return _int_at_least(0)(raw)
    except ValueError:
        raise ValueError("expected auto or a whole number >= 0") from None


def _image_size(raw: Any) -> int | tuple[int, int]:
    """A side in pixels, or height and width as LibreYOLO's CLI reads them (``480x640``,
    ``480,640``, or a YAML list); a square pair is one side, as LibreYOLO makes it."""
    side = _int_at_least(32)
    parts = raw if isinstance(raw, list | tuple) else re.split(r"[xX,]", str(raw).strip())
    if len(parts) == 1 and not isinstance(raw, list | tuple):
        return side(raw)
    try:
        height, width = (side(part) for part in parts)
    except ValueError:
        raise ValueError("expected a whole number >= 32, or HEIGHTxWIDTH such as 480x640") from None
    return height if height == width else (height, width)


def _bool(raw: Any) -> bool:
    text = str(raw).strip().lower()
    if text in {"true", "1", "yes", "on"}:
        return True
    if text in {"false", "0", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _choice(*choices: str) -> Parser:
    def parse(raw: Any) -> str:
        text = str(raw).strip().lower()
        if text not in choices:
            raise ValueError(f"expected {' or '.join(choices)}")
        return text

    return parse


def _fraction(raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value < 1:
        raise ValueError("expected a fraction between 0 and 1, such as 0.1")
    return value


def _dollars(raw: Any) -> float:
    try:
        value = float(str(raw).strip().lstrip("$"))
    except (TypeError, ValueError):
        value = -1.0
    if not 0 <= value < 1e6:
        raise ValueError("expected US dollars, such as 2.49 (`0`: none)")
    return value


def _device(raw: Any) -> str:
    text = str(raw).strip().lower().replace(" ", "")
    if text in {"auto", "cpu"} or re.fullmatch(r"\d+(,\d+)*", text):
        return text
    raise ValueError("expected auto, cpu, or GPU indices such as 0 or 0,1,2,3")


def _text(raw: Any) -> str:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("expected a string")
    return str(raw).strip()


def _name(raw: Any) -> str:
    text = _text(raw)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise ValueError("expected a folder name of letters, digits, '.', '_' or '-'")
    return text


# OpenSSH's public key types (sshd(8), AUTHORIZED_KEYS FILE FORMAT), one key per line.
_PUBLIC_KEY = re.compile(
    r"(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|"
    r"sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com) [A-Za-z0-9+/]+={0,3}( .*)?"
)


def _public_keys(raw: Any) -> str:
    keys = [line.strip() for line in _text(raw).splitlines() if line.strip()]
    if not all(_PUBLIC_KEY.fullmatch(key) for key in keys):
        raise ValueError(
            "expected OpenSSH public keys, one per line, such as the content of "
            "~/.ssh/id_ed25519.pub (never a private key)"
        )
    return "\n".join(keys)


def _formats(raw: Any) -> str:
    names = [name.strip().lower() for name in _text(raw).split(",") if name.strip()]
    if not all(re.fullmatch(r"[a-z0-9_-]+", name) for name in names):
        raise ValueError("expected export format names separated by commas, e.g. onnx,torchscript")
    return ",".join(names)


def _train_mapping(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not all(isinstance(key, str) for key in raw):
        raise ValueError("expected a mapping of LibreYOLO training options, such as lr0: 0.002")
    return dict(raw)


def _repo(raw: Any) -> str:
    text = _text(raw)
    if text and not re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        raise ValueError("expected a Hub repo as ORG/NAME")
    return text


# What NOTIFY's URLs may hear of (entrypoint/runtime/notices.py sends them).
EVENTS = ("started", "completed", "failed", "budget", "watchdog", "stopped", "billing")


def _events(raw: Any) -> str:
    names = [name.strip().lower() for name in _text(raw).split(",") if name.strip()]
    if not names or any(name not in EVENTS for name in names):
        raise ValueError(f"expected some of {', '.join(EVENTS)}, separated by commas")
    return ",".join(names)


def _license(raw: Any) -> str:
    text = _text(raw).lower()
    if text and not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", text):
        raise ValueError("expected a Hub license identifier such as apache-2.0, mit or other")
    return text


def _path(raw: Any) -> Path:
    path = Path(_text(raw))
    if not path.is_absolute():
        raise ValueError("expected an absolute path")
    return path


def setting(default: Any, parse: Parser, doc: str) -> Any:
    """A config field: its default, its parser, and its row in docs/settings.md."""
    return field(default=default, metadata={"parse": parse, "doc": doc})


@dataclass(frozen=True)
class Config:
    """Every setting of a run. Field ``x`` is YAML key ``x`` and environment variable ``X``."""

    device: str = setting(
        "auto",
        _device,
        "`auto` (the visible GPUs), `cpu`, or GPU indices such as `0` or `0,1,2,3`",
    )
    model: str = setting(
        "LibreYOLO9s.pt",
        _text,
        "LibreYOLO model: a published name, `hf://ORG/NAME/PATH.pt` (a file in a Hub model "
        "repo, e.g. an earlier run's best.pt) or a `.pt` path; fetched once while staging",
    )
    pretrained: bool = setting(
        True,
        _bool,
        "start from MODEL's published weights; `false` trains from scratch",
    )
    data: str = setting(
        "",
        _text,
        "path of a YOLO `data.yaml` in the container; empty trains the built-in demo",
    )
    dataset_repo: str = setting(
        "",
        _repo,
        "Hub dataset repo `ORG/NAME` holding the dataset as one tar or as shards; staged once",
    )
    dataset_file: str = setting(
        "",
        _text,
        "the tar, or the shard index, in DATASET_REPO; empty: `NAME.tar`, else `NAME.shards.json`",
    )
    dataset_revision: str = setting(
        "main", _text, "branch, tag or commit of DATASET_REPO (`refs/convert/parquet` works)"
    )
    dataset_format: str = setting(
        "auto",
        _choice("auto", *FORMS),
        "how DATASET_REPO is published; `auto`: decided from the repo's file list (see "
        "docs/datasets.md); set it when the repo fits several forms",
    )
    dataset_config: str = setting(
        "",
        _text,
        "the config (subset) of a parquet dataset that has several: its folder (`data` is "
        "`default`); empty: the only one",
    )
    bbox_format: str = setting(
        "auto",
        _choice("auto", *BOX_FORMATS),
        "the boxes of a parquet or COCO dataset: `xywh` (COCO, pixels), `xyxy` (Pascal VOC, "
        "pixels), `xywhn`, `xyxyn`, `cxcywhn` (normalized); `auto`: the one the values prove",
    )
    val_fraction: float = setting(
        0.1,
        _fraction,
        "share of a published dataset's train split held out for validation (seeded) when it "
        "has no validation split",
    )
    doctor: bool = setting(
        True, _bool, "check the dataset with `libreyolo doctor` before training; errors stop"
    )
    stage_checkpoint: int = setting(
        30,
        _int_at_least(0),
        "seconds between staging checkpoints: a restart resumes a cut download at the last one, "
        "not at byte 0; `0`: never",
    )
    stage_parallel: int = setting(
        4, _int_at_least(1), "shards of a sharded dataset downloaded and extracted at once"
    )
    output_repo: str = setting(
        "",
        _repo,
        "Hub model repo `ORG/NAME` (created private) that weights go to while training; empty: "
        "the run stays on the volume",
    )
    upload_interval: int = setting(
        30,
        _int_at_least(1),
        "seconds between upload cycles (each is one commit, if anything changed)",
    )
    max_commits_per_hour: int = setting(
        100,
        _int_at_least(1),
        "upload commits per hour at most (the Hub allows about 128 per repo); the final upload "
        "is never held back by it",
    )
    hub_wait: int = setting(
        300,
        _int_at_least(0),
        "seconds a step waits, retrying with backoff, for a Hub that cannot be asked (no "
        "connection, a timeout, 429, 5xx) before the run ends with exit 5; nothing is trained "
        "or committed meanwhile",
    )
    stop_grace: int = setting(
        110,
        _int_at_least(5),
        "seconds from SIGTERM (or the end of training) in which training stops and the final "
        "upload runs: the container exits by itself within it; keep it under the platform's "
        "stop grace period",
    )
    max_runtime: int = setting(
        0,
        _int_at_least(0),
        "hard limit in seconds from the container's start: stop training, final upload, exit 8; "
        "`0`: none",
    )
    stall_timeout: int = setting(
        7200,
        _int_at_least(0),
        "seconds without progress (staging bytes, a finished epoch, a train.log line) before the "
        "run is stopped, uploaded and ended with exit 9; unhealthy at half of it; keep it above "
        "your longest epoch; `0`: never",
    )
    monitor: bool = setting(True, _bool, "serve the `libreyolo monitor` dashboard")
    monitor_host: str = setting(
        "0.0.0.0",
        _text,
        "address the dashboard binds in the container; compose publishes it on the host's "
        "127.0.0.1 only",
    )
    monitor_port: int = setting(8420, _int_at_least(1), "port of the dashboard")
    ssh_public_key: str = setting(
        "",
        _public_keys,
        "public keys (one per line) that may SSH in as root, keys only; RunPod's `PUBLIC_KEY` "
        "counts too; empty: no sshd",
    )
    ssh_port: int = setting(22, _int_at_least(1), "port sshd listens on when a key is set")
    on_exit: str = setting(
        "auto",
        _choice("auto", "stop", "destroy", "none"),
        "once a start has ended for good (the run over, or a failure a restart cannot mend) "
        "and the upload is verified: `stop` or `destroy` this vast.ai instance or RunPod pod "
        "through the provider's API (after a failure at most stop); `auto`: `stop` there, "
        "`none` elsewhere; `none` leaves it running",
    )
    on_exit_dry_run: bool = setting(
        False, _bool, "log the request ON_EXIT would send instead of sending it"
    )
    on_exit_wait: int = setting(
        120,
        _int_at_least(1),
        "seconds to wait, once the provider took ON_EXIT's request, for the platform to stop "
        "this container; past them it says the stop has not come, and on RunPod (which starts "
        "an exited container again) it stays up, idle, until the machine is stopped",
    )
    price_per_hour: float = setting(
        0.0,
        _dollars,
        "what this machine costs, in USD per hour (all its GPUs, disk included): the figure of "
        "your provider's console; overrides the one read from RunPod's or vast.ai's API; `0`: "
        "read it there, elsewhere no money figures",
    )
    max_cost: float = setting(
        0.0,
        _dollars,
        "budget in USD for the whole run, across restarts: at an epoch's end, when the next "
        "epoch would pass it, stop, upload that epoch and exit 12; `0`: none",
    )
    vast_api_url: str = setting("https://console.vast.ai", _text, "vast.ai's API, for ON_EXIT")
    runpod_api_url: str = setting(
        "https://api.runpod.io", _text, "RunPod's API (REST v2 under `/v2`), for ON_EXIT"
    )
    profile_steps: int = setting(
        0,
        _int_at_least(0),
        "before training, profile this many steps with libreyolo's profiler and record whether "
        "the dataloader, the host or the GPU is the bottleneck; `0`: off",
    )
    nnodes: int = setting(
        1, _int_at_least(1), "machines in the job; more than 1 trains through torchrun"
    )
    node_rank: int = setting(
        0,
        _int_at_least(0),
        "this machine's rank, 0 to NNODES-1; node 0 alone publishes, uploads and writes the status",
    )
    nproc_per_node: int = setting(
        0,
        _int_at_least(0),
        "training processes on this machine, through torchrun when more than 1; `0`: one per "
        "visible GPU",
    )
    master_addr: str = setting("127.0.0.1", _text, "address of node 0, where the ranks meet")
    master_port: int = setting(29500, _int_at_least(1), "port on node 0 where the ranks meet")
    rdzv_timeout: int = setting(
        600, _int_at_least(1), "seconds every node has to join before the job fails"
    )
    allow_dataset_change: bool = setting(
        False, _bool, "resume a run from the Hub even if the dataset differs from its manifest's"
    )
    train_args: str = setting(
        "",
        _text,
        "LibreYOLO training options as `key=value` words, e.g. `optimizer=adamw lr0=0.002 "
        "cache=ram`; over the YAML's `train:` mapping key by key; checked at start",
    )
    export: str = setting(
        "",
        _formats,
        "after training, export best.pt to these LibreYOLO formats, e.g. `onnx,torchscript`, "
        "into `runs/RUN_NAME/export/` (uploaded too); a failed export leaves the exit at 0",
    )
    notify_events: str = setting(
        ",".join(EVENTS),
        _events,
        "the events NOTIFY's URLs hear of, separated by commas: `started` (the first epoch), "
        "`completed`, `failed`, `budget` (MAX_COST), `watchdog` (MAX_RUNTIME, STALL_TIMEOUT), "
        "`stopped` (a stop or a preemption), `billing` (a machine that could not be stopped, "
        "hourly)",
    )
    evaluate: str = setting(
        "auto",
        _choice("auto", "val", "none"),
        "after training, score best.pt with LibreYOLO's val into `runs/RUN_NAME/evaluation/` "
        "(uploaded, and on the model card): `auto`, the dataset's test split when it has a "
        "labelled one, and the validation split; `val`, the validation split only; `none`",
    )
    model_license: str = setting(
        "",
        _license,
        "the license the model card declares, a Hub license identifier such as `apache-2.0` "
        "(mind the start weights' and the dataset's terms); empty: none",
    )
    image: str = setting(
        "",
        _text,
        "the image reference this container runs (`REGISTRY/trainbox:TAG`, with `@sha256:...` "
        "when known), for the model card's line that reproduces the run",
    )
    allow_options_change: bool = setting(
        False, _bool, "resume a run from the Hub even if its training options differ"
    )
    # YAML only (TRAINBOX_CONFIG): a mapping of LibreYOLO training options, under TRAIN_ARGS.
    train: dict = field(
        default_factory=dict,
        metadata={"parse": _train_mapping, "doc": "", "env": False},
    )
    epochs: int = setting(100, _int_at_least(1), "epochs to train")
    batch: int = setting(
        -1,
        _int_at_least(1, also=-1),
        "global batch over all GPUs; `-1` picks the largest that fits",
    )
    imgsz: int | tuple[int, int] = setting(
        640,
        _image_size,
        "training image size in pixels, or `HEIGHTxWIDTH` (e.g. `480x640`) for a family that "
        "trains on rectangles",
    )
    workers: int | str = setting(
        "auto",
        _workers,
        "dataloader worker processes per GPU: `auto`, the CPUs the container may use (its "
        "affinity mask or CPU quota, the smaller) divided among the GPUs' processes, at most 8; "
        "a number above that share is lowered to it, with a note",
    )
    shm_policy: str = setting(
        "lower",
        _choice("lower", "stop"),
        "when `/dev/shm` is under 1 GB and WORKERS > 0: `lower` WORKERS to 0 with a warning, "
        "or `stop` with the fix",
    )
    save_period: int = setting(
        10,
        _int_at_least(0),
        "keep `weights/epoch_N.pt` every N epochs; `0` keeps none",
    )
    run_name: str = setting("run", _name, "run folder: `/workspace/runs/RUN_NAME`")
    workspace: Path = setting(
        WORKSPACE,
        _path,
        "the persistent volume: data, runs and trainbox's run state (the image's `HF_HOME` "
        "puts the Hugging Face cache on `/workspace` too)",
    )

    @property
    def run_dir(self) -> Path:
        """The run folder libreyolo writes: status.json, metrics.jsonl, train.log, weights/."""
        return self.workspace / "runs" / self.run_name

    @property
    def volume(self) -> Volume:
        """The volume as this node sees it."""
        return Volume(self.workspace, self.node_rank)

    @property
    def is_demo(self) -> bool:
        """True when no dataset is configured and the built-in demo trains."""
        return not (self.data or self.dataset_repo)

    def checked(self) -> "Config":
        """These settings, once those that only make sense together are checked."""
        if self.node_rank >= self.nnodes:
            raise TrainboxError(
                f"NODE_RANK={self.node_rank} with NNODES={self.nnodes}: node ranks go from 0 "
                f"to {self.nnodes - 1}",
                ExitCode.CONFIG,
            )
        if self.nnodes > 1 and not self.output_repo:
            raise TrainboxError(
                f"NNODES={self.nnodes} needs OUTPUT_REPO: every node resumes from the checkpoint "
                "uploaded there, so that all ranks start from the same one",
                ExitCode.CONFIG,
            )
        return self

    def dump(self) -> dict[str, Any]:
        """The resolved settings as JSON values, for the programs the job starts (no secret is
        a setting: HF_TOKEN and provider keys are read from the environment where they are
        used)."""
        return {f.name: str(v) if isinstance(v := getattr(self, f.name), Path) else v
                for f in fields(self)}  # fmt: skip

    def job_shape(self) -> dict[str, str]:
        """The job's shape as this node resolved it (a launcher's names, the YAML), as
        environment variables: for an SSH session's ``trainbox status`` to find its node's
        files."""
        return {"NNODES": str(self.nnodes), "NODE_RANK": str(self.node_rank),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}  # fmt: skip


KEYS = tuple(f.name for f in fields(Config))  # the YAML's keys
ENV_KEYS = tuple(f.name for f in fields(Config) if f.metadata.get("env", True))


def describe() -> Iterator[tuple[str, Any, str]]:
    """(environment variable, default, description) for each setting, for docs and help."""
    for f in fields(Config):
        if f.metadata.get("env", True):
            yield f.name.upper(), f.default, f.metadata["doc"]


def _parse_layer(values: Mapping[str, Any], source: str, *, env: bool) -> dict[str, Any]:
    parsers = {f.name: f.metadata["parse"] for f in fields(Config)}
    parsed = {}
    for key, raw in values.items():
        shown = key.upper() if env else key
        try:
            parsed[key] = parsers[key](raw)
        except ValueError as err:
            raise TrainboxError(f"{source}: {shown}={raw!r}: {err}", ExitCode.CONFIG) from None
    return parsed


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise TrainboxError(
            f"TRAINBOX_CONFIG={path}: cannot read it ({err.strerror}); "
            "mount the file or unset TRAINBOX_CONFIG",
            ExitCode.CONFIG,
        ) from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise TrainboxError(f"{path}: not valid YAML{line}", ExitCode.CONFIG) from None
    if not isinstance(loaded, dict):
        raise TrainboxError(f"{path}: expected a mapping of settings", ExitCode.CONFIG)
    unknown = sorted(str(key) for key in loaded if key not in KEYS)
    if unknown:
        raise TrainboxError(
            f"{path}: unknown key {unknown[0]!r}; accepted keys: {', '.join(KEYS)}",
            ExitCode.CONFIG,
        )
    return _parse_layer(loaded, str(path), env=False)


def load(environ: Mapping[str, str] | None = None) -> Config:
    """Build the run's config from the YAML file and the environment, checked."""
    sys.audit("trainbox.config.load")  # once per process at most (tests/state/test_store.py)
    environ = os.environ if environ is None else environ
    # trainbox's own names win; an empty one counts as unset, so a launcher's name applies.
    aliased = launchers.aliased(environ)
    environ = {**environ, **{k: v for k, v in aliased.items() if not environ.get(k, "").strip()}}
    file_name = environ.get("TRAINBOX_CONFIG", "").strip()
    from_file = _read_yaml(Path(file_name)) if file_name else {}
    from_env = _parse_layer(
        {key: environ[key.upper()] for key in ENV_KEYS if environ.get(key.upper(), "").strip()},
        "environment",
        env=True,
    )
    chosen = {**from_file, **from_env}
    if chosen.get("data") and chosen.get("dataset_repo"):
        raise TrainboxError(
            "DATA and DATASET_REPO are both set: keep DATASET_REPO to stage the dataset "
            "from the Hub, or DATA for one already in the container",
            ExitCode.CONFIG,
        )
    config = Config()
    if not (chosen.get("data") or chosen.get("dataset_repo")):
        config = replace(config, **_read_yaml(DEMO_PRESET))
    return replace(config, **chosen).checked()


def restore(values: Mapping[str, Any]) -> Config:
    """The settings ``Config.dump`` wrote, as they were (the job checked them)."""
    kinds = {f.name: f.type for f in fields(Config)}
    return Config(**{k: Path(v) if kinds[k] is Path else tuple(v) if isinstance(v, list) else v
                     for k, v in values.items()})  # fmt: skip
