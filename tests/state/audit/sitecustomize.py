"""Loaded into every Python process of a run under test (PYTHONPATH): records each file that
a trainbox module opens under the run-state folders, with the module that opened it, and each
``config.load`` (its ``trainbox.config.load`` audit event), with the process's command.

An observer only (``sys.addaudithook``; CPython's ``open`` event, which ``os.open`` raises
too): it changes nothing the run does. Active when ``TRAINBOX_AUDIT`` names its log.
"""

import os
import sys

LOG = os.environ.get("TRAINBOX_AUDIT")
ROOTS = tuple(filter(None, os.environ.get("TRAINBOX_AUDIT_ROOTS", "").split(os.pathsep)))
OWN = os.sep + "entrypoint" + os.sep


def _opener() -> str | None:
    """The trainbox module nearest the open, past the file helpers (entrypoint/files.py)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if OWN in name and not name.endswith(OWN + "files.py"):
            return name[name.rindex(OWN) + 1 :]
        frame = frame.f_back
    return None


def _record(line: str) -> None:
    with open(LOG, "a") as log:  # the hook's own open: LOG is skipped below
        log.write(line + "\n")


def _hook(event: str, args: tuple) -> None:
    if event == "trainbox.config.load":
        _record(f"config.load\t{os.getpid()}\t{' '.join(sys.argv)}")
        return
    if event != "open" or not isinstance(args[0], str | bytes | os.PathLike):
        return
    path = os.fsdecode(args[0])
    if not path.startswith(ROOTS) or path == LOG:
        return
    if opener := _opener():
        _record(f"open\t{opener}\t{path}")


if LOG and ROOTS:
    sys.addaudithook(_hook)
