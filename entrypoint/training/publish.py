"""Consistent snapshots of a run, for the uploader and for resuming.

libreyolo writes ``weights/*.pt`` with a plain ``torch.save``: read at the wrong moment, a
file is half-written. Right after each save, in the trainer's own process (the
``on_train_epoch_end`` callback), the run's files are copied into its published folder (temp
file, fsync, rename), then ``index.json`` there lists them with their sha256. The uploader
reads only what the index lists, and a resume falls back on the published ``last.pt``.

The copy of an epoch runs in a thread while the next epoch trains: done in the training step,
the copy and fsync of a 439 MB checkpoint (LibreYOLO9c's, as last.pt and best.pt) held it
about 6 s, 10% of a 60 s epoch (``tests/bench/upload.py --part step``). A copy whose source is
rewritten meanwhile (the next epoch's save came first) is dropped, never renamed into place:
that next epoch's copy follows. The end of training, or its failure, waits for it.

The published folder is ``/workspace/trainbox/published/RUN_NAME``, outside the runs folder:
inside it, its copies of status.json and metrics.jsonl made ``libreyolo monitor`` (which takes
any folder holding one for a run) show a second, phantom run ``run/published``.
"""

import contextlib
import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from entrypoint.files import SourceChanged, copied, copy_atomic, sha256
from entrypoint.settings.launchers import Volume
from entrypoint.state import cost, store
from entrypoint.state.snapshot import MANIFEST, folder, keep, read_index, write_index
from entrypoint.training import progress

log = logging.getLogger("trainbox")

SMALL_FILES = ("status.json", "metrics.jsonl", "results.csv", "summary.json", "train_config.yaml")
# What makes a folder a run to `libreyolo monitor` (libreyolo.ui.train_monitor._RUN_MARKERS).
MONITOR_MARKERS = ("status.json", "metrics.jsonl", "results.csv")


