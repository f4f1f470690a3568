"""A model you can deploy, made on the rented card: ``EXPORT=onnx,torchscript,...`` after
training, from ``best.pt``, into ``runs/RUN_NAME/export/``, published for the uploader.

The formats are LibreYOLO's (its exporter registry, as ``libreyolo formats`` lists them),
checked at start with the packages they need, so a typo never waits for the end of a run. A
TensorRT engine only runs on the kind of card that built it, which is why exporting belongs
here. An export that fails never fails a completed training: it is reported in the status and
the log, and the exit stays 0.
"""

import contextlib
import importlib
import importlib.util
import logging
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings.config import Config
from entrypoint.state import store
from entrypoint.training import publish

log = logging.getLogger("trainbox")

FOLDER = "export"


def formats(cfg: Config) -> list[str]:
    return [name.strip().lower() for name in cfg.export.split(",") if name.strip()]


def _registry() -> dict[str, Any]:
    """LibreYOLO's exporters by format name, the optional ones included (as ``formats`` does)."""
    from libreyolo.export.exporter import BaseExporter

    for optional in ("tensorrt", "openvino", "ncnn"):
        with contextlib.suppress(ImportError):
            importlib.import_module(f"libreyolo.export.{optional}")
    return dict(BaseExporter._registry)


def check(cfg: Config) -> None:
    """At start: every EXPORT format is one LibreYOLO has, with the onnx package it needs."""
    if not formats(cfg):
        return
    known = _registry()
    for name in formats(cfg):
        if name not in known:
            raise TrainboxError(
                f"EXPORT={cfg.export}: {name!r} is not a LibreYOLO export format; it has "
                f"{', '.join(sorted(known))}",
                ExitCode.CONFIG,
            )
        needs_onnx = name == "onnx" or getattr(known[name], "requires_onnx", False)
        if needs_onnx and importlib.util.find_spec("onnx") is None:
            raise TrainboxError(
                f"EXPORT={cfg.export}: {name} needs the onnx package: build the image with "
                "LIBREYOLO_EXTRAS=onnx",
                ExitCode.CONFIG,
            )


def _device(cfg: Config) -> str:
    return "cpu" if cfg.device == "cpu" else cfg.device.split(",")[0].replace("auto", "0")


def run(cfg: Config) -> dict[str, str]:
    """Export ``best.pt`` (else ``last.pt``) to each format; {format: file or error}. Never
    raises: training is complete whatever happens here."""
    if not formats(cfg):
        return {}
    weights = cfg.run_dir / "weights"
    source = next((p for p in (weights / "best.pt", weights / "last.pt") if p.is_file()), None)
    results: dict[str, str] = {}
    if source is None:
        results = dict.fromkeys(formats(cfg), "failed: no best.pt or last.pt to export")
    else:
        known = _registry()
        results = {name: _one(cfg, source, name, known[name].suffix) for name in formats(cfg)}
    store.write_export_report(cfg.workspace, results)  # the job puts it in the status
    index = publish.read_index(cfg.run_dir)
    publish.publish(cfg.run_dir, index["epoch"])  # the uploader's final flush pushes them
    return results


def _one(cfg: Config, source: Path, name: str, suffix: str) -> str:
    from libreyolo import LibreYOLO

    out = cfg.run_dir / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    try:
        model = LibreYOLO(str(source), device="cpu" if cfg.device == "cpu" else "auto")
        made = Path(model.export(format=name, imgsz=cfg.imgsz, device=_device(cfg),
                                 output_path=str(out / f"{source.stem}{suffix}")))  # fmt: skip
    except Exception as err:  # a failed export never fails the completed training
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        log.warning("EXPORT %s failed: %s; training is complete, the exit stays 0", name, first)
        return f"failed: {first}"
    log.info("exported %s: %s", name, made)
    return str(made.relative_to(cfg.run_dir)) if made.is_relative_to(cfg.run_dir) else str(made)
