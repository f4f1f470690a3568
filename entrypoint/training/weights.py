"""Start weights: the checkpoint a new run starts from, fetched once onto the volume through
the one Hub gateway, while the dataset stages.

``MODEL`` is a published LibreYOLO name with ``PRETRAINED=true`` (``LibreYOLO9s.pt``: the file
LibreYOLO itself would fetch, ``LibreYOLO/LibreYOLO9s`` on the Hub, by LibreYOLO's own
``get_download_url``), a file in any Hub model repo (``hf://ORG/NAME/PATH.pt``, e.g. an earlier
run's ``run/best.pt``), or a path in the container. LibreYOLO's own download goes straight to
huggingface.co inside the train program, after staging, without ``HF_ENDPOINT`` or
``HF_TOKEN``; through the gateway a missing file or a refused token ends the preparation with
one line, and a Hub that cannot be asked waits ``HUB_WAIT`` like every other Hub call. A
distillation teacher (``TRAIN_ARGS="distill_model=LibreYOLO9m.pt"``) is fetched the same way,
beside the start weights, and the train program gives LibreYOLO its path. A DINOv2 teacher
(``distill_model=dinov2``) is loaded by transformers by its Hub id, so its files are fetched,
through the gateway too, into the Hub client's cache (HF_HOME, on the volume), where transformers
finds them even when the Hub cannot be asked once training started.
"""

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.settings import family, options
from entrypoint.settings.config import Config

log = logging.getLogger("trainbox")

PREFIX = "hf://"
FOLDER = "weights"  # on the volume: WORKSPACE/weights/ORG/NAME/PATH
PUBLISHED = re.compile(r"https://huggingface\.co/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")
# What transformers 5 reads for Dinov2Model.from_pretrained (LibreYOLO's DINOv2Teacher):
# the config, then the safetensors weights, which every facebook/dinov2-* repo has.
DINOV2_FILES = ("config.json", "model.safetensors")


def architecture(model: str, device: str = "cpu") -> Any:
    """The architecture ``model`` names (e.g. LibreYOLO9t.pt, LibreECs-seg.pt), untrained, for
    the task its name says: no download, of the model's weights nor of its backbone's (RF-DETR
    and RT-DETR fetch those when built otherwise). As LibreYOLO's CLI builds it for
    ``pretrained=false`` (``cli/commands/train.py``: ``_from_scratch``, seed 0)."""
    from libreyolo.cli.config import get_model_class

    found = family.of(model)
    model_cls = get_model_class(found.name) if found else None
    size = model_cls.detect_size_from_filename(Path(model).name) if model_cls else None
    if size is None:
        raise TrainboxError(
            f"MODEL={model!r}: not a LibreYOLO model name such as LibreYOLO9t.pt; "
            "with PRETRAINED=false the name picks the architecture",
            ExitCode.CONFIG,
        )
    variant = model_cls.detect_variant_from_filename(Path(model).name)
    return model_cls._from_scratch(size=size, task=found.task, device=device, seed=0,
                                   **({"weight_variant": variant} if variant else {}))  # fmt: skip


def check_size(model: str, imgsz: int | tuple[int, int]) -> None:
    """At start, for a transformer family (one LibreYOLO trains on squares only) at an IMGSZ
    below its recipe's: the untrained architecture checks that size and sees one zero image of
    it, on the CPU. A DETR-style decoder picks its queries among the encoder's cells, and a small
    image has fewer (D-FINE-n needs 256: "selected index k out of range" once training started,
    on the billed card); some check the size themselves (GTR: a multiple of 32, at least 160).
    Seconds on the CPU, so the CNN families and the recipes' own sizes are not tried."""
    height, width = (imgsz, imgsz) if isinstance(imgsz, int) else imgsz
    told = family.known(model)  # without importing LibreYOLO, where the table tells
    if told is not None and not (told.square and told.imgsz and min(height, width) < told.imgsz):
        return
    from libreyolo.training.trainer import RECTANGULAR_TRAINING_FAMILIES

    found = family.of(model)
    if found is None or found.name in RECTANGULAR_TRAINING_FAMILIES:
        return
    recipe = options.defaults(model).get("imgsz")
    if not isinstance(recipe, int) or min(height, width) >= recipe:
        return
    import torch

    net = architecture(model)
    module = getattr(net, "model", net)
    try:
        if validate := getattr(net, "_validate_imgsz", None):
            validate(height)
        with torch.no_grad():
            module.eval()(torch.zeros(1, 3, height, width))
    except Exception as err:  # whatever the family's code raises at this size
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TrainboxError(
            f"IMGSZ={imgsz if isinstance(imgsz, int) else f'{height}x{width}'} is too "
            f"small for {model}: {first} (LibreYOLO trains it at {recipe}): raise IMGSZ",
            ExitCode.CONFIG,
        ) from None


@dataclass(frozen=True)
class Source:
    """Where the start weights come from (``target``, None for a path) and where they live
    (``path``; None: in the Hub client's cache)."""

    target: hub.Target | None
    path: Path | None
    named: str = ""  # the setting and its value, for error lines: MODEL=LibreYOLO9s.pt


def _published(setting: str, model: str) -> hub.Target:
    """The Hub file LibreYOLO would download for a published model name."""
    from libreyolo.cli.config import get_model_class

    model_cls = get_model_class(family.name_of(model))
    try:
        url = model_cls.get_download_url(Path(model).name) if model_cls else None
    except FileNotFoundError as err:  # LibreYOLO publishes no weights of that size
        raise TrainboxError(f"{setting}={model}: {err}", ExitCode.CONFIG) from None
    found = PUBLISHED.fullmatch(url or "")
    if not found:
        raise TrainboxError(
            f"{setting}={model!r}: LibreYOLO publishes no weights by that name: use a name such "
            "as LibreYOLO9s.pt, hf://ORG/NAME/PATH.pt or a path"
            + (", or PRETRAINED=false" if setting == "MODEL" else ""),
            ExitCode.CONFIG,
        )
    return hub.Target(setting, found[1], found[3], found[2], "model")


