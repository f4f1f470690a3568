"""Exit codes and the one error type every module raises for a user-facing failure."""

from enum import IntEnum


class ExitCode(IntEnum):
    """The container's exit codes (docs/exit-codes.md, generated from ``MEANINGS``)."""

    OK = 0
    TRAINING_FAILED = 1
    CONFIG = 2
    DATASET = 3
    DISK = 4
    HUB = 5
    PREFLIGHT = 6
    UPLOAD = 7
    TIME_LIMIT = 8
    STALLED = 9
    NODE_LOST = 10
    VOLUME_IN_USE = 11
    BUDGET = 12
    OUT_OF_MEMORY = 13
    INTERRUPTED = 130


# What each code means, and what to do: docs/exit-codes.md is generated from this.
MEANINGS: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: (
        "training completed (or the run had already completed)",
        "fetch `runs/RUN_NAME/weights/`",
    ),
    ExitCode.TRAINING_FAILED: (
        "training failed",
        "read the last lines of `docker logs` and `runs/RUN_NAME/train.log`",
    ),
    ExitCode.CONFIG: (
        "a setting is invalid, or a resume would continue on other data than the run's",
        "fix the key the error line names",
    ),
    ExitCode.DATASET: (
        (
            "the dataset cannot be used: not found, no access, bad token, unsafe or broken "
            "tar, no `data.yaml`, doctor found errors"
        ),
        "the error line says which; nothing already staged was touched",
    ),
    ExitCode.DISK: (
        (
            "not enough space on `/workspace`: checked before staging for everything the run "
            "will still write, and again as the dataset's download starts; nothing was written"
        ),
        "give the volume more space (the line gives the numbers; `trainbox plan disk` the sum)",
    ),
    ExitCode.HUB: (
        (
            "the Hub could not be asked (no connection, timeouts, 429, 5xx) for `HUB_WAIT` "
            "seconds; nothing was trained or committed"
        ),
        (
            "start again later; without `OUTPUT_REPO`, a dataset staged earlier is used "
            "without the Hub"
        ),
    ),
    ExitCode.PREFLIGHT: (
        (
            "preflight: this machine cannot train as configured (no GPU, driver older than "
            "the build, no kernels for the card, a failing card, `/dev/shm` too small, volume"
            " not writable)"
        ),
        "the error line names the fix, e.g. the image tag to use",
    ),
    ExitCode.UPLOAD: (
        (
            "`OUTPUT_REPO` cannot be written (bad or read-only token), or the final upload "
            "failed: weights are only on the volume (also when the Hub holds a later epoch "
            "than this volume: it is never overwritten); or the run's `last.pt` on "
            "`OUTPUT_REPO` does not load"
        ),
        (
            "fix the token; after a failed final upload, start the container again on the "
            "same volume to push what is left (or resume from the Hub's); a `last.pt` that "
            "does not load: set a new `RUN_NAME`, or delete the run there"
        ),
    ),
    ExitCode.TIME_LIMIT: (
        (
            "`MAX_RUNTIME` reached: the run was stopped; during training, after the last "
            "finished epoch was uploaded (with `OUTPUT_REPO`)"
        ),
        "start again with a larger `MAX_RUNTIME` (or `0`); it resumes",
    ),
    ExitCode.STALLED: (
        (
            "no progress for `STALL_TIMEOUT` seconds (a stuck download, a hung dataloader, "
            "disk or GPU); during training, the last finished epoch was uploaded (with "
            "`OUTPUT_REPO`)"
        ),
        (
            "the error line and `trainbox status` give the diagnosis; raise `STALL_TIMEOUT` "
            "if an epoch really takes that long"
        ),
    ),
    ExitCode.NODE_LOST: (
        (
            "a job of several machines lost a node (the line names the silent rank), or not "
            "every node joined within `RDZV_TIMEOUT`"
        ),
        (
            "start every node again, same `NNODES`, `MASTER_ADDR`, `MASTER_PORT`; it resumes "
            "from the last uploaded epoch"
        ),
    ),
    ExitCode.VOLUME_IN_USE: (
        "another trainbox container is using this volume (the line names it)",
        "stop that one, or give this container a volume of its own",
    ),
    ExitCode.BUDGET: (
        (
            "`MAX_COST` reached: at an epoch's end the next epoch would have passed the "
            "budget, so training stopped and the last epoch was uploaded first; or the run "
            "had already spent it, and nothing was staged or trained"
        ),
        "raise `MAX_COST` (or set `0`) and start again; it resumes",
    ),
    ExitCode.OUT_OF_MEMORY: (
        (
            "out of memory: the kernel killed a training process (the trainer, a dataloader "
            "worker, the preflight or the evaluation) at the container's memory limit; after "
            "dataloader workers, training first resumed with `WORKERS` halved, twice at most; "
            "the last finished epoch was uploaded (with `OUTPUT_REPO`)"
        ),
        (
            "the line gives the limit and the peak: fewer `WORKERS`, a smaller `BATCH` or "
            "`IMGSZ`, or a machine with more memory; it resumes"
        ),
    ),
    ExitCode.INTERRUPTED: (
        "stopped by SIGTERM or SIGINT (`docker stop`)",
        "start it again",
    ),
}


class TrainboxError(Exception):
    """A failure with a one-line message that says what to do, and its exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
