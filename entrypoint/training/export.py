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
from entrypoint.settings import family
from entrypoint.settings.config import Config
from entrypoint.state import store
from entrypoint.training import publish

log = logging.getLogger("trainbox")

FOLDER = "export"


def formats(export: str) -> list[str]:
    """The formats EXPORT names, in its order."""
    return [name.strip().lower() for name in export.split(",") if name.strip()]


def _registry() -> dict[str, Any]:
    """LibreYOLO's exporters by format name, the optional ones included (as ``formats`` does)."""
    from libreyolo.export.exporter import BaseExporter

    for optional in ("tensorrt", "openvino", "ncnn"):
        with contextlib.suppress(ImportError):
            importlib.import_module(f"libreyolo.export.{optional}")
    return dict(BaseExporter._registry)


def check(export: str, model: str) -> None:
    """At start: every EXPORT format is one LibreYOLO has, allows for MODEL's family and task,
    and finds its packages in this image (its own checks, which it runs only after training)."""
    if not formats(export):
        return
    known = _registry()
    found = family.of(model)
    for name in formats(export):
        if name not in known:
            raise _refused(export, f"{name!r} is not a LibreYOLO export format; it has "
                                f"{', '.join(sorted(known))}")  # fmt: skip
        if found and (support := _support(found, name)).tier == "blocked":
            raise _refused(export, f"LibreYOLO does not export {found.name} {found.task} to "
                                f"{name}: {support.reason}")  # fmt: skip
        needs_onnx = name == "onnx" or getattr(known[name], "requires_onnx", False)
        if needs_onnx and importlib.util.find_spec("onnx") is None:
            raise _refused(export, f"{name} needs the onnx package: build the image with "
                                "LIBREYOLO_EXTRAS=onnx")  # fmt: skip
        try:
            _available(name)
        except (ImportError, RuntimeError, OSError) as err:
            first = str(err).strip().splitlines()[0].split(". ")[0].rstrip(".")
            raise _refused(export, f"{first}; LibreYOLO's extra for it is a build argument: "
                                f"LIBREYOLO_EXTRAS={name}") from None  # fmt: skip


def _refused(export: str, why: str) -> TrainboxError:
    return TrainboxError(f"EXPORT={export}: {why}", ExitCode.CONFIG)


def _support(found: family.Family, name: str) -> Any:
    """LibreYOLO's export support policy for a family, task and format (``export/support.py``)."""
    from libreyolo.export.support import get_support

    return get_support(found.name, found.task, name)


def _available(name: str) -> None:
    """LibreYOLO's own check that a format's packages are installed, the one its exporter runs
    before exporting (``export/FORMAT.py``: ``check_FORMAT_available``); ImportError if not."""
    try:
        module = importlib.import_module(f"libreyolo.export.{name}")
    except ImportError:
        return  # a format built into the exporter (onnx, torchscript): checked above
    for check in (f"check_{name}_available", f"check_{name}_export_available"):
        if available := getattr(module, check, None):
            available()


def _device(device: str) -> str:
    return "cpu" if device == "cpu" else device.split(",")[0].replace("auto", "0")


def run(cfg: Config) -> dict[str, str]:
    """Export ``best.pt`` (else ``last.pt``) to each format; {format: file or error}. Never
    raises: training is complete whatever happens here."""
    if not formats(cfg.export):
        return {}
    weights = cfg.run_dir / "weights"
    source = next((p for p in (weights / "best.pt", weights / "last.pt") if p.is_file()), None)
    results: dict[str, str] = {}
    if source is None:
        results = dict.fromkeys(formats(cfg.export), "failed: no best.pt or last.pt to export")
    else:
        known = _registry()
        results = {
            name: _one(
                source,
                name,
                known[name].suffix,
                run_dir=cfg.run_dir,
                imgsz=cfg.imgsz,
                device=cfg.device,
            )
            for name in formats(cfg.export)
        }
    store.write_export_report(cfg.workspace, results)  # the job puts it in the status
    publish.publish(cfg.run_dir)  # the last epoch's snapshot with them: the final flush pushes it
    return results


def _one(source: Path, name: str, suffix: str, *, run_dir: Path, imgsz: int | tuple[int, int],
         device: str) -> str:  # fmt: skip
    from libreyolo import LibreYOLO

    out = run_dir / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    try:
        model = LibreYOLO(str(source), device="cpu" if device == "cpu" else "auto")
        made = Path(model.export(format=name, imgsz=imgsz, device=_device(device),
                                 output_path=str(out / f"{source.stem}{suffix}")))  # fmt: skip
    except Exception as err:  # a failed export never fails the completed training
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        log.warning("EXPORT %s failed: %s; training is complete, the exit stays 0", name, first)
        return f"failed: {first}"
    log.info("exported %s: %s", name, made)
    return str(made.relative_to(run_dir)) if made.is_relative_to(run_dir) else str(made)