def source(cfg: Config) -> Source | None:
    """The start weights MODEL names; None to train the architecture from scratch."""
    return _source(cfg.workspace, "MODEL", cfg.model, cfg.pretrained)


def teacher(cfg: Config) -> list[Source]:
    """The files of the teacher TRAIN_ARGS' ``distill_model`` names, fetched like MODEL's
    weights (LibreYOLO would download it itself once training started, past HF_ENDPOINT and
    HUB_WAIT): one, or for DINOv2 those transformers reads, into the Hub client's cache."""
    name = options.effective(cfg).get("distill_model")
    if not name:
        return []
    from libreyolo.distillation import teachers  # imports torch

    if not teachers.is_foundation_teacher(name):
        return [_source(cfg.workspace, "distill_model", name, pretrained=True)]
    repo = teachers.DINOV2_ALIASES.get(name.lower(), name)  # as DINOv2Teacher resolves it
    named = f"distill_model={name}"
    return [Source(hub.Target("distill_model", repo, file, "main", "model"), None, named)
            for file in DINOV2_FILES]  # fmt: skip


def _source(workspace: Path, setting: str, model: str, pretrained: bool) -> Source | None:
    if model.startswith(PREFIX):
        org, _, rest = model.removeprefix(PREFIX).partition("/")
        name, _, path = rest.partition("/")
        if not (org and name and path.endswith(".pt")):
            raise TrainboxError(
                f"{setting}={model!r}: expected hf://ORG/NAME/PATH.pt, a file in a Hub model repo",
                ExitCode.CONFIG,
            )
        target = hub.Target(setting, f"{org}/{name}", path, "main", "model")
    elif Path(model).is_absolute():
        if not Path(model).is_file():
            raise TrainboxError(
                f"{setting}={model}: no such file in the container: mount it, or name a "
                "published model or hf://ORG/NAME/PATH.pt",
                ExitCode.CONFIG,
            )
        return Source(None, Path(model), f"{setting}={model}")
    elif pretrained:
        target = _published(setting, model)
    else:
        return None
    return Source(target, workspace / FOLDER / target.repo / target.name, f"{setting}={model}")


def check(found: Source | None, wait: float) -> int:
    """Before staging: the weights exist where their setting says (one metadata request,
    waiting up to ``wait`` s for the Hub); the bytes still to fetch onto the volume (0 when
    they are there, or at a path)."""
    if not (found and found.target) or _here(found):
        return 0
    remote = hub.locate(found.target, wait=wait)
    if remote is None:
        raise _missing(found)
    return remote.size


def _here(found: Source) -> bool:
    """On the volume already: at its path, or in the Hub client's cache."""
    return found.path.is_file() if found.path else hub.in_cache(found.target) is not None


def _missing(found: Source) -> TrainboxError:
    target = found.target
    return TrainboxError(
        f"{found.named}: {target.name} is not in the Hub model repo {target.repo} (or the "
        "repo is private and HF_TOKEN cannot read it): check the name, or set HF_TOKEN",
        ExitCode.DATASET,
    )


def fetch(found: Source | None, wait: float) -> Path | None:
    """The weights on the volume, downloaded once (atomically: a restart finds them), waiting
    up to ``wait`` s for an unreachable Hub."""
    if found is None or found.target is None:
        return found.path if found else None
    what = "start weights" if found.target.setting == "MODEL" else "distillation teacher"
    if _here(found):
        log.info("%s %s already on the volume", what, found.path or found.target.name)
        return found.path
    if found.path is None:
        log.info("fetching the %s %s from %s into the Hub cache", what, found.target.name,
                 found.target.repo)  # fmt: skip
        if hub.cache(found.target, wait=wait) is None:
            raise _missing(found)
        return None
    found.path.parent.mkdir(parents=True, exist_ok=True)
    log.info("fetching the %s %s from %s", what, found.target.name, found.target.repo)
    if hub.download(found.target, found.path, wait=wait) is None:
        raise _missing(found)
    log.info("%s fetched: %s", what, found.path)
    return found.path


class Background:
    """``fetch`` of each source in a thread of its own, while the main thread stages the
    dataset; ``result`` waits for them all.

    Daemon threads: a stop signal during staging ends the job without waiting for them (a
    ``.part`` file is left hidden, and a restart downloads again)."""

    def __init__(self, wait: float, *found: Source | None) -> None:
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(wait, each), daemon=True)
                        for each in found if each]  # fmt: skip
        for thread in self.threads:
            thread.start()

    def _run(self, wait: float, found: Source) -> None:
        try:
            fetch(found, wait)
        except BaseException as err:  # handed to the main thread by result()
            self.errors.append(err)

    def result(self) -> None:
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise self.errors[0]


def local(found: Source | None) -> Path | None:
    """For the train program: the fetched start weights (``source``'s), when MODEL names any."""
    return found.path if found and found.path.is_file() else None


def local_teacher(files: list[Source]) -> Path | None:
    """For the train program: the fetched teacher (``teacher``'s files), when
    ``distill_model`` names a LibreYOLO model (DINOv2 keeps its name: transformers finds it in
    the Hub client's cache)."""
    path = files[0].path if len(files) == 1 else None
    return path if path and path.is_file() else None
