"""Exit codes and the one error type every module raises for a user-facing failure."""

from enum import IntEnum


class ExitCode(IntEnum):
    """The container's exit codes; the README's table lists the same."""

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
    INTERRUPTED = 130


class TrainboxError(Exception):
    """A failure with a one-line message that says what to do, and its exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
