"""The ``train`` program that supervisord runs: one LibreYOLO run through its Python API.

The Python API, not the ``libreyolo train`` CLI, because only the API takes callbacks.
"""

import logging
import time
from pathlib import Path
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import options
from entrypoint.settings.config import Config
from entrypoint.settings.launchers import Volume
from entrypoint.state import cost, store
from entrypoint.state.run import Prepared, Run
from entrypoint.training import distributed, export, progress, publish
from entrypoint.training.publish import Publisher
from entrypoint.training.weights import architecture

log = logging.getLogger("trainbox")

PROFILE = "profile"  # runs/RUN_NAME/profile: the PROFILE_STEPS pass


class EpochLog:
    """One plain line per finished epoch, readable in ``docker logs`` between progress bars,
    with what the epoch cost once the machine's price is known.

    A plain class at module level: under DDP, callbacks must be picklable.
    """

    def __init__(self, volume: Volume) -> None:
        self.volume = volume

    def on_train_epoch_end(self, event: Any) -> None:
        metric = ""
        if event.current_metric is not None:
            metric = f", {event.current_metric_name} {event.current_metric:.4f}"
        if per_hour := cost.price_now(self.volume):
            metric += f", ${cost.dollars(event.epoch_seconds, per_hour):.3f}"
        log.info(
            "epoch %d/%d done in %.1fs: loss %.4f%s",
            event.epoch,
            event.total_epochs,
            event.epoch_seconds,
            event.train_loss,
            metric,
        )


class Clock:
    """When training's first step began and its last one ended, for the container's report of
    the seconds it was billed without training (``budget.billed``). Picklable, as EpochLog."""

    def __init__(self, volume: Volume) -> None:
        self.volume = volume

    def _mark(self, name: str) -> None:
        store.mark(self.volume, **{name: time.time()})

    def on_train_start(self, _event: Any) -> None:
        self._mark("first_step")

    def on_train_epoch_end(self, _event: Any) -> None:
        self._mark("last_step")

    def on_train_exception(self, _event: Any) -> None:
        self._mark("last_step")  # a stop in the middle of an epoch: it trained until now


def _model_device(device: str) -> str:
    return "cpu" if device == "cpu" else "auto"


def _build_model(cfg: Config, start: Path | None) -> Any:
    """The model to train: ``start`` (an interrupted run's checkpoint, or the start weights
    MODEL names: published, hf://, a path), or the architecture MODEL names, from scratch."""
    if start or cfg.pretrained:
        from libreyolo import LibreYOLO

        return LibreYOLO(str(start or cfg.model), device=_model_device(cfg.device))
    return architecture(cfg.model, _model_device(cfg.device))


def _on_this_data(cfg: Config, run: Prepared) -> dict[str, Any]:
    """``model.train`` arguments that the run and its profile pass share."""
    chosen = options.effective(cfg)
    if run.teacher:  # fetched while staging, through the gateway
        chosen["distill_model"] = str(run.teacher)
    return {
        **chosen,
        "data": str(run.data_yaml),
        "batch": cfg.batch,
        "imgsz": cfg.imgsz,
        "device": "" if cfg.device == "auto" else cfg.device,
        "workers": run.workers,
        "exist_ok": True,
        # SyncBatchNorm needs GPU modules.
        **({"sync_bn": False} if cfg.device == "cpu" else {}),
    }