def publish(run_dir: Path, epoch: int | None = None, *, failed: bool = False) -> dict[str, Any]:
    """Copy the run's current files into its published folder and index them as ``epoch``'s
    (None: the last published epoch's again, with what was added since); unchanged ones are
    kept.
    ``failed``: training raised; its train.log joins the small files, and the weights stay
    as last published (a file being saved when it raised may be torn)."""
    out = folder(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    before = read_index(run_dir)
    sources = [run_dir / name for name in (*SMALL_FILES, *(("train.log",) if failed else ()))]
    if failed:
        sources += [out / name for name in before["files"] if name.endswith(".pt")]
    else:
        sources += sorted((run_dir / "weights").glob("*.pt"))
        sources += sorted((run_dir / "export").glob("*"))  # EXPORT's files, after training
        sources += sorted((run_dir / "tensorboard").glob("*"))  # loggers=tensorboard's events
    files = {}
    for source in sources:
        if not source.is_file():
            continue
        target = out / source.name
        if source == target or (
            target.is_file() and source.name in before["files"] and copied(source, target)
        ):
            files[source.name] = before["files"][source.name]
            continue
        files[source.name] = copy_atomic(source, target)
    if (out / MANIFEST).is_file():
        files[MANIFEST] = sha256(out / MANIFEST)
    index = {"epoch": before["epoch"] if epoch is None else epoch, "files": files}
    write_index(run_dir, index)
    return index


def provenance(cfg: Any, verdict: dict[str, Any], dataset: dict[str, Any] | None) -> dict:
    """Where a run's weights come from: versions, hardware, dataset, settings. No secrets:
    the settings hold none (HF_TOKEN is read from the environment only where it is used)."""
    from importlib.metadata import version

    from entrypoint import __version__
    from entrypoint.settings import options

    return {
        "run": cfg.run_name,
        "trainbox": __version__,
        "libreyolo": version("libreyolo"),
        "torch": verdict.get("torch"),
        "cuda": verdict.get("torch_cuda"),
        "driver": verdict.get("driver"),
        "gpus": [card["name"] for card in verdict.get("gpus", [])],
        "dataset": dataset,
        "train_options": options.effective(cfg),
        "settings": {key: str(value) for key, value in vars(cfg).items()},
    }


def final_cost(volume: Volume, run_dir: Path, now: float) -> dict[str, Any] | None:
    """This container's cost at its end, its last epoch's seconds from LibreYOLO's status;
    None while no price is known."""
    seconds = progress.training(run_dir)[0].get("epoch_seconds")
    return cost.container(volume, now, training_over=True, epoch_seconds=seconds)


class Publisher:
    """The training callback that publishes after every epoch and at the end.

    A plain class at module level: under DDP, callbacks must be picklable. libreyolo calls it
    on the main process only.
    """

    def __init__(self, volume: Volume | None = None) -> None:
        self.epoch = 0  # the last epoch finished in this process
        self._copying: threading.Thread | None = None  # the last epoch's copy
        # Where this container's price is kept: each epoch's copy carries what the container
        # has cost so far in the manifest, so a preempted container's spend is on the Hub.
        self.volume = volume

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_copying": None}  # a thread does not pickle (DDP)

    def on_train_epoch_end(self, event: Any) -> None:
        """Copy the epoch in a thread; the step waits only for the epoch before's copy."""
        self.epoch = event.epoch
        self.wait()
        run_dir, last = Path(event.save_dir), event.epoch >= event.total_epochs
        self._copying = threading.Thread(target=self._publish, name="publish",
                                         args=(run_dir, event.epoch, last,
                                               event.epoch_seconds))  # fmt: skip
        self._copying.start()

    def _publish(self, run_dir: Path, epoch: int, last: bool = False,
                 seconds: float | None = None) -> None:  # fmt: skip
        try:
            if self.volume:  # the cost so far, and the watchdog's first epoch's notice
                spent = cost.container(self.volume, time.time(), training_over=False,
                                       epoch_seconds=seconds)  # fmt: skip
                keep(run_dir, costs=spent,
                       notified=store.notified(self.volume.root, run_dir.name))  # fmt: skip
            publish(run_dir, epoch)
        except SourceChanged as err:
            follows = "the end of training's copy" if last else "the next epoch's copy"
            log.info("epoch %d not published: %s; %s follows", epoch, err, follows)
        except Exception as err:  # in a thread: said, and the next epoch tries again
            log.error("publishing epoch %d failed: %s: %s", epoch, type(err).__name__, err)

    def wait(self) -> None:
        """Until the last epoch's copy is done."""
        if self._copying is not None:
            self._copying.join()

    def on_train_end(self, event: Any) -> None:
        """The run's last epoch: libreyolo's ``completed_epochs`` counts only this session's
        epochs (``len(trainer.epoch_events)``), which after a resume is fewer."""
        self.wait()
        run_dir = Path(event.save_dir)
        publish(run_dir, max(self.epoch, read_index(run_dir)["epoch"]))

    def on_train_exception(self, event: Any) -> None:
        """A failure publishes its train.log with the traceback; a stop (SIGINT) is no failure."""
        self.wait()
        if not isinstance(event.exception, KeyboardInterrupt):
            run_dir = Path(event.save_dir)
            keep_traceback(run_dir, event.exception)
            publish(run_dir, failed=True)


def keep_traceback(run_dir: Path, err: BaseException) -> None:
    """The traceback of the error training raised, at the end of its train.log, once: LibreYOLO
    logs one line of it there, and the error line trainbox prints points to this file."""
    if getattr(err, "_trainbox_kept", False):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "train.log").open("a") as log_file:  # LibreYOLO's log: appended, as it is
        log_file.write("".join(traceback.format_exception(err)))
    with contextlib.suppress(AttributeError):  # an exception that takes no attributes
        err._trainbox_kept = True  # type: ignore[attr-defined]
