"""The container's status, readable from outside: what it is doing, and since when.

``/workspace/trainbox/status.json`` (a few hundred bytes, kept by ``state.store``) says what
the container is doing: ``phase`` (``preflight``, ``resuming``, ``staging``, ``training``,
``uploading``, ``evaluating`` (best.pt scored, after its upload), then ``completed``,
``budget`` (MAX_COST), ``failed`` or ``interrupted``; ``phases`` lists each with
the time it began), the GPU verdict, staging bytes/rate/ETA, the training epoch/ETA/metrics
(from libreyolo's status.json), the upload state (from the uploader's ledger),
``progress_at`` (the last sign of progress, for the watchdog and the health check),
timestamps, and the exit code and reason.

Its writers (the job, the ``watchdog`` program, the uploader's final flush) take the store's
lock for each change. In a job of several machines, node 0's is the run's status, and every
other node keeps its own, ``status-nodeN.json``, for its own watchdog and health check.
"""

from typing import Any

from entrypoint.settings.launchers import Volume
from entrypoint.state import store

ENDED = {0: "completed", 8: "interrupted", 12: "budget", 130: "interrupted"}
# What a new start of the same run keeps of the last status: the run's own figures, which a
# start that ends at once (a budget reached, a completed run, a bad setting) must not lose.
SURVIVE = ("training", "cost", "evaluation", "card", "billed", "gpu_energy")
ACTIVE = ("preflight", "resuming", "staging", "training", "uploading", "evaluating")


def read(volume: Volume) -> dict[str, Any]:
    return store.status(volume)


def record(volume: Volume, phase: str, *, fresh: bool = False, **fields: Any) -> None:
    """Set the container's phase and fields; ``fresh`` starts a new status (a new start),
    keeping the same run's figures (``SURVIVE``). A new phase counts as progress."""

    def change(kept: dict[str, Any]) -> dict[str, Any]:
        if fresh:  # a new start: of the same run, its figures stay
            same = kept.get("run") == fields.get("run")
            kept = {k: kept[k] for k in SURVIVE if same and k in kept}
        now, new = store.stamp(), dict(fields)
        if kept.get("phase") != phase:
            new["phases"] = [*kept.get("phases", []), [phase, now]]  # the run's timeline
            new["progress_at"] = new.get("progress_at") or now
            kept.pop("waiting", None)  # a wait for the Hub belongs to the phase it happened in
        return {"started_at": now, **kept, **new, "phase": phase, "updated_at": now}

    store.update_status(volume, change)


def note(volume: Volume, **fields: Any) -> None:
    """Set fields, the phase staying as it is (e.g. ``waiting``: why a step waits)."""

    def change(kept: dict[str, Any]) -> dict[str, Any]:
        return {**kept, **fields, "phase": kept.get("phase", "preflight"),
                "updated_at": store.stamp()}  # fmt: skip

    store.update_status(volume, change)


def ended(code: int) -> str:
    """The final phase for an exit code."""
    return ENDED.get(code, "failed")


def health(status: dict[str, Any], now: float | None = None) -> str | None:
    """Why the container is unhealthy, or None: a failed run, or no progress for half of
    STALL_TIMEOUT (the watchdog stops it at the whole)."""
    if status.get("phase") == "failed":
        return f"failed: {status.get('reason') or 'exit code ' + str(status.get('exit_code'))}"
    stall = status.get("limits", {}).get("stall_timeout", 0)
    quiet = store.age(status.get("progress_at"), now)
    if stall and status.get("phase") in ACTIVE and quiet is not None and quiet > stall / 2:
        return f"no progress for {quiet:.0f} s in {status['phase']} (STALL_TIMEOUT={stall})"
    return None