def profile(cfg: Config, on_data: dict[str, Any]) -> None:
    """PROFILE_STEPS: that many real steps under libreyolo's profiler, in runs/RUN/profile,
    before the run; its verdict (dataloader, host/launch or compute bound) goes to the status."""
    folder = cfg.run_dir / PROFILE
    if (folder / "profile_summary.json").is_file():
        return  # profiled before a restart
    log.info("profiling %d training steps before the run (PROFILE_STEPS)", cfg.profile_steps)
    architecture(cfg.model, _model_device(cfg.device)).train(
        **on_data,
        epochs=1,
        project=str(cfg.run_dir),
        name=PROFILE,
        profile=True,
        profile_then_stop=True,
        profile_warmup=2,
        profile_steps=cfg.profile_steps,
        profile_open=False,
    )
    if not (found := progress.profile(cfg.run_dir)):
        log.warning(
            "PROFILE_STEPS=%d: more steps than one epoch has; no verdict", cfg.profile_steps
        )
        return
    found = cost.advice(found, cost.price_now(cfg.volume))
    money = (f"; ${found['per_1000_images']:.4f} per 1,000 images at this price"
             if "per_1000_images" in found else "")  # fmt: skip
    log.info("profile: %s bound, %.0f ms/step, %.1f img/s%s: %s", found["bound"],
             found["step_ms"], found["img_per_s"], money, found["advice"])  # fmt: skip


def train(cfg: Config, run: Prepared) -> None:
    """Train until done; libreyolo writes status.json, metrics.jsonl, train.log, weights/.

    An interrupted run in the volume resumes from its newest checkpoint that loads.
    """
    from entrypoint.training.resume import checkpoint

    resume_from = checkpoint(cfg.run_dir)
    on_data = _on_this_data(cfg, run)
    if cfg.profile_steps and not resume_from:
        profile(cfg, on_data)
    model = _build_model(cfg, resume_from or run.start)
    if where := distributed.describe():
        log.info("distributed: %s", where)
    if resume_from:
        log.info("resuming %s from %s", cfg.run_dir, resume_from)
    else:
        log.info("training %s on %s into %s", cfg.model, run.data_yaml, cfg.run_dir)
    # Global rank 0 alone logs epochs, keeps the clock and publishes.
    callbacks = ([EpochLog(cfg.volume), Clock(cfg.volume), Publisher(cfg.volume)]
                 if distributed.rank() == 0 else [])  # fmt: skip
    model.train(
        **on_data,
        epochs=cfg.epochs,
        save_period=cfg.save_period,
        project=str(cfg.run_dir.parent),
        name=cfg.run_name,
        resume=bool(resume_from),
        callbacks=callbacks,
    )
    log.info("training completed: weights in %s", cfg.run_dir / "weights")
    if distributed.rank() == 0:
        export.run(cfg)


def main(here: Run) -> int:
    """Run training and turn its outcome into the program's exit code; ``here`` is prepared
    (by the job, or by the CLI for a run by hand)."""
    cfg, run = here.settings, here.prepared
    assert run is not None, "training needs a prepared run"
    distributed.started(here.runtime)
    pulse = distributed.Heartbeat.start(cfg.volume, here.runtime)
    try:
        return _trained(cfg, run, pulse, here.runtime)
    finally:
        if pulse:
            pulse.stop()


def _trained(cfg: Config, run: Prepared, pulse: distributed.Heartbeat | None,
             runtime: Path | None) -> int:  # fmt: skip
    """Train, and under torchrun meet the other ranks at the end; the program's exit code."""
    try:
        train(cfg, run)
    except KeyboardInterrupt:
        log.warning("training interrupted; the last finished epoch is in %s", cfg.run_dir)
        return ExitCode.INTERRUPTED
    except TrainboxError:
        raise
    except Exception as err:
        if pulse and (silent := pulse.silent()):
            return _ended(runtime, ExitCode.NODE_LOST,
                          f"training stopped on rank {distributed.rank()}: {silent}; every node "
                          "ends now: start them all again to resume from the last uploaded "
                          "epoch")  # fmt: skip
        publish.keep_traceback(cfg.run_dir, err)
        return _ended(runtime, ExitCode.TRAINING_FAILED,
                      f"training failed: {type(err).__name__}: {err} "
                      f"(traceback in {cfg.run_dir / 'train.log'})")  # fmt: skip
    if pulse:
        pulse.finish()
    return ExitCode.OK


def _ended(runtime: Path | None, code: ExitCode, line: str) -> int:
    """A failure: its one line in the log, and as this rank's verdict, for the job's end."""
    log.error("%s", line)
    distributed.chose(runtime, code, line)
    return code
