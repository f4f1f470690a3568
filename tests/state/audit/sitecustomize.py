"""Loaded into every Python process of a run under test (PYTHONPATH): records each file that
a trainbox module opens under the run-state folders, with the module that opened it.

An observer only (``sys.addaudithook``, CPython's ``open`` event, which ``os.open`` raises
too): it changes nothing the run does. Active when ``TRAINBOX_AUDIT`` names its log.
"""

import os
import sys

LOG = os.environ.get("TRAINBOX_AUDIT")
ROOTS = tuple(filter(None, os.environ.get("TRAINBOX_AUDIT_ROOTS", "").split(os.pathsep)))
OWN = os.sep + "entrypoint" + os.sep


def _opener() -> str | None:
    """The trainbox module nearest the open, past the atomic-write helpers."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if OWN in name and not name.endswith(os.sep + "atomic.py"):
            return name[name.rindex(OWN) + 1 :]
        frame = frame.f_back
    return None


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not isinstance(args[0], str | bytes | os.PathLike):
        return
    path = os.fsdecode(args[0])
    if not path.startswith(ROOTS) or path == LOG:
        return
    if opener := _opener():
        with open(LOG, "a") as log:  # the hook's own open: not under ROOTS
            log.write(f"{opener}\t{path}\n")


if LOG and ROOTS:
    sys.addaudithook(_hook)
