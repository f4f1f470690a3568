"""Start weights: the checkpoint a new run starts from, fetched once onto the volume through
the one Hub gateway, while the dataset stages.

``MODEL`` is a published LibreYOLO name with ``PRETRAINED=true`` (``LibreYOLO9s.pt``: the file
LibreYOLO itself would fetch, ``LibreYOLO/LibreYOLO9s`` on the Hub, by LibreYOLO's own
``get_download_url``), a file in any Hub model repo (``hf://ORG/NAME/PATH.pt``, e.g. an earlier
run's ``run/best.pt``), or a path in the container. LibreYOLO's own download goes straight to
huggingface.co inside the train program, after staging, without ``HF_ENDPOINT`` or
``HF_TOKEN``; through the gateway a missing file or a refused token ends the preparation with
one line, and a Hub that cannot be asked waits ``HUB_WAIT`` like every other Hub call.
"""

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub
from entrypoint.settings.config import Config

log = logging.getLogger("trainbox")

PREFIX = "hf://"
FOLDER = "weights"  # on the volume: WORKSPACE/weights/ORG/NAME/PATH
PUBLISHED = re.compile(r"https://huggingface\.co/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")


def architecture(model: str, device: str = "cpu") -> Any:
    """The architecture ``model`` names (e.g. LibreYOLO9t.pt), untrained: no download."""
    # The registry the libreyolo CLI itself uses to map a model name to its architecture.
    from libreyolo.cli.config import detect_family_from_model_ref, get_model_class

    model_cls = get_model_class(detect_family_from_model_ref(model))
    size = model_cls.detect_size_from_filename(Path(model).name) if model_cls else None
    if size is None:
        raise TrainboxError(
            f"MODEL={model!r}: not a LibreYOLO model name such as LibreYOLO9t.pt; "
            "with PRETRAINED=false the name picks the architecture",
            ExitCode.CONFIG,
        )
    return model_cls(None, size=size, device=device)


@dataclass(frozen=True)
class Source:
    """Where the start weights come from (``target``, None for a path) and where they live."""

    target: hub.Target | None
    path: Path


def _published(model: str) -> hub.Target:
    """The Hub file LibreYOLO would download for a published model name."""
    from libreyolo.cli.config import detect_family_from_model_ref, get_model_class

    model_cls = get_model_class(detect_family_from_model_ref(model))
    try:
        url = model_cls.get_download_url(Path(model).name) if model_cls else None
    except FileNotFoundError as err:  # LibreYOLO publishes no weights of that size
        raise TrainboxError(
            f"MODEL={model}: {err}; set PRETRAINED=false", ExitCode.CONFIG
        ) from None
    found = PUBLISHED.fullmatch(url or "")
    if not found:
        raise TrainboxError(
            f"MODEL={model!r}: LibreYOLO publishes no weights by that name: use a name such as "
            "LibreYOLO9s.pt, hf://ORG/NAME/PATH.pt, a path, or PRETRAINED=false",
            ExitCode.CONFIG,
        )
    return hub.Target("MODEL", found[1], found[3], found[2], "model")


def source(cfg: Config) -> Source | None:
    """The start weights MODEL names; None to train the architecture from scratch."""
    model = cfg.model
    if model.startswith(PREFIX):
        org, _, rest = model.removeprefix(PREFIX).partition("/")
        name, _, path = rest.partition("/")
        if not (org and name and path.endswith(".pt")):
            raise TrainboxError(
                f"MODEL={model!r}: expected hf://ORG/NAME/PATH.pt, a file in a Hub model repo",
                ExitCode.CONFIG,
            )
        target = hub.Target("MODEL", f"{org}/{name}", path, "main", "model")
    elif Path(model).is_absolute():
        if not Path(model).is_file():
            raise TrainboxError(
                f"MODEL={model}: no such file in the container: mount it, or name a published "
                "model or hf://ORG/NAME/PATH.pt",
                ExitCode.CONFIG,
            )
        return Source(None, Path(model))
    elif cfg.pretrained:
        target = _published(model)
    else:
        return None
    return Source(target, cfg.workspace / FOLDER / target.repo / target.name)


def check(cfg: Config, found: Source | None) -> None:
    """Before a long staging: the start weights exist where MODEL says (one metadata request)."""
    pending = found and found.target and not found.path.is_file()
    if pending and hub.locate(found.target, wait=cfg.hub_wait) is None:
        raise _missing(cfg, found.target)


def _missing(cfg: Config, target: hub.Target) -> TrainboxError:
    return TrainboxError(
        f"MODEL={cfg.model}: {target.name} is not in the Hub model repo {target.repo} (or the "
        "repo is private and HF_TOKEN cannot read it): check the name, or set HF_TOKEN",
        ExitCode.DATASET,
    )


def fetch(cfg: Config, found: Source | None) -> Path | None:
    """The start weights on the volume, downloaded once (atomically: a restart finds them)."""
    if found is None or found.target is None:
        return found.path if found else None
    if found.path.is_file():
        log.info("start weights %s already on the volume", found.path)
        return found.path
    found.path.parent.mkdir(parents=True, exist_ok=True)
    log.info("fetching the start weights %s from %s", found.target.name, found.target.repo)
    if hub.download(found.target, found.path, wait=cfg.hub_wait) is None:
        raise _missing(cfg, found.target)
    log.info("start weights fetched: %s", found.path)
    return found.path


class Background:
    """``fetch`` in a thread, while the main thread stages the dataset; ``result`` waits.

    A daemon thread: a stop signal during staging ends the job without waiting for it (its
    ``.part`` file is left hidden, and a restart downloads again)."""

    def __init__(self, cfg: Config, found: Source | None) -> None:
        self.path: Path | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(cfg, found), daemon=True)
        self.thread.start()

    def _run(self, cfg: Config, found: Source | None) -> None:
        try:
            self.path = fetch(cfg, found)
        except BaseException as err:  # handed to the main thread by result()
            self.error = err

    def result(self) -> Path | None:
        self.thread.join()
        if self.error:
            raise self.error
        return self.path


def local(cfg: Config) -> Path | None:
    """For the train program: the fetched start weights, when MODEL names any."""
    found = source(cfg)
    return found.path if found and found.path.is_file() else None
